"""Orbax checkpoints of the train state in `<workdir>/checkpoints/<step>/`.

Saves are asynchronous (training goes on while the previous state is written) and committed
atomically by Orbax: a run killed mid-save leaves the previous checkpoints intact, and the
unfinished one is ignored on restore. The workdir may be a gs:// folder (a pod slice's, which
every host writes parts of each checkpoint to): Orbax opens it itself, writing the arrays through
TensorStore's GCS driver and its metadata through etils.epath.
"""

import os

import jax
import orbax.checkpoint as ocp

from electra_jax import storage
from electra_jax.errors import UsageError


def checkpoint_dir(workdir: str) -> str:
  # A local workdir is made absolute for Orbax; abspath would turn gs://b/run into <cwd>/gs:/b/run.
  return os.path.join(workdir if storage.is_uri(workdir) else os.path.abspath(workdir),
                      'checkpoints')


def make_manager(workdir: str, keep: int) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=True)
  return ocp.CheckpointManager(checkpoint_dir(workdir), options=options,
                               item_handlers=ocp.StandardCheckpointHandler())


def save(manager: ocp.CheckpointManager, step: int, state):
  manager.save(step, args=ocp.args.StandardSave(state))


def last_good(manager: ocp.CheckpointManager) -> str:
  """What a stopped run leaves to resume from, for its error line: the newest checkpoint."""
  manager.wait_until_finished()  # a save in flight is complete (or gone) before it is named
  step = manager.latest_step()
  if step is None:
    return 'No checkpoint was written, so running the same command starts over'
  return (f'The last good checkpoint is {manager.directory}/{step}, where running the same '
          'command resumes')


def restore_latest(manager: ocp.CheckpointManager, state):
  """The latest checkpoint restored onto `state`'s shapes and shardings, or None if there is none.

  `state` may be concrete arrays or jax.ShapeDtypeStruct leaves with shardings (cheapest).
  """
  step = manager.latest_step()
  if step is None:
    return None
  return restore(manager, step, state)


def restore(manager: ocp.CheckpointManager, step: int, state):
  """Checkpoint `step` restored onto `state`'s shapes and shardings (see restore_latest)."""
  _check_params_fit(manager, step, state.params)
  target = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  return manager.restore(step, args=ocp.args.StandardRestore(target))


def _shapes(tree) -> dict[str, tuple]:
  return {jax.tree_util.keystr(path).replace("']['", '/').strip("[']"): tuple(x.shape)
          for path, x in jax.tree_util.tree_leaves_with_path(tree)}


def _check_params_fit(manager: ocp.CheckpointManager, step: int, params):
  """Compares the checkpoint's parameter shapes (from its metadata) with the model's.

  Done before restoring: a restore that fails half-way leaves Orbax's background I/O in a state
  that spills tracebacks at exit, and the message here names the tensor.
  """
  saved = _shapes(manager.item_metadata(step)['params'])
  wanted = _shapes(params)
  problems = [f'{name}: checkpoint {saved[name]}, model {wanted[name]}'
              for name in wanted if name in saved and saved[name] != wanted[name]]
  problems += [f'{name} missing from the checkpoint' for name in wanted if name not in saved]
  problems += [f'{name} in the checkpoint but not in the model' for name in saved
               if name not in wanted]
  if problems:
    more = f' (and {len(problems) - 3} more)' if len(problems) > 3 else ''
    raise UsageError(
        f'checkpoint {manager.directory}/{step} does not match the configured model: '
        f'{"; ".join(problems[:3])}{more}; use a new --workdir or the config that run was '
        'started with')
