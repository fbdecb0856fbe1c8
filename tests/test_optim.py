"""The optimizer against the original's update rule, computed in float64 numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import load_config
from electra_jax.core import model as model_lib
from electra_jax.core import optim


def test_schedule_is_warmup_times_decay_from_step_zero():
  schedule = optim.learning_rate_schedule(1e-3, warmup_steps=100, total_steps=1000)
  assert float(schedule(0)) == 0.0
  np.testing.assert_allclose(schedule(50), 1e-3 * 0.5 * (1 - 50 / 1000), rtol=1e-6)
  # At the end of warmup the decay has already run for 100 steps: the peak is 0.9 * lr.
  np.testing.assert_allclose(schedule(100), 1e-3 * 0.9, rtol=1e-6)
  np.testing.assert_allclose(schedule(550), 1e-3 * 0.45, rtol=1e-6)
  assert float(schedule(1000)) == 0.0 and float(schedule(2000)) == 0.0


def test_weight_decay_skips_layer_norm_and_biases_on_the_real_tree():
  config = load_config('tiny')
  shapes = jax.eval_shape(lambda: model_lib.init_params(
      model_lib.Electra(config.model), jax.random.PRNGKey(0), 8))
  mask = optim.decay_mask(shapes)
  flat = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(mask)}
  for path, decayed in flat.items():
    is_norm_or_bias = 'layer_norm' in path or path.endswith("['bias']") or 'output_bias' in path
    assert decayed == (not is_norm_or_bias), path
  assert flat["['embeddings']['word_embeddings']['embedding']"]
  assert not flat["['embeddings']['layer_norm']['scale']"]
  assert not flat["['generator_head']['output_bias']"]


def reference_update(params, grads_per_step, lr, decayed, bias_correction, b1=0.9, b2=0.999,
                     eps=1e-6, wd=0.01, clip=1.0):
  """The original's AdamWeightDecayOptimizer (+ global-norm clipping) in float64."""
  p = {k: np.asarray(v, np.float64) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in p.items()}
  v = {k: np.zeros_like(x) for k, x in p.items()}
  for t, grads in enumerate(grads_per_step, start=1):
    g = {k: np.asarray(x, np.float64) for k, x in grads.items()}
    norm = np.sqrt(sum((x ** 2).sum() for x in g.values()))
    g = {k: x * min(1.0, clip / norm) for k, x in g.items()}
    for k in p:
      m[k] = b1 * m[k] + (1 - b1) * g[k]
      v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
      mh, vh = (m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)) if bias_correction else (m[k], v[k])
      update = mh / (np.sqrt(vh) + eps) + (wd * p[k] if decayed[k] else 0.0)
      p[k] = p[k] - lr(t - 1) * update
  return p


@pytest.mark.parametrize('bias_correction', [False, True])
def test_update_matches_original_rule(bias_correction):
  config = load_config('tiny')
  config.num_train_steps, config.warmup_steps, config.learning_rate = 10, 3, 0.1
  config.adam_bias_correction = bias_correction
  rng = np.random.default_rng(0)
  params = {'kernel': rng.normal(size=(4, 3)).astype(np.float32),
            'bias': rng.normal(size=(3,)).astype(np.float32)}
  grads = [{k: (rng.normal(size=x.shape) * 2).astype(np.float32) for k, x in params.items()}
           for _ in range(4)]
  optimizer = optim.make_optimizer(config)
  state, current = optimizer.init(params), jax.tree.map(jnp.asarray, params)
  for g in grads:
    updates, state = optimizer.update(g, state, current)
    current = optax.apply_updates(current, updates)
  schedule = optim.learning_rate_schedule(0.1, 3, 10)
  expected = reference_update(params, grads, lambda s: float(schedule(s)),
                              {'kernel': True, 'bias': False}, bias_correction)
  for k in params:
    np.testing.assert_allclose(current[k], expected[k], rtol=1e-5, atol=1e-6)
  # Bias correction matters in the first steps, so the two variants must differ.
  other = reference_update(params, grads, lambda s: float(schedule(s)),
                           {'kernel': True, 'bias': False}, not bias_correction)
  assert not np.allclose(current['kernel'], other['kernel'], rtol=1e-4)
