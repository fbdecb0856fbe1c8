"""One process at a time in a run's directory.

Two runs in one directory write the same checkpoint steps and seeds (two pretraining runs in one
workdir both failed inside Orbax and left a checkpoint half-written), so a second one is refused
before it writes anything. The lock is flock on the directory itself: no file is left behind,
and it ends with the process however that ends. A gs:// workdir has no such lock.
"""

import contextlib
import fcntl
import functools
import os

from absl import logging

from electra_jax.common import storage
from electra_jax.common.errors import UsageError


@contextlib.contextmanager
def only_run_in(directory: str, what: str, create: bool = False):
  """Holds `directory` for this process while the block runs.

  Raises UsageError, naming `what` holds it, if another process does. With `create` the
  directory is made first and removed again if the block leaves it empty (a run refused
  before it wrote anything leaves no trace).
  """
  if storage.is_uri(directory):
    yield
    return
  created = create and not os.path.isdir(directory)
  if create:
    os.makedirs(directory, exist_ok=True)
  fd = os.open(directory, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise UsageError(f'{directory} is in use by another {what} (a running process holds it); '
                       'wait for that one to end or stop it, or use another directory') from None
    except OSError as e:  # a file system without locks (some network mounts)
      logging.warning('could not lock %s (%s): nothing stops a second run from writing there '
                      'at the same time', directory, e)
    yield
  finally:
    os.close(fd)  # releases the lock
    if created and os.path.isdir(directory) and not os.listdir(directory):
      os.rmdir(directory)


def one_run_per_workdir(what: str):
  """Decorates run(config, workdir): the whole call holds `workdir` (made if missing) as
  only_run_in does, so a second process running there at the same time is refused before it
  writes anything."""
  def decorate(run):
    @functools.wraps(run)
    def holding_workdir(config, workdir):
      with only_run_in(workdir, what, create=True):
        return run(config, workdir)
    return holding_workdir
  return decorate
