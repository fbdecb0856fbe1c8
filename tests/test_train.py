"""The compiled train step on a device mesh: data parallelism must not change the math."""

import jax
import numpy as np

from conftest import load_config
from electra_jax import optim, train
from test_objective import packed_like_sequences


def run_steps(devices, config, batches):
  mesh = train.make_mesh(devices)
  model = train.make_model(config)
  optimizer = optim.make_optimizer(config)
  step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
  state = train.create_train_state(config, model, optimizer, replicated)
  losses = []
  for i, batch in enumerate(batches):
    batch = {k: jax.device_put(v, batch_sharding) for k, v in batch.items()}
    state, stats = step(state, batch, jax.random.fold_in(state.rng, i))
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
  # Relative per tensor (elementwise, near-zero entries magnify reduction-order noise through
  # Adam's normalisation). The attention key biases are the exception: their true gradient is
  # exactly zero (softmax ignores a shift shared by all keys), so they hold only rounding noise
  # (~1e-12 gradients, ~1e-9 values after Adam) and are held to an absolute bound instead.
  errors, key_bias_errors = [], []
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(params_4), jax.tree.leaves(params_1)):
    if "['key']['bias']" in jax.tree_util.keystr(path):
      key_bias_errors.append(np.abs(a - b).max())
    else:
      errors.append(np.abs(a - b).max() / np.abs(b).max())
  print(f'4 vs 1 device: losses {losses_4} vs {losses_1}; max relative parameter error '
        f'{max(errors):.2e} over {len(errors)} tensors; key biases within {max(key_bias_errors):.1e}')
  assert max(errors) <= 1e-5 and max(key_bias_errors) < 1e-7
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
