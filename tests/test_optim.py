"""The optimizer against the original's update rule, computed in float64 numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import load_config
from electra_jax.model import networks as model_lib
from electra_jax.training import optim


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


def test_embedding_weights_on_the_real_tree():
  """The weights embedding_weight_decay applies to: the tables, GDES's delta and every encoder's
  embedding projection (its bias is not decayed at all)."""
  config = load_config('tiny')
  shapes = jax.eval_shape(lambda: model_lib.init_params(
      model_lib.Electra(config.model, embedding_sharing='gdes'), jax.random.PRNGKey(0), 8))
  decayed = {jax.tree_util.keystr(k): optim.is_embedding_weight(k)
             for k, wanted in jax.tree_util.tree_leaves_with_path(optim.decay_mask(shapes))
             if wanted}
  assert {p for p, embedding in decayed.items() if embedding} == {
      "['embedding_delta']", "['embeddings']['word_embeddings']['embedding']",
      "['embeddings']['position_embeddings']['embedding']",
      "['embeddings']['token_type_embeddings']['embedding']",
      "['discriminator']['embeddings_project']['kernel']",
      "['generator']['embeddings_project']['kernel']"}
  assert "['discriminator']['layer_0']['attention']['query']['kernel']" in decayed


def test_optimizer_state_has_one_structure_whatever_the_embedding_rate():
  """A checkpoint saved with the embedding rate set, unset or changed, or before the field
  existed (one masked add_decayed_weights), restores into the optimizer of any other."""
  config = load_config('tiny')
  params = model_lib.init_params(model_lib.Electra(config.model), jax.random.PRNGKey(0), 8)
  before_the_field = optax.chain(
      optax.clip_by_global_norm(1.0), optim.scale_by_adam_without_bias_correction(0.9, 0.999, 1e-6),
      optax.add_decayed_weights(0.01, mask=optim.decay_mask),
      optax.scale_by_learning_rate(optim.learning_rate_schedule(1e-3, 10, 100)))
  want = jax.tree.structure(before_the_field.init(params))
  for rate in (None, 0.0, 0.5):
    config.embedding_weight_decay = rate
    assert jax.tree.structure(optim.make_optimizer(config).init(params)) == want, rate


@pytest.mark.parametrize('embedding_rate', [None, 0.5])
def test_embedding_weight_decay_rate(embedding_rate):
  """With zero gradients Adam moves nothing, so one step is the decay alone: p -= lr * rate * p,
  rate 0.5 on the embedding weights when set (else weight_decay's), 0.01 on the other
  kernels, none on biases."""
  config = load_config('tiny')
  config.learning_rate, config.warmup_steps, config.num_train_steps = 0.1, 0, 10
  config.weight_decay, config.embedding_weight_decay = 0.01, embedding_rate
  params = {'embeddings': {'word_embeddings': {'embedding': jnp.full((3, 2), 2.0)}},
            'discriminator': {'embeddings_project': {'kernel': jnp.full((2, 4), 2.0),
                                                     'bias': jnp.full((4,), 2.0)},
                              'layer_0': {'output': {'kernel': jnp.full((4, 4), 2.0)}}}}
  optimizer = optim.make_optimizer(config)
  zeros = jax.tree.map(jnp.zeros_like, params)
  updates, _ = optimizer.update(zeros, optimizer.init(params), params)
  after = optax.apply_updates(params, updates)
  table_rate = 0.01 if embedding_rate is None else embedding_rate
  expected = {'embeddings': {'word_embeddings': {'embedding': 2.0 * (1 - 0.1 * table_rate)}},
              'discriminator': {'embeddings_project': {'kernel': 2.0 * (1 - 0.1 * table_rate),
                                                       'bias': 2.0},
                                'layer_0': {'output': {'kernel': 2.0 * (1 - 0.1 * 0.01)}}}}
  jax.tree.map(lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-6), after,
               expected)


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
