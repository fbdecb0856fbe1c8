"""Steps that are not finite (a NaN or Inf in the loss, the gradients or the new parameters).

Inside the compiled step, `guarded_update` never applies such a step's update: the parameters and
the optimizer state stay bitwise what they were. The step reports a 0/1 flag; the loop folds it
into a `Watch` on the device (`watch`, no host round-trip per step) and reads that only at log and
save steps (`read`), where `check` applies config.on_nonfinite:

  'stop'  one error that names the first non-finite step and the last good checkpoint. Every
          save is preceded by a check, so nothing after a non-finite step is ever saved.
  'skip'  training goes on with the next batch; the skipped steps are logged, and the run stops
          once config.max_consecutive_skips steps in a row were skipped.

Why not optax.apply_if_finite: it checks only the gradients (an infinite learning rate gets
past it); its counters in the optimizer state change on a skipped step, and checkpoints written
before would not restore; its skipped update is zeros, and p + 0 turns -0.0 into +0.0; and past
its limit it applies the non-finite update instead of stopping.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from electra_jax.common.errors import UsageError


def all_finite(*trees) -> jax.Array:
  """True (a device scalar) when no floating-point leaf of `trees` holds a NaN or an Inf."""
  leaves = [x for x in jax.tree.leaves(trees) if jnp.issubdtype(x.dtype, jnp.inexact)]
  flags = jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves])
  # The smallest flag, found by a sort rather than jnp.all: XLA rewrites all() of stacked
  # scalars into a chain of ands and then copies that chain into every select reading the
  # result, one per parameter and optimizer leaf. In the tiny train step that made the program
  # four times larger than it is now and its CPU compile twice as long (23 s against 12 s);
  # base's TPU compile for v4-8 took 355 s against 308 s. XLA does not copy a sort into its users.
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
  """A step's statistics, zeroed when its update was skipped (so they drop out of the logged
  averages, which the loop divides by the applied steps), plus 'nonfinite' (0 or 1)."""
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
  """A watch that has seen nothing yet, but `streak` non-finite steps just before."""
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
