"""What every command line shares: a user's mistake ends as one `electra_jax: error:` line."""

import glob
import logging
import os
import sys

from absl import flags
from absl import logging as absl_logging

from electra_jax.common import interrupts
from electra_jax.common.errors import UsageError


def fail(message: str):
  sys.exit(f'electra_jax: error: {message}')


# The device files through which JAX reaches an accelerator: TPU chips (/dev/accel* to v4, VFIO
# from v5e), NVIDIA GPUs (/dev/dxg under WSL2), AMD GPUs (/dev/kfd), other GPUs' render nodes.
TPU_FILES = ('/dev/accel*', '/dev/vfio/[0-9]*')
ACCELERATOR_FILES = (*TPU_FILES, '/dev/nvidia[0-9]*', '/dev/nvidiactl', '/dev/dxg', '/dev/kfd',
                     '/dev/dri/renderD*')


def found(patterns) -> bool:
  return any(glob.glob(pattern) for pattern in patterns)


def keep_jax_off_absent_accelerators():
  """Keeps JAX from probing for accelerators a host lacks (unless JAX_PLATFORMS names some):
  left alone it tries libtpu first and prints what reads as a failure (`Unable to initialize
  backend 'tpu'`) before the command says anything. A Linux host with no accelerator device file
  runs on its CPU; on a GPU host only the line about the absent TPU is dropped."""
  if 'JAX_PLATFORMS' in os.environ or found(TPU_FILES):
    return
  logging.getLogger('jax._src.xla_bridge').addFilter(
      lambda record: not record.getMessage().startswith("Unable to initialize backend 'tpu'"))
  if sys.platform.startswith('linux') and not found(ACCELERATOR_FILES):
    import jax  # pylint: disable=g-import-not-at-top
    try:
      jax.config.update('jax_platforms', 'cpu')
    except RuntimeError:  # JAX already runs (a command called in process): it has chosen
      pass


def flags_parser(usage: str, writes=('workdir', 'out')):
  """An absl flags_parser that reports flag and config mistakes in one line plus the usage; the
  flags named in `writes` that the command defines must be directories it can write or make."""
  def parse(argv):
    config_path = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), None)
    try:
      if config_path:
        from electra_jax.common import config as config_lib  # pylint: disable=g-import-not-at-top
        config_lib.check_overrides(argv, config_path)
      rest = flags.FLAGS(argv)
      keep_jax_off_absent_accelerators()  # after --help, which needs no JAX
      from electra_jax.common import storage  # pylint: disable=g-import-not-at-top  (fast --help)
      for name in writes:
        if name in flags.FLAGS:
          storage.check_writable_dir(flags.FLAGS[name].value, f'--{name}')
      return rest
    except UsageError as e:
      fail(str(e))
    except flags.Error as e:
      fail(f'{e}\nusage: {usage}')
    except (AttributeError, KeyError, TypeError, ValueError) as e:
      fail(f'bad --config override: {e}')
  return parse


def run(function, *args, **kwargs):
  """Calls `function`, turning a UsageError into the one-line error exit, and a stop a signal
  asked for (which the loop has saved and logged) into its exit status."""
  try:
    return function(*args, **kwargs)
  except UsageError as e:
    fail(str(e))
  except interrupts.Stopped as e:
    sys.exit(e.status)


def quiet_orbax():
  """Orbax narrates every save and restore at INFO through absl: keep only its warnings. Its
  failures reach electra_jax as exceptions that end in one error line, so its own error records
  of them (a traceback from each of its threads) are dropped too."""
  # Record levels are the standard library's (absl's own WARNING constant is 1, not 30).
  absl_logging.get_absl_logger().addFilter(
      lambda record: '/orbax/' not in record.pathname or record.levelno == logging.WARNING)
  # Its writes run on asyncio loops, which log each abandoned write of a failed save.
  logging.getLogger('asyncio').setLevel(logging.CRITICAL)
