"""Orbax checkpoints of the train state in `<workdir>/checkpoints/<step>/` (a path or gs://).

Saves are asynchronous and committed atomically by Orbax: a run killed mid-save leaves the
previous checkpoints intact. A checkpoint that cannot be read stops the run with one error naming
it, or with config.checkpoint_fallback is moved aside (docs/reliability.md). Each checkpoint
records the run's objective and model config, so another run's is refused even where the shapes
agree.
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

from electra_jax.common import config as config_lib, storage
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
  """Raises `write_failed`'s UsageError if a background write failed (a full disk); without
  `wait` it does not block: the loop asks after every step."""
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
  """One error naming the checkpoint, the cause, the free space and the last good checkpoint,
  once the partial write is removed."""
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
  """The latest checkpoint restored onto `state`'s shapes and shardings (arrays, or cheapest,
  ShapeDtypeStructs), or None if there is none. One that cannot be read raises a UsageError that
  offers config.checkpoint_fallback (or `fix`, for callers without it); with `fallback`, it is
  moved to <workdir>/damaged_checkpoints/ and the one before is tried."""
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
  """Checkpoint `step` restored onto `state`'s shapes and shardings; DamagedCheckpoint if its
  files cannot be read, a UsageError if it belongs to another objective or model."""
  name = _check_fits(manager, step, state.params, run_identity)
  target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                        state)
  try:
    return manager.restore(step, args=ocp.args.StandardRestore(target))
  except Exception as e:  # pylint: disable=broad-except
    # Orbax refuses a target whose tree differs from the saved one (empty optimizer-state nodes
    # have no arrays, so the shape check cannot see them): readable, so not damage.
    if isinstance(e, ValueError) and 'tree structures do not match' in str(e):
      raise UsageError(
          f'{name} holds a training state laid out otherwise than this run builds (Orbax: '
          f'"{_first_line(e)}"): a setting or an optax version that changes the optimizer '
          "state's layout differs from the run that saved it. Nothing was moved or changed; "
          'resume with the settings and versions it was saved with, or use a new --workdir'
      ) from None
    raise DamagedCheckpoint(f'{name} cannot be read: {_reason(e)}') from None


def restore_params(manager: ocp.CheckpointManager, step: int, params) -> dict:
  """Only the parameters of checkpoint `step`, as host numpy arrays of `params`' shapes (no
  optimizer state read, nothing placed on a device), checked as `restore` checks the shapes."""
  name = _check_fits(manager, step, params, None)
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
  """The checkpoint's name, once its metadata reads and its parameters fit `params`. Checked
  before restoring: a restore that fails half-way leaves Orbax's background I/O spilling
  tracebacks at exit, and the errors here name the tensor or field."""
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
  saved = config_lib.upgrade(saved_identity) if run_identity and saved_identity else None
  if saved is not None and saved.objective != run_identity['objective']:
    raise UsageError(f'{name} was written by a run of objective {saved.objective!r}, not '
                     f"{run_identity['objective']!r}; use a new --workdir or "
                     f'--config.objective={saved.objective}')
  if problems := shape_mismatches(saved_params, params, 'checkpoint', 'model'):
    raise UsageError(f'{name} does not match the configured model: {problems}; use a new '
                     '--workdir or the config that run was started with')
  if saved is not None:  # fields added since the checkpoint: upgrade gave the value runs had
    wanted = run_identity['model']
    extendable = config_lib.EXTENDABLE if wanted['architecture'] == 'modern' else ()
    changed = [f'{k}: checkpoint {saved.model[k]!r}, now {v!r}'
               for k, v in wanted.items() if saved.model[k] != v and k not in extendable]
    if changed:
      raise UsageError(f"{name} was written by a different model ({', '.join(changed)}); use a "
                       'new --workdir or the config that run was started with')
  return name


def _first_line(error: Exception) -> str:
  text = str(error).strip().splitlines()[0] if str(error).strip() else ''
  return text.split(' See full TensorStore details')[0][:300]


def _reason(error: Exception) -> str:
  """The first line of what Orbax or TensorStore said, short enough for one error line."""
  return f'{type(error).__name__}: {_first_line(error)}'[:300] + ' (a truncated or corrupted file)'


def _damaged_dir(manager: ocp.CheckpointManager) -> str:
  return os.path.join(os.path.dirname(str(manager.directory).rstrip('/')), DAMAGED)


def _set_aside(manager: ocp.CheckpointManager, step: int) -> str:
  """Moves checkpoint `step` into damaged_checkpoints/, out of Orbax's sight (the step can be
  saved again when retrained); returns where."""
  target = epath.Path(_damaged_dir(manager))
  target.mkdir(parents=True, exist_ok=True)
  moved, n = target / str(step), 1
  while moved.exists():
    n += 1
    moved = target / f'{step}.{n}'
  (epath.Path(manager.directory) / str(step)).rename(moved)
  manager.reload()
  return str(moved)


def shape_mismatches(have, want, have_name: str, want_name: str) -> str:
  """'' where the trees' tensor paths and shapes agree; else the first three differences and how
  many more, for an error line. Leaves: arrays, ShapeDtypeStructs or Orbax array metadata."""
  shapes = lambda tree: {'/'.join(str(getattr(k, 'key', k)) for k in path): tuple(x.shape)
                         for path, x in jax.tree_util.tree_leaves_with_path(tree)}
  have, want = shapes(have), shapes(want)
  problems = [f'{p}: {have_name} {have[p]}, {want_name} {want[p]}'
              for p in want if p in have and have[p] != want[p]]
  problems += [f'{p} missing from the {have_name}' for p in want if p not in have]
  problems += [f'{p} in the {have_name} but not in the {want_name}' for p in have if p not in want]
  more = f' (and {len(problems) - 3} more)' if len(problems) > 3 else ''
  return '; '.join(problems[:3]) + more
