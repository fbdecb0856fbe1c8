"""Orbax checkpoints of the train state in `<workdir>/checkpoints/<step>/`.

Saves are asynchronous (training goes on while the previous state is written) and committed
atomically by Orbax: a run killed mid-save leaves the previous checkpoints intact, and the
unfinished one is ignored on restore.
"""

import os

import jax
import orbax.checkpoint as ocp

from electra_jax.errors import UsageError


def make_manager(workdir: str, keep: int) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=True)
  return ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), 'checkpoints'),
                               options=options)


def save(manager: ocp.CheckpointManager, step: int, state):
  manager.save(step, args=ocp.args.StandardSave(state))


def restore_latest(manager: ocp.CheckpointManager, state):
  """The latest checkpoint restored onto `state`'s shapes and shardings, or None if there is none.

  `state` may be concrete arrays or jax.ShapeDtypeStruct leaves with shardings.
  """
  step = manager.latest_step()
  if step is None:
    return None
  return restore(manager, step, state)


def restore(manager: ocp.CheckpointManager, step: int, state):
  """Checkpoint `step` restored onto `state`'s shapes and shardings (see restore_latest)."""
  target = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  try:
    return manager.restore(step, args=ocp.args.StandardRestore(target))
  except ValueError as e:
    first_line = str(e).strip().splitlines()[0]
    raise UsageError(
        f'checkpoint {manager.directory}/{step} does not match the configured model '
        f'({first_line}); use a new --workdir or the config that run was started with') from e
