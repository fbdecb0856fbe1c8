"""The run directory's own files, in a local directory or at a URI (gs://, s3://).

A pod run's workdir is a Cloud Storage folder every host reaches. URIs go through etils.epath
(fsspec); an object store has no rename or append, but replaces an object whole, so a file there
is always written in one piece. What must stay local (memory-mapped examples, the vocabulary
file) lives in data.local_dir.
"""

import importlib.util
import os
import tempfile

from etils import epath

from electra_jax.common.errors import UsageError

# URI scheme: the modules reading and writing a run there needs, and how to install them.
# gs:// and s3:// are the object stores both epath (through fsspec) and tensorboardX write to;
# tensorboardX's gs:// event writer needs google-cloud-storage, its s3:// one boto3.
SCHEMES = {
    'gs': (('gcsfs', 'google.cloud.storage'),
           "pip install 'electra_jax[gcs]' (gcsfs and google-cloud-storage)"),
    's3': (('s3fs', 'boto3'), 'pip install s3fs boto3'),
}


def is_uri(path: str) -> bool:
  return '://' in path


def _installed(module: str) -> bool:
  try:
    return importlib.util.find_spec(module) is not None
  except ImportError:  # a parent package (google.cloud) is missing
    return False


def check_uri(path: str, setting: str):
  """Raises UsageError unless `path` is local or a URI whose file system is installed."""
  if not is_uri(path):
    return
  scheme = path.split('://', 1)[0]
  if scheme not in SCHEMES:
    raise UsageError(f"{setting}='{path}': {scheme}:// is not supported; use a local path, "
                     'gs:// or s3://')
  modules, install = SCHEMES[scheme]
  missing = [module for module in modules if not _installed(module)]
  if missing:
    raise UsageError(f"{setting}='{path}' needs {' and '.join(missing)}, which electra_jax "
                     f'does not install by default: {install}')


def exists(path: str) -> bool:
  return epath.Path(path).exists() if is_uri(path) else os.path.exists(path)


def is_file(path: str) -> bool:
  return epath.Path(path).is_file() if is_uri(path) else os.path.isfile(path)


def is_dir(path: str) -> bool:
  return epath.Path(path).is_dir() if is_uri(path) else os.path.isdir(path)


def check_writable_dir(path: str, setting: str):
  """Raises UsageError unless `path` is a directory this process can write in, or can be made one.

  Checked before a command starts, so that a path that is a file, lies under one or cannot be
  written (/proc/x) ends in one line rather than in the first write, possibly hours in. A URI
  is left to check_uri and the object store.
  """
  if not path or is_uri(path):
    return
  full = os.path.abspath(path)
  existing = full
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    what = 'a file' if os.path.isfile(existing) else 'no directory'
    where = (f'is {what}, not a directory' if existing == full
             else f'lies under {existing}, which is {what}, not a directory')
    raise UsageError(f'{setting}={path} {where}; pass a directory (one that does not exist yet '
                     'is made)')
  try:  # the only sure test: os.access says yes to root, and /proc refuses even root
    os.rmdir(tempfile.mkdtemp(prefix='.electra_jax-write-check-', dir=existing))
  except OSError as e:
    place = 'in it' if existing == full else f'in {existing}'
    raise UsageError(f'{setting}={path} cannot be written: making a directory {place} fails '
                     f'({e.strerror}); pass a directory you can write to') from None


def makedirs(path: str):
  # An object store has no directories: a folder exists once an object below it does.
  if not is_uri(path):
    os.makedirs(path, exist_ok=True)


def read_text(path: str) -> str:
  return epath.Path(path).read_text()  # UTF-8, as write_text writes


def write_text(path: str, text: str):
  """Replaces `path` atomically: a local file through a temporary file and a rename."""
  if is_uri(path):
    epath.Path(path).write_text(text)
  else:
    _replace_local(path, text.encode())


def _replace_local(path: str, data: bytes):
  with open(path + '.tmp', 'wb') as f:
    f.write(data)
  os.replace(path + '.tmp', path)


def copy_file(source: str, target: str):
  """Copies a file between local paths and URIs, either way; the target appears whole."""
  data = epath.Path(source).read_bytes()
  if is_uri(target):
    epath.Path(target).write_bytes(data)
  else:
    os.makedirs(os.path.dirname(target) or '.', exist_ok=True)
    _replace_local(target, data)
