"""The compiled train step on a device mesh: data parallelism must not change the math."""

import jax
import numpy as np

from conftest import load_config
from electra_jax import optim, train
from electra_jax.model import Electra
from test_objective import packed_like_sequences


def run_steps(devices, config, batches):
  mesh = train.make_mesh(devices)
  model = Electra(config.model)
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
  for a, b in zip(jax.tree.leaves(params_4), jax.tree.leaves(params_1)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  # The steps did change the parameters (so equality is not trivially true).
  _, initial = run_steps(jax.devices()[:1], config, [])
  assert not np.allclose(jax.tree.leaves(initial)[0], jax.tree.leaves(params_1)[0])
