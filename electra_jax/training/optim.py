"""The original ELECTRA optimizer in optax.

clip global norm (1.0) -> Adam (beta 0.9/0.999, eps 1e-6; optionally without bias correction, as
the original's AdamWeightDecayOptimizer) -> decoupled weight decay (0.01, not on LayerNorm or
biases; optionally another rate on the embeddings) -> learning rate: linear warmup MULTIPLIED by
a linear decay to zero that starts at step 0 (so the peak is lr * (1 - warmup/total), not lr).
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax


def learning_rate_schedule(peak: float, warmup_steps: int, total_steps: int) -> optax.Schedule:
  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    decay = 1.0 - jnp.minimum(step, total_steps) / max(total_steps, 1)
    warmup = jnp.minimum(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0
    return peak * decay * warmup
  return schedule


def decay_mask(params):
  """True for parameters that get weight decay: everything but LayerNorm parameters and biases."""
  def wants_decay(path, _):
    names = [getattr(k, 'key', str(k)) for k in path]
    return not (names[-1] in ('bias', 'output_bias') or any('layer_norm' in n for n in names))
  return jax.tree_util.tree_map_with_path(wants_decay, params)


def is_embedding_weight(path) -> bool:
  """The word, position and token-type tables, GDES's delta, each embedding projection."""
  return any('embedding' in getattr(k, 'key', str(k)) for k in path)


def weight_decay(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Decoupled weight decay, update + rate * param on decay_mask's parameters: the rate is
  config.weight_decay, or config.embedding_weight_decay on the embedding weights when that is set.

  One masked transform whatever the rates, so the optimizer state keeps one structure: a run
  resumes with the embedding rate set, changed or unset, and runs saved before it existed resume.
  """
  rate = config.weight_decay
  embedding_rate = rate if config.embedding_weight_decay is None else config.embedding_weight_decay

  def update(updates, state, params):
    def decayed(path, update, param):
      return update + (embedding_rate if is_embedding_weight(path) else rate) * param
    return jax.tree_util.tree_map_with_path(decayed, updates, params), state

  decay = optax.GradientTransformation(lambda params: optax.EmptyState(), update)
  return optax.masked(decay, decay_mask)


def scale_by_adam_without_bias_correction(b1: float, b2: float, eps: float):
  """Adam's m / (sqrt(v) + eps) with raw (uncorrected) moment estimates, as the original ran."""
  def init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=zeros(), nu=zeros())

  def update(updates, state, params=None):
    del params
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)
    updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
    return updates, optax.ScaleByAdamState(count=state.count + 1, mu=mu, nu=nu)

  return optax.GradientTransformation(init, update)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """The pretraining optimizer from the run config's optimizer fields."""
  schedule = learning_rate_schedule(config.learning_rate, config.warmup_steps,
                                    config.num_train_steps)
  if config.adam_bias_correction:
    adam = optax.scale_by_adam(b1=config.adam_b1, b2=config.adam_b2, eps=config.adam_eps)
  else:
    adam = scale_by_adam_without_bias_correction(config.adam_b1, config.adam_b2, config.adam_eps)
  return optax.chain(
      optax.clip_by_global_norm(config.max_grad_norm),
      adam,
      weight_decay(config),
      optax.scale_by_learning_rate(schedule),
  )


def applied_updates(opt_state) -> int:
  """The updates the optimizer has applied: the step its learning-rate schedule is at, behind the
  step number by the steps skipped as not finite (training/nonfinite.py)."""
  is_schedule = lambda x: isinstance(x, optax.ScaleByScheduleState)
  counts = [s.count for s in jax.tree.leaves(opt_state, is_leaf=is_schedule) if is_schedule(s)]
  return int(jax.device_get(counts[0]))
