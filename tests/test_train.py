"""The compiled train step on a device mesh: data parallelism must not change the math."""

import re

import jax
import numpy as np
import pytest

from conftest import load_config
from electra_jax.common import config as config_lib
from electra_jax.model import networks as model_lib
from electra_jax.training import optim
from electra_jax.common.errors import UsageError
from electra_jax.objective import masking
from electra_jax.training import train
from test_objective import packed_like_sequences


def run_steps(devices, config, batches):
  """Steps as the training loop runs them: the step's key is train.step_key(state.rng, step)."""
  mesh = train.make_mesh(devices)
  model = train.make_model(config)
  optimizer = optim.make_optimizer(config)
  step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
  state = train.create_train_state(config, model, optimizer, replicated)
  losses = []
  for i, batch in enumerate(batches):
    batch = {k: jax.device_put(v, batch_sharding) for k, v in batch.items()}
    state, stats = step(state, batch, train.step_key(config, state.rng, i))
    losses.append(float(stats['loss']))
  return np.array(losses), jax.device_get(state.params)


def test_four_devices_equal_one_device_on_the_same_global_batch():
  assert jax.device_count() >= 4, 'conftest asks for 4 simulated CPU devices'
  config = load_config('tiny')
  config.model.vocab_size, config.max_seq_length, config.batch_size = 300, 32, 8
  config.warmup_steps = 0  # a non-zero learning rate from the first step
  rng = np.random.default_rng(0)
  batches = [{'input_ids': ids, 'segment_ids': np.zeros_like(ids)}
             for ids in (packed_like_sequences(rng, 8, 32, vocab=300).astype(np.int32)
                         for _ in range(2))]
  losses_1, params_1 = run_steps(jax.devices()[:1], config, batches)
  losses_4, params_4 = run_steps(jax.devices()[:4], config, batches)
  np.testing.assert_allclose(losses_4, losses_1, rtol=1e-5)
  error, key_bias_error = compare_params(params_4, params_1)
  print(f'4 vs 1 device: losses {losses_4} vs {losses_1}; max relative parameter error '
        f'{error:.2e}; key biases within {key_bias_error:.1e}')
  assert error <= 1e-5 and key_bias_error < 1e-7
  # The steps did change the parameters (so equality is not trivially true).
  _, initial = run_steps(jax.devices()[:1], config, [])
  assert not np.allclose(jax.tree.leaves(initial)[0], jax.tree.leaves(params_1)[0])


def test_bfloat16_computes_in_bfloat16_and_keeps_float32_parameters():
  config = load_config('tiny')
  config.model.vocab_size, config.max_seq_length, config.batch_size = 300, 32, 8
  config.warmup_steps = 0
  ids = packed_like_sequences(np.random.default_rng(0), 8, 32, vocab=300).astype(np.int32)
  batches = [{'input_ids': ids, 'segment_ids': np.zeros_like(ids)}]
  losses_32, _ = run_steps(jax.devices()[:1], config, batches)
  config.dtype = 'bfloat16'
  losses_16, params_16 = run_steps(jax.devices()[:1], config, batches)
  assert all(x.dtype == np.float32 for x in jax.tree.leaves(params_16))
  assert losses_16[0] != losses_32[0]  # bfloat16 really was used...
  np.testing.assert_allclose(losses_16, losses_32, rtol=0.02)  # ...and tracks float32 closely


def small_config(batch_size=8, **overrides):
  config = load_config('tiny')
  config.model.vocab_size, config.max_seq_length, config.batch_size = 300, 32, batch_size
  config.warmup_steps = 0
  config.update(overrides)
  return config


def random_batches(count, batch_size, seed=0):
  rng = np.random.default_rng(seed)
  return [{'input_ids': ids, 'segment_ids': (np.arange(32) >= 16).astype(np.int32)[None].repeat(
      batch_size, 0) * (ids != 0)}
          for ids in (packed_like_sequences(rng, batch_size, 32, vocab=300).astype(np.int32)
                      for _ in range(count))]


def compare_params(params_a, params_b):
  """(max relative error per tensor, max absolute error of the attention key biases).

  Relative per tensor, because elementwise near-zero entries magnify reduction-order noise
  through Adam's normalisation. The attention key biases are apart: their true gradient is
  exactly zero (softmax ignores a shift shared by all keys), so they hold only rounding noise
  (~1e-12 gradients, ~1e-9 values after Adam) and are held to an absolute bound instead.
  """
  errors, key_bias_errors = [0.0], [0.0]
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(params_a), jax.tree.leaves(params_b)):
    if "['key']['bias']" in jax.tree_util.keystr(path):
      key_bias_errors.append(np.abs(a - b).max())
    else:
      errors.append(np.abs(a - b).max() / np.abs(b).max())
  return max(errors), max(key_bias_errors)


def test_gradient_accumulation_equals_the_large_batch():
  config = small_config(batch_size=32)
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.0  # dropout masks differ
  batches = random_batches(2, 32)
  losses_full, params_full = run_steps(jax.devices()[:4], config, batches)
  config.grad_accum_steps = 4  # 4 micro-batches of 8, each spread over the 4 devices
  losses_accum, params_accum = run_steps(jax.devices()[:4], config, batches)
  error, key_bias_error = compare_params(params_accum, params_full)
  print(f'accumulation 4 x 8 vs 32: losses {losses_accum} vs {losses_full}; params {error:.1e}')
  np.testing.assert_allclose(losses_accum, losses_full, rtol=1e-5)
  assert error <= 1e-5 and key_bias_error < 1e-7


def test_mlm_step_on_4_devices_in_micro_batches_equals_one_device():
  """objective=mlm through the same step: sharding and accumulation leave its update unchanged."""
  config = small_config(batch_size=16, objective='mlm')
  config.model.num_layers = 1  # what is tested is the step around the network: compile less
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.0  # dropout masks differ
  batches = random_batches(2, 16)
  losses_one, params_one = run_steps(jax.devices()[:1], config, batches)
  config.grad_accum_steps = 2  # 2 micro-batches of 8, each spread over the 4 devices
  losses_four, params_four = run_steps(jax.devices()[:4], config, batches)
  assert set(params_four) == {'embeddings', 'discriminator', 'mlm_head'}
  error, key_bias_error = compare_params(params_four, params_one)
  print(f'mlm, 4 devices x 2 micro-batches vs 1 device: losses {losses_four} vs {losses_one}; '
        f'params {error:.1e}')
  np.testing.assert_allclose(losses_four, losses_one, rtol=1e-5)
  assert error <= 1e-5 and key_bias_error < 1e-7
  # The steps did change the parameters (so equality is not trivially true).
  init_rng = jax.random.split(jax.random.PRNGKey(config.seed))[0]
  initial = model_lib.init_params(train.make_model(config), init_rng, 32)
  kernel = lambda params: np.asarray(params['mlm_head']['dense']['kernel'])
  assert not np.allclose(kernel(initial), kernel(params_one))


def test_temperature_schedule_samples_each_step_at_its_own_temperature():
  """config.temperature_start: step s samples at start + (temperature - start) * s / steps.

  A scheduled run must equal, step by step, runs at a fixed temperature that happens to be the
  schedule's value at that step; and it must differ from the run at the final temperature, so
  the schedule really was applied.
  """
  config = small_config(batch_size=8, num_train_steps=2, temperature=1.0, temperature_start=3.0)
  config.model.num_layers = 1  # what is tested is the sampling around the network
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.0  # accumulation below
  assert [float(masking.scheduled_temperature(config, s)) for s in (0, 1, 2, 5)] == [
      3.0, 2.0, 1.0, 1.0]
  batches = random_batches(2, 8)
  mesh = train.make_mesh(jax.devices()[:1])
  model, optimizer = train.make_model(config), optim.make_optimizer(config)

  compiled = {}

  def steps(configs):
    """One step under each config in turn, from the same initial state."""
    state, losses = None, []
    for i, (step_config, batch) in enumerate(zip(configs, batches)):
      if id(step_config) not in compiled:  # the config is kept, so its id is not reused
        compiled[id(step_config)] = (step_config, train.compile_steps(step_config, model,
                                                                      optimizer, mesh))
      step, _, replicated, sharding = compiled[id(step_config)][1]
      state = state or train.create_train_state(step_config, model, optimizer, replicated)
      state, stats = step(state, {k: jax.device_put(v, sharding) for k, v in batch.items()},
                          train.step_key(config, state.rng, i))
      losses.append(float(stats['loss']))
    return np.array(losses), jax.device_get(state.params)

  def but(**fields):
    changed = config.copy_and_resolve_references()
    changed.update(fields)
    return changed

  fixed = lambda t: but(temperature=t, temperature_start=0.0)
  scheduled_losses, scheduled = steps([config, config])
  stepwise_losses, stepwise = steps([fixed(3.0), fixed(2.0)])
  np.testing.assert_allclose(scheduled_losses, stepwise_losses, rtol=1e-6)
  assert max(compare_params(scheduled, stepwise)) <= 1e-6
  final_losses, _ = steps([fixed(1.0)] * 2)
  assert not np.allclose(scheduled_losses, final_losses, rtol=1e-4)
  # Micro-batches share the step's temperature.
  accumulated_losses, accumulated = steps([but(grad_accum_steps=2)] * 2)
  np.testing.assert_allclose(accumulated_losses, scheduled_losses, rtol=1e-5)
  error, key_bias_error = compare_params(accumulated, scheduled)
  assert error <= 1e-5 and key_bias_error < 1e-7


def test_temperatures_that_cannot_be_sampled_at_are_refused():
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  config.temperature_start = 2.0
  config_lib.validate(config, 1)
  for fields, message in (({'temperature': 0.0}, r'temperature=0.0: use a value in \(0, inf\)'),
                          ({'temperature_start': -1.0}, r'temperature_start=-1.0: use a value in'),
                          ({'objective': 'mlm'}, "this run has none \\(objective 'mlm'"),
                          ({'generator_kind': 'unigram'}, "generator_kind 'unigram'")):
    changed = config.copy_and_resolve_references()
    changed.update(fields)
    with pytest.raises(UsageError, match=message):
      config_lib.validate(changed, 1)


def test_numbers_outside_their_meaning_are_refused_and_their_edges_are_not():
  """A dropout of 1, Adam's b2 of 1 or a mask rate above 1 would train without an error, on
  something else than was meant: each is refused, naming the field and its interval."""
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  edges = {'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0, 'weight_decay': 0.0,
           'adam_b1': 0.0, 'adam_eps': 0.0, 'warmup_steps': 0, 'disc_weight': 0.0,
           'mask_prob': 0.99, 'embedding_weight_decay': 0.0, 'stall_check_after': 0}
  config_lib.validate(config, 1)  # embedding_weight_decay unset (None): no interval to check
  for name, value in edges.items():
    changed = config.copy_and_resolve_references()
    changed.update_from_flattened_dict({name: value})
    config_lib.validate(changed, 1)
  refused = {'model.dropout_rate': (1.0, r'\[0, 1\)'),
             'model.attention_dropout_rate': (-0.1, r'\[0, 1\)'),
             'adam_b2': (1.0, r'\[0, 1\)'), 'weight_decay': (-0.01, r'\[0, inf\)'),
             'mask_prob': (1.5, r'\(0, 1\)'), 'learning_rate': (0.0, r'\(0, inf\)'),
             'max_grad_norm': (0.0, r'\(0, inf\)'), 'gen_weight': (float('nan'), r'\[0, inf\)'),
             'embedding_weight_decay': (-0.5, r'\[0, inf\)'),
             'stall_check_after': (-1, r'\[0, inf\)')}
  for name, (value, interval) in refused.items():
    changed = config.copy_and_resolve_references()
    changed.update_from_flattened_dict({name: value})
    with pytest.raises(UsageError, match=rf'config\.{name}={value}: use a value in {interval}'):
      config_lib.validate(changed, 1)


def test_remat_changes_nothing_but_memory():
  config = small_config()
  batches = random_batches(2, 8)
  losses, params = run_steps(jax.devices()[:1], config, batches)
  config.remat = True
  losses_remat, params_remat = run_steps(jax.devices()[:1], config, batches)
  np.testing.assert_allclose(losses_remat, losses, rtol=1e-6)
  error, key_bias_error = compare_params(params_remat, params)
  assert error <= 1e-5 and key_bias_error < 1e-7


def test_checkpoint_saved_on_4_devices_restores_on_2_and_1(tmp_path):
  from electra_jax.training import checkpoint  # pylint: disable=g-import-not-at-top
  config = small_config()
  batches = random_batches(4, 8)

  def setup(num_devices):
    mesh = train.make_mesh(jax.devices()[:num_devices])
    model, optimizer = train.make_model(config), optim.make_optimizer(config)
    step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
    return model, optimizer, step, replicated, batch_sharding

  def run(state, step, batch_sharding, start):
    losses = []
    for i in range(start, 4):
      batch = {k: jax.device_put(v, batch_sharding) for k, v in batches[i].items()}
      state, stats = step(state, batch, train.step_key(config, state.rng, i))
      losses.append(float(stats['loss']))
    return losses

  model, optimizer, step, replicated, batch_sharding = setup(4)
  state = train.create_train_state(config, model, optimizer, replicated)
  for i in range(2):
    batch = {k: jax.device_put(v, batch_sharding) for k, v in batches[i].items()}
    state, _ = step(state, batch, jax.random.fold_in(state.rng, i))
  manager = checkpoint.make_manager(str(tmp_path), keep=1)
  checkpoint.save(manager, 2, state)
  manager.wait_until_finished()
  expected = run(state, step, batch_sharding, 2)  # continuing on the 4 devices

  for num_devices in (2, 1):
    model, optimizer, step, replicated, batch_sharding = setup(num_devices)
    restored = checkpoint.restore_latest(
        manager, train.abstract_train_state(config, model, optimizer, replicated))
    assert int(restored.step) == 2
    assert restored.params['embeddings']['layer_norm']['scale'].sharding.num_devices == num_devices
    np.testing.assert_allclose(run(restored, step, batch_sharding, 2), expected, rtol=1e-5)
  manager.close()


def rebuilt_auc(model, params, batch, key, config, micro_batch=0):
  """batch_auc of the discriminator scores a train step with `key` computes, rebuilt by hand:
  the step's draw at its scheduled temperature, micro-batch `micro_batch` of grad_accum_steps
  (rows i, i + k, ...; dropout key fold_in(key, i))."""
  from electra_jax import objective  # pylint: disable=g-import-not-at-top
  from electra_jax.objective import electra  # pylint: disable=g-import-not-at-top
  special, batch = train.special_ids(config), jax.tree.map(jax.numpy.asarray, batch)
  prepared, dropout_rng = objective.draw(train.as_key(config, key), batch['input_ids'], config,
                                         special)
  prepared = prepared._replace(temperature=masking.scheduled_temperature(config, 0))
  k = config.grad_accum_steps
  if k > 1:
    rows = lambda x: None if x is None or x.ndim == 0 else x[micro_batch::k]
    batch = {name: x[micro_batch::k] for name, x in batch.items()}
    prepared = prepared._replace(masked=jax.tree.map(rows, prepared.masked),
                                 sample_keys=prepared.sample_keys[micro_batch::k])
    dropout_rng = jax.random.fold_in(dropout_rng, micro_batch)
  *_, disc_logits, labels = electra.generate_and_discriminate(
      model.apply, params, batch, prepared, dropout_rng, config, True)
  return float(electra.batch_auc(disc_logits, labels, (batch['input_ids'] != 0).astype(np.float32)))


@pytest.mark.parametrize('grad_accum_steps', [1, 2])
def test_the_logged_auc_is_the_exact_auc_of_the_steps_own_scores(grad_accum_steps):
  """The train step sorts no scores and returns no AUC; the loop's probe, given the step's state,
  batch and key, gives the exact AUC of the very scores the step computes (masks, samples at the
  scheduled temperature, dropout, micro-batches), and the step's other statistics alike."""
  config = small_config(temperature_start=3.0, grad_accum_steps=grad_accum_steps)
  mesh = train.make_mesh(jax.devices()[:1])
  model, optimizer = train.make_model(config), optim.make_optimizer(config)
  step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
  special = train.special_ids(config)
  probe = train.compile_auc_probe(config, model, mesh, special)
  state = train.create_train_state(config, model, optimizer, replicated)
  batch = {k: jax.device_put(v, batch_sharding) for k, v in random_batches(1, 8)[0].items()}
  key = train.step_key(config, state.rng, 0)
  logged = jax.device_get(probe(state, batch, key))
  forward = jax.device_get(jax.jit(lambda *args: train.forward_stats(
      *args, model=model, config=config, special=special))(state, batch, key))
  rebuilt = [rebuilt_auc(model, state.params, batch, key, config, i)
             for i in range(grad_accum_steps)]
  assert logged['auc_batches'] == grad_accum_steps and 0.0 < logged['disc_auc'] < grad_accum_steps
  np.testing.assert_allclose(logged['disc_auc'], sum(rebuilt), atol=1e-6)
  _, stats = jax.device_get(step(state, batch, key))
  assert 'disc_auc' not in stats and 'auc_batches' not in stats
  for name, value in stats.items():
    if name != 'nonfinite':
      np.testing.assert_allclose(forward[name], value, rtol=1e-5, err_msg=name)
  assert train.compile_auc_probe(small_config(objective='mlm'), model, mesh, special) is None


def sorted_types(lowered_text: str) -> list[str]:
  """The operand types of every sort in a lowered program (StableHLO text)."""
  return re.findall(r'"stablehlo\.sort"\(.*?\}\) : \(([^)]*)\)', lowered_text, re.DOTALL)


def test_the_train_step_sorts_no_token_scores_and_evaluation_does():
  """The AUC's sort of all B x L scores (on a slice, the step's one all-gather) is evaluation's
  and the logged steps' probe's, never the train step's."""
  config = load_config('tiny')
  mesh = train.make_mesh(jax.devices()[:1])
  model, optimizer = train.make_model(config), optim.make_optimizer(config)
  step, evaluate, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
  state = train.abstract_train_state(config, model, optimizer, replicated)
  batch = {k: jax.ShapeDtypeStruct((config.batch_size, config.max_seq_length), np.int32,
                                   sharding=batch_sharding) for k in ('input_ids', 'segment_ids')}
  key = jax.ShapeDtypeStruct(state.rng.shape, state.rng.dtype, sharding=replicated)
  scores = f'tensor<{config.batch_size * config.max_seq_length}xf32>'
  in_step = sorted_types(step.lower(state, batch, key).as_text())
  assert not any('f32' in types for types in in_step), in_step  # (nonfinite's flags are i1)
  assert any(scores in types for types in sorted_types(
      evaluate.lower(state.params, batch, key).as_text()))
  probe = train.compile_auc_probe(config, model, mesh, train.special_ids(config))
  assert any(scores in types for types in sorted_types(probe.lower(state, batch, key).as_text()))
