"""Orbax checkpoints of the train state in `<workdir>/checkpoints/<step>/`.

Saves are asynchronous (training goes on while the previous state is written) and committed
atomically by Orbax: a run killed mid-save leaves the previous checkpoints intact, and the
unfinished one is ignored on restore. The workdir may be a gs:// folder (a pod slice's, which
every host writes parts of each checkpoint to): Orbax opens it itself, writing the arrays through
TensorStore's GCS driver and its metadata through etils.epath.

A checkpoint that cannot be read (a truncated or corrupted file: a full disk, a bad copy) stops
the run with one error naming it; config.checkpoint_fallback moves it aside, keeping it, and
resumes from the newest one that reads. Each checkpoint also records the run's objective and
model config, so a checkpoint of another run is refused even where the shapes agree.
"""

import contextlib
import os
import re
import shutil

from absl import logging
from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp

from electra_jax.common import storage
from electra_jax.common import config as config_lib
from electra_jax.common.errors import UsageError

DAMAGED = 'damaged_checkpoints'  # beside checkpoints/: where config.checkpoint_fallback moves them


class DamagedCheckpoint(UsageError):
  """A checkpoint whose files cannot be read; its message names the checkpoint."""


def checkpoint_dir(workdir: str) -> str:
  # A local workdir is made absolute for Orbax; abspath would turn gs://b/run into <cwd>/gs:/b/run.
  return os.path.join(workdir if storage.is_uri(workdir) else os.path.abspath(workdir),
                      'checkpoints')


def make_manager(workdir: str, keep: int) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=True)
  return ocp.CheckpointManager(checkpoint_dir(workdir), options=options,
                               item_handlers=ocp.StandardCheckpointHandler())


def identity(config) -> dict:
  """What a checkpoint's parameters mean: the objective and the model config that made them."""
  return {'objective': config.objective, 'model': config.model.to_dict()}


def has_checkpoint(workdir: str) -> bool:
  """Whether `workdir` holds a checkpoint Orbax committed (a step's directory), found without
  opening a manager, which would create checkpoints/."""
  directory = epath.Path(checkpoint_dir(workdir))
  return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())


def save(manager: ocp.CheckpointManager, step: int, state, run_identity: dict | None = None):
  """Starts writing checkpoint `step` in the background, once the write before it succeeded."""
  check_written(manager)
  with _write_failures(manager):  # Orbax waits here for the write before, and raises its error
    manager.save(step, args=ocp.args.StandardSave(state), custom_metadata=run_identity or {})


def check_written(manager: ocp.CheckpointManager, wait: bool = False):
  """Raises one UsageError if a background write failed (a full disk), naming the checkpoint,
  the cause, the free space and the last good checkpoint, once the partial write is removed.
  Without `wait` it does not block: the loop asks after every step."""
  if not wait and manager.is_saving_in_progress():
    return
  with _write_failures(manager):
    manager.wait_until_finished()  # at once when no write is in flight; raises a failed one's


@contextlib.contextmanager
def _write_failures(manager: ocp.CheckpointManager):
  """A failed write (Orbax re-raises its writer's error, an OSError or TensorStore's) becomes
  `write_failed`'s one UsageError; anything else propagates."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    if not (isinstance(e, OSError) or re.search(r'os_error_code|Failed writing', str(e))):
      raise
    raise write_failed(manager, e) from None


def write_failed(manager: ocp.CheckpointManager, error: Exception) -> UsageError:
  directory = epath.Path(manager.directory)
  partial = sorted(directory.glob('*.orbax-checkpoint-tmp*'))
  for path in partial:
    path.rmtree()
  code = getattr(error, 'errno', None) or re.search(r"os_error_code='(\d+)'", str(error))
  code = code if isinstance(code, int) or code is None else int(code[1])
  cause = os.strerror(code) if code else str(error).splitlines()[0][:300]
  where = f'{directory}/{partial[0].name.split(".")[0]}' if partial else str(directory)
  free = '' if storage.is_uri(str(directory)) else \
      f' ({shutil.disk_usage(directory).free / 2**20:.1f} MiB free there)'
  step = manager.latest_step()
  good = (f'the last good checkpoint is {directory}/{step}' if step is not None
          else 'no checkpoint was written')
  return UsageError(f'checkpoint {where} could not be written: {cause}{free}; {good}. Make room '
                    'and run the same command again to resume')


def last_good(manager: ocp.CheckpointManager) -> str:
  """What a stopped run leaves to resume from, for its error line: the newest checkpoint."""
  check_written(manager, wait=True)  # a save in flight is complete (or gone) before it is named
  step = manager.latest_step()
  if step is None:
    return 'No checkpoint was written, so running the same command starts over'
  return (f'The last good checkpoint is {manager.directory}/{step}, where running the same '
          'command resumes')


def restore_latest(manager: ocp.CheckpointManager, state, run_identity: dict | None = None,
                   fallback: bool = False, fix: str | None = None):
  """The latest checkpoint restored onto `state`'s shapes and shardings, or None if there is none.

  `state` may be concrete arrays or jax.ShapeDtypeStruct leaves with shardings (cheapest). A
  latest checkpoint that cannot be read raises a UsageError that offers config.checkpoint_fallback;
  with `fallback`, it is moved to <workdir>/damaged_checkpoints/ and the one before is tried.
  `fix` replaces that offer in the error, for callers without the option (fine-tuning).
  """
  while (step := manager.latest_step()) is not None:
    try:
      return restore(manager, step, state, run_identity)
    except DamagedCheckpoint as e:
      if not fallback:
        fix = fix or ('To resume from the newest checkpoint before it, run the same command with '
                      '--config.checkpoint_fallback=true: the damaged one is kept, moved to '
                      f'{_damaged_dir(manager)}/, and the steps after the one resumed from are '
                      'trained again')
        raise UsageError(f'{e}. {fix}') from None
      moved = _set_aside(manager, step)
      logging.warning('%s; moved it to %s and trying the checkpoint before it', e, moved)
  if fallback and storage.exists(_damaged_dir(manager)):
    raise UsageError(f'no checkpoint in {manager.directory} can be read (the damaged ones are in '
                     f'{_damaged_dir(manager)}/); use a new --workdir to start over')
  return None


def restore(manager: ocp.CheckpointManager, step: int, state, run_identity: dict | None = None):
  """Checkpoint `step` restored onto `state`'s shapes and shardings (see restore_latest).

  Raises DamagedCheckpoint if its files cannot be read, and a UsageError if it belongs to another
  objective or model (by `run_identity`, where the checkpoint recorded one, and by shapes).
  """
  name = _check_fits(manager, step, state.params, run_identity)
  target = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  try:
    return manager.restore(step, args=ocp.args.StandardRestore(target))
  except Exception as e:  # pylint: disable=broad-except
    if _is_other_layout(e):  # readable, only laid out otherwise: not damage, nothing to set aside
      raise UsageError(
          f'{name} holds a training state laid out otherwise than this run builds (Orbax: '
          f'"{_first_line(e)}"): a setting or an optax version that changes the optimizer '
          "state's layout differs from the run that saved it. Nothing was moved or changed; "
          'resume with the settings and versions it was saved with, or use a new --workdir'
      ) from None
    raise DamagedCheckpoint(f'{name} cannot be read: {_reason(e)}') from None


def restore_params(manager: ocp.CheckpointManager, step: int, params,
                   run_identity: dict | None = None) -> dict:
  """Only the parameters of checkpoint `step`, as host numpy arrays of `params`' shapes.

  What export and fine-tuning need: no optimizer is built and its state is not read, and nothing
  is placed on a device. Checked as `restore` checks a whole state.
  """
  name = _check_fits(manager, step, params, run_identity)
  item = {'params': jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)}
  host_arrays = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
  # The state was saved as one tree; a tree handler reads back the `params` branch of it alone.
  reader = ocp.CheckpointManager(manager.directory, item_handlers=ocp.PyTreeCheckpointHandler())
  try:
    return reader.restore(step, args=ocp.args.PyTreeRestore(
        item=item, restore_args=host_arrays, partial_restore=True))['params']
  except Exception as e:  # pylint: disable=broad-except
    raise DamagedCheckpoint(f'{name} cannot be read: {_reason(e)}') from None
  finally:
    reader.close()


def _check_fits(manager: ocp.CheckpointManager, step: int, params,
                run_identity: dict | None) -> str:
  """The checkpoint's name, once its metadata reads and its parameters fit `params`."""
  name = f'checkpoint {manager.directory}/{step}'
  metadata = f'{manager.directory}/{step}/default/_METADATA'
  if not storage.exists(metadata):  # Orbax would warn twice, then fail reading None
    raise DamagedCheckpoint(f'{name} cannot be read: {metadata} is missing (an interrupted write '
                            'or a partial copy)')
  try:
    saved_identity = manager.metadata(step).custom_metadata or {}
    saved_params = manager.item_metadata(step)['params']
  except Exception as e:  # pylint: disable=broad-except  (any unreadable file is damage)
    raise DamagedCheckpoint(f'{name} cannot be read: {_reason(e)}') from None
  # The objective first (it explains every tensor that differs), then the shapes (they name the
  # tensor), then the model fields no shape shows (num_heads, dropout rates).
  check_identity = run_identity and saved_identity
  if check_identity:
    _check_objective(name, saved_identity, run_identity)
  _check_params_fit(name, saved_params, params)
  if check_identity:
    _check_model(name, saved_identity, run_identity)
  return name


def _is_other_layout(error: Exception) -> bool:
  """Orbax's refusal of a target whose tree differs from the saved one (empty optimizer-state
  nodes have no arrays, so the parameter-shape check before it cannot see them)."""
  return isinstance(error, ValueError) and 'tree structures do not match' in str(error)


def _first_line(error: Exception) -> str:
  text = str(error).strip().splitlines()[0] if str(error).strip() else ''
  return text.split(' See full TensorStore details')[0][:300]


def _reason(error: Exception) -> str:
  """The first line of what Orbax or TensorStore said, short enough for one error line."""
  return f'{type(error).__name__}: {_first_line(error)}'[:300] + ' (a truncated or corrupted file)'


def _damaged_dir(manager: ocp.CheckpointManager) -> str:
  return os.path.join(os.path.dirname(str(manager.directory).rstrip('/')), DAMAGED)


def _set_aside(manager: ocp.CheckpointManager, step: int) -> str:
  """Moves checkpoint `step` into damaged_checkpoints/ (nothing is deleted); returns where.

  Out of checkpoints/, Orbax no longer sees it, so the step can be saved again when retrained.
  """
  target = epath.Path(_damaged_dir(manager))
  target.mkdir(parents=True, exist_ok=True)
  moved, n = target / str(step), 1
  while moved.exists():
    n += 1
    moved = target / f'{step}.{n}'
  (epath.Path(manager.directory) / str(step)).rename(moved)
  manager.reload()
  return str(moved)


def _check_objective(name: str, saved: dict, wanted: dict):
  saved = config_lib.upgrade(saved)
  if saved.objective != wanted['objective']:
    raise UsageError(f'{name} was written by a run of objective {saved.objective!r}, not '
                     f"{wanted['objective']!r}; use a new --workdir or "
                     f'--config.objective={saved.objective}')


def _check_model(name: str, saved: dict, wanted: dict):
  saved_model = config_lib.upgrade(saved).model  # fields added since: the value runs had then
  extendable = config_lib.EXTENDABLE if wanted['model']['architecture'] == 'modern' else ()
  changed = [f'{k}: checkpoint {saved_model[k]!r}, now {v!r}'
             for k, v in wanted['model'].items() if saved_model[k] != v and k not in extendable]
  if changed:
    raise UsageError(f"{name} was written by a different model ({', '.join(changed)}); use a "
                     'new --workdir or the config that run was started with')


def shape_mismatches(have, want, have_name: str, want_name: str) -> str:
  """'' where the trees' tensor paths and shapes agree; else the first three differences and how
  many more, for an error line. Leaves: arrays, ShapeDtypeStructs or Orbax array metadata."""
  have, want = _shapes(have), _shapes(want)
  problems = [f'{p}: {have_name} {have[p]}, {want_name} {want[p]}'
              for p in want if p in have and have[p] != want[p]]
  problems += [f'{p} missing from the {have_name}' for p in want if p not in have]
  problems += [f'{p} in the {have_name} but not in the {want_name}' for p in have if p not in want]
  more = f' (and {len(problems) - 3} more)' if len(problems) > 3 else ''
  return '; '.join(problems[:3]) + more


def _shapes(tree) -> dict[str, tuple]:
  return {'/'.join(str(getattr(k, 'key', k)) for k in path): tuple(x.shape)
          for path, x in jax.tree_util.tree_leaves_with_path(tree)}


def _check_params_fit(name: str, saved_params, params):
  """Compares the checkpoint's parameter shapes (from its metadata) with the model's.

  Done before restoring: a restore that fails half-way leaves Orbax's background I/O in a state
  that spills tracebacks at exit, and the message here names the tensor.
  """
  problems = shape_mismatches(saved_params, params, 'checkpoint', 'model')
  if problems:
    raise UsageError(f'{name} does not match the configured model: {problems}; use a new '
                     '--workdir or the config that run was started with')
