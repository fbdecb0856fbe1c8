"""The original ELECTRA optimizer in optax, and the guard that never applies a non-finite step.

clip global norm (1.0) -> Adam (beta 0.9/0.999, eps 1e-6; optionally without bias correction, as
the original's AdamWeightDecayOptimizer) -> decoupled weight decay (0.01, not on LayerNorm or
biases; optionally another rate on the embeddings) -> learning rate: linear warmup MULTIPLIED by
a linear decay to zero that starts at step 0 (so the peak is lr * (1 - warmup/total), not lr).

A step with a NaN or Inf in its loss, gradients or new parameters is never applied
(`guarded_update`); its 0/1 flag is folded into a `Watch` on the device and read at log and save
steps only, where `check` applies config.on_nonfinite (docs/reliability.md).

Why not optax.apply_if_finite: it checks only the gradients (an infinite learning rate gets
past it); its counters in the optimizer state change on a skipped step, and checkpoints written
before would not restore; its skipped update is zeros, and p + 0 turns -0.0 into +0.0; and past
its limit it applies the non-finite update instead of stopping.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from electra_jax.common.errors import UsageError


def learning_rate_schedule(peak: float, warmup_steps: int, total_steps: int) -> optax.Schedule:
  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    decay = 1.0 - jnp.minimum(step, total_steps) / max(total_steps, 1)
    warmup = jnp.minimum(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0
    return peak * decay * warmup
  return schedule


def decay_mask(params):
  """True for parameters that get weight decay: everything but LayerNorm parameters and biases
  (the modern design's norms are attention_norm, mlp_norm and final_norm)."""
  def wants_decay(path, _):
    names = [getattr(k, 'key', str(k)) for k in path]
    return not (names[-1] in ('bias', 'output_bias') or any('norm' in n for n in names))
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


def adam(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Adam at the config's betas and epsilon, bias-corrected if config.adam_bias_correction."""
  if config.adam_bias_correction:
    return optax.scale_by_adam(b1=config.adam_b1, b2=config.adam_b2, eps=config.adam_eps)
  return scale_by_adam_without_bias_correction(config.adam_b1, config.adam_b2, config.adam_eps)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """The pretraining optimizer from the run config's optimizer fields."""
  schedule = learning_rate_schedule(config.learning_rate, config.warmup_steps,
                                    config.num_train_steps)
  return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), adam(config),
                     weight_decay(config), optax.scale_by_learning_rate(schedule))


def applied_updates(opt_state) -> int:
  """The updates the optimizer has applied: the step its learning-rate schedule is at, behind the
  step number by the steps skipped as not finite."""
  is_schedule = lambda x: isinstance(x, optax.ScaleByScheduleState)
  counts = [s.count for s in jax.tree.leaves(opt_state, is_leaf=is_schedule) if is_schedule(s)]
  return int(jax.device_get(counts[0]))


def all_finite(*trees) -> jax.Array:
  """True (a device scalar) when no floating-point leaf of `trees` holds a NaN or an Inf."""
  leaves = [x for x in jax.tree.leaves(trees) if jnp.issubdtype(x.dtype, jnp.inexact)]
  flags = jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves])
  # The smallest flag, by a sort: XLA rewrites jnp.all of stacked scalars into a chain of ands and
  # copies it into every select reading the result, one per leaf (tiny's program 4x larger, its
  # CPU compile 23 s against 12 s; base's v4-8 compile 355 s against 308 s). A sort is not copied.
  return jnp.sort(flags)[0]


def guarded_update(optimizer: optax.GradientTransformation, grads, loss, params, opt_state):
  """(params, opt_state, finite): the optimizer's update, or both unchanged if not finite."""
  updates, new_opt_state = optimizer.update(grads, opt_state, params)
  new_params = optax.apply_updates(params, updates)
  finite = all_finite(loss, grads, new_params)
  # A select, not lax.cond: the update costs little next to the gradient, and XLA fuses the
  # select into it, so the donated state is still updated in place.
  keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
  return keep(new_params, params), keep(new_opt_state, opt_state), finite


def without_stats_of_skipped(stats: dict, finite) -> dict:
  """A step's statistics, zeroed when its update was skipped (the logged averages are over the
  applied steps), plus 'nonfinite' (0 or 1)."""
  zeroed = jax.tree.map(lambda x: jnp.where(finite, x, jnp.zeros_like(x)), stats)
  return {**zeroed, 'nonfinite': jnp.logical_not(finite).astype(jnp.int32)}


class Watch(NamedTuple):
  """The non-finite steps since the last `read`: int32 device scalars (host ints once read).
  Steps count from 1, as in the log and the checkpoint names."""
  first: Any        # the first non-finite step, 0 if none
  streak: Any       # non-finite steps in a row up to the latest step (carried over reads)
  longest: Any      # the longest such run...
  longest_end: Any  # ...and the step it ended at (so far)


def start(streak: int = 0) -> Watch:
  """A watch that has seen nothing, after `streak` non-finite steps."""
  zero = np.zeros([], np.int32)
  return Watch(zero, np.int32(streak), zero, zero)


@jax.jit
def watch(seen: Watch, nonfinite, step) -> Watch:
  """`seen` after `step`, which was not finite if `nonfinite` (0 or 1)."""
  bad = nonfinite > 0
  streak = jnp.where(bad, seen.streak + 1, 0)
  longer = streak > seen.longest
  return Watch(first=jnp.where(bad & (seen.first == 0), step, seen.first).astype(jnp.int32),
               streak=streak.astype(jnp.int32),
               longest=jnp.where(longer, streak, seen.longest).astype(jnp.int32),
               longest_end=jnp.where(longer, step, seen.longest_end).astype(jnp.int32))


def read(seen: Watch) -> tuple[Watch, Watch]:
  """(what `seen` holds, as host ints; the watch to go on with, which keeps only the streak)."""
  host = Watch(*(int(x) for x in jax.device_get(tuple(seen))))
  return host, start(host.streak)


def check(seen: Watch, config, where: str, last_good: Callable[[], str]) -> None:
  """Raises the run's one error line when `seen` (host ints) calls for a stop. `where` follows
  the step number ('' or ' of MRPC seed 3'); `last_good()`, called only then, names the resume."""
  if config.on_nonfinite == 'stop' and seen.first:
    raise UsageError(f'step {seen.first}{where} is not finite (NaN or Inf in its loss, '
                     'gradients or updated parameters); it was not applied and training '
                     f'stopped. {last_good()}; lower the learning rate or check the data, or '
                     'set --config.on_nonfinite=skip to skip such steps')
  if config.on_nonfinite == 'skip' and seen.longest >= config.max_consecutive_skips:
    first = seen.longest_end - seen.longest + 1
    raise UsageError(f'steps {first} to {seen.longest_end}{where} were all not finite and '
                     f'skipped, {seen.longest} in a row (config.max_consecutive_skips='
                     f'{config.max_consecutive_skips}), so training stopped. {last_good()}; '
                     'lower the learning rate or check the data')
