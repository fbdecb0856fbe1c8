"""Our compiled training step against an independent PyTorch one (transformers' ELECTRA classes).

Two steps: ELECTRA's (generator and discriminator over one embedding block) and the MLM
baseline's (config.objective='mlm': one discriminator-sized masked LM). Same initial weights, batch, masks and sampled replacements on both sides, float32, dropout off:
the losses, every unclipped gradient, and every parameter after each of 3 optimizer steps must
agree to RTOL relative, ATOL absolute (|ours - torch| <= ATOL + RTOL * |torch| for every
element). The PyTorch side is tests/torch_reference.py: transformers' networks and masked-LM
loss, the replaced-token loss and the optimizer written anew in torch.

The masks and samples are drawn inside our jitted step from its key; the test draws them again
outside, with the same function and key (the trainer passes fold_in(state.rng, step) and the step
calls objective.draw with it), and feeds them to torch. That these are the step's own draws is
checked through the step's statistics (selected, replaced and correctly-sampled counts), and a
single differing sample would break the loss comparison.

Measured (CPU): the worst element of the gradients reaches 0.1-0.3 of the tolerance (0.4 with
other weights), the parameters < 0.1, the losses ~0.01. The gradient differences are float32
rounding in different summation orders, not a difference of method: against the same torch step
in float64, ours and torch's float32 gradients are equally far off (5e-7 to 8e-7 per tensor,
relative to its largest element). Elements that are sums with cancellation (token-type
embedding rows, the discriminator's last kernel) differ by up to ~6e-5 relative at magnitudes
~3e-3, inside the absolute part of the tolerance. The attention key biases have a true gradient
of exactly 0 (softmax ignores a shift shared by all keys); both sides hold rounding noise there
(~1e-12), far inside ATOL.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from conftest import load_config
from electra_jax import objective
from electra_jax.training import optim
from electra_jax.training import train
from test_hf import pair_batch
import torch_reference

RTOL, ATOL = 1e-5, 1e-6
STEPS = 3


def tiny_config(name):
  """A tiny model with E != H (embeddings_project runs), two layers, and a 4-row padded batch."""
  config = load_config('tiny')
  config.objective = name
  config.model.update(vocab_size=200, embedding_size=32, hidden_size=48, num_layers=2,
                      num_heads=2, intermediate_size=96, generator_hidden_size=0.5,
                      max_position_embeddings=32, dropout_rate=0.0, attention_dropout_rate=0.0)
  config.batch_size, config.max_seq_length = 4, 24
  config.mask_prob = 0.25  # 6 slots of 24 positions
  # Step 0 has learning rate 0 (warmup), steps 1 and 2 rise and decay: the schedule is exercised.
  config.learning_rate, config.warmup_steps, config.num_train_steps = 2e-3, 2, 10
  # Larger than the usual 0.01 so that the decay term (lr * wd * p ~ 5e-6) stands out of the
  # tolerance: decay applied to a LayerNorm parameter or a bias, or missing, must show.
  config.weight_decay = 0.1
  return config


def worst_mismatch(ours, theirs):
  """(ratio, where) for the element furthest outside the tolerance; ratio <= 1 passes."""
  assert jax.tree.structure(ours) == jax.tree.structure(theirs)
  worst = (0.0, 'nothing')
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(ours), jax.tree.leaves(theirs)):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (jax.tree_util.keystr(path), a.shape, b.shape)
    ratio = np.abs(a - b) / (ATOL + RTOL * np.abs(b))
    index = np.unravel_index(np.argmax(ratio), ratio.shape)
    if ratio[index] > worst[0]:
      worst = (float(ratio[index]), f'{jax.tree_util.keystr(path)}{list(index)}: ours '
               f'{a[index]:.9g}, torch {b[index]:.9g}')
  return worst


def assert_close(ours, theirs, what):
  ratio, where = worst_mismatch(ours, theirs)
  print(f'{what}: worst element at {ratio:.3f} of the tolerance, {where}')
  assert ratio <= 1.0, f'{what} differs beyond {RTOL} rel / {ATOL} abs: {where}'


def recording(optimizer):
  """`optimizer` behind a stage that keeps, in the state, the gradients the step handed it.

  They are the step's own unclipped gradients (clipping is the optimizer's first stage), read
  without computing them a second time.
  """
  def init(params):
    return jax.tree.map(jnp.zeros_like, params), optimizer.init(params)

  def update(grads, state, params=None):
    updates, inner = optimizer.update(grads, state[1], params)
    return updates, (grads, inner)
  return optax.GradientTransformation(init, update)


def random_state(config, model, optimizer, replicated):
  """A train state with random parameters: no bias is 0 and no LayerNorm scale 1, so weight
  decay wrongly applied to them, or a swapped tensor, changes the result."""
  shapes = train.abstract_train_state(config, model, optimizer, replicated).params
  rng = np.random.default_rng(0)
  params = jax.tree_util.tree_map_with_path(
      lambda path, leaf: ((jax.tree_util.keystr(path).endswith("['scale']"))
                          + rng.normal(0, 0.05, leaf.shape)).astype(np.float32), shapes)
  state = train.TrainState(step=np.int32(0), params=params, opt_state=optimizer.init(params),
                           rng=jax.random.PRNGKey(config.seed))
  return jax.device_put(state, replicated), params


def our_draws(model, config):
  """A jitted (params, batch, step key) -> (masked, sampled or None): what train_step draws."""
  @jax.jit
  def draws(params, batch, rng):
    prepared, _ = objective.draw(rng, batch['input_ids'], config)
    masked = prepared.masked
    if config.objective != 'electra':
      return masked, None
    logits = model.apply({'params': params}, masked.input_ids, batch['segment_ids'],
                         masked.positions, True, method='generate')
    return masked, objective.sample_replacements(prepared.sample_keys, logits,
                                                 config.temperature)
  return draws


def as_torch(masked, sampled):
  long = lambda x: None if x is None else torch.from_numpy(np.asarray(x, np.int64))
  return torch_reference.Draws(long(masked.input_ids), long(masked.positions),
                               torch.from_numpy(np.array(masked.weights)), long(masked.targets),
                               long(sampled))


def compare_steps(config, make_nets, torch_losses, check_draws):
  """STEPS of our compiled step and of the torch step from one random state, compared as they go.

  make_nets(params) -> torch networks; torch_losses(nets, ids, segments, draws) -> (losses named
  as our step's statistics, 'loss' the one to minimise; labels); check_draws(stats,
  input_ids, masked, sampled, labels) checks that torch was given what the step drew. Returns
  the batch's ids and every step's draws.
  """
  mesh = train.make_mesh(jax.devices()[:1])
  model, optimizer = train.make_model(config), recording(optim.make_optimizer(config))
  step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
  state, initial = random_state(config, model, optimizer, replicated)
  input_ids, segment_ids = pair_batch(config.model.vocab_size, length=config.max_seq_length)
  assert (input_ids == 0).any() and segment_ids.any()  # padding and two segments
  batch = {'input_ids': input_ids, 'segment_ids': segment_ids}
  draws = our_draws(model, config)

  nets = make_nets(initial)
  named = torch_reference.parameters(nets)
  # One torch Parameter per leaf of our tree (shared and tied tensors are one object, not
  # copies), holding exactly our initial values.
  assert len(named) == len(jax.tree.leaves(initial))
  assert jax.tree.all(jax.tree.map(np.array_equal, torch_reference.to_our_tree(nets, initial),
                                   initial))
  adam = torch_reference.adam_init(named)
  ids, segments = (torch.from_numpy(x.astype(np.int64)) for x in (input_ids, segment_ids))
  drawn = []
  for i in range(STEPS):
    rng = jax.random.fold_in(state.rng, i)  # as train.train_and_evaluate
    masked, sampled = jax.device_get(draws(state.params, batch, rng))
    before = jax.device_get(state.params)
    state, stats = step(state, jax.device_put(batch, batch_sharding), rng)
    stats, grads, after = jax.device_get((stats, state.opt_state[0], state.params))

    for p in named.values():
      p.grad = None
    losses, labels = torch_losses(nets, ids, segments, as_torch(masked, sampled))
    losses['loss'].backward()
    assert stats['mlm_count'] == masked.weights.sum() > 0
    check_draws(stats, input_ids, masked, sampled, labels)
    drawn.append((masked, sampled))

    assert_close({k: stats[k] for k in losses}, {k: v.item() for k, v in losses.items()},
                 f'step {i}: losses')
    assert_close(grads, torch_reference.gradients_as_our_tree(nets, before),
                 f'step {i}: unclipped gradients')
    adam = torch_reference.adamw_update(named, adam, config)
    assert_close(after, torch_reference.to_our_tree(nets, after), f'step {i}: params after')

  # The steps did train: every parameter moved (step 0's learning rate is 0), except attention
  # key biases, whose true gradient is 0.
  moved = jax.tree_util.tree_map_with_path(
      lambda path, a, b: "['key']['bias']" in jax.tree_util.keystr(path)
      or not np.array_equal(a, b), after, initial)
  assert all(jax.tree.leaves(moved)), moved
  return input_ids, drawn


def test_electra_step_matches_pytorch():
  config = tiny_config('electra')

  def torch_losses(nets, ids, segments, draws):
    loss, mlm_loss, disc_loss, labels = torch_reference.electra_loss(
        nets, ids, segments, draws, config.gen_weight, config.disc_weight)
    return {'loss': loss, 'mlm_loss': mlm_loss, 'disc_loss': disc_loss}, labels.numpy()

  def check_draws(stats, input_ids, masked, sampled, labels):
    # Torch's replaced/original labels are ours, and the step counted the same.
    _, our_labels = objective.replace_and_label(jnp.asarray(input_ids), masked, sampled)
    np.testing.assert_array_equal(labels, np.asarray(our_labels))
    assert stats['replaced_count'] == np.sum(labels * (input_ids != 0)) > 0
    assert stats['sampled_correct'] == np.sum((sampled == masked.targets) * masked.weights)

  compare_steps(config, lambda params: torch_reference.electra_networks(params, config.model),
                torch_losses, check_draws)


def test_mlm_step_matches_pytorch():
  config = tiny_config('mlm')

  def torch_losses(nets, ids, segments, draws):
    loss = torch_reference.masked_lm_loss(nets['mlm'], segments, draws)
    return {'loss': loss, 'mlm_loss': loss}, None

  def check_draws(stats, input_ids, masked, sampled, labels):
    assert sampled is None and labels is None
    rows = np.arange(len(input_ids))[:, None]
    np.testing.assert_array_equal(masked.targets, input_ids[rows, masked.positions])

  input_ids, drawn = compare_steps(
      config, lambda params: {'mlm': torch_reference.network(params, config.model, 'mlm')},
      torch_losses, check_draws)
  # BERT's corruption ran in full: over the steps, selected positions became [MASK], random
  # tokens and stayed unchanged; positions not selected were never touched.
  written = collections.Counter()
  for masked, _ in drawn:
    selected = masked.weights > 0
    rows = np.arange(len(input_ids))[:, None]
    seen = masked.input_ids[rows, masked.positions][selected]
    original = masked.targets[selected]
    written.update(np.where(seen == objective.SpecialIds().mask, 'mask',
                            np.where(seen == original, 'kept', 'random')))
    untouched = np.ones(input_ids.shape, bool)
    untouched[rows.repeat(masked.positions.shape[1], 1)[selected], masked.positions[selected]] = False
    np.testing.assert_array_equal(masked.input_ids[untouched], input_ids[untouched])
  print(f'MLM corruption over {STEPS} steps: {dict(written)}')
  assert written['mask'] and written['random'] and written['kept'], written
