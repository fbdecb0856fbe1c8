"""What every command line shares: a user's mistake ends as one `electra_jax: error:` line."""

import logging
import sys

from absl import flags
from absl import logging as absl_logging

from electra_jax.common import interrupts
from electra_jax.common.errors import UsageError


def fail(message: str):
  sys.exit(f'electra_jax: error: {message}')


def flags_parser(usage: str, writes=('workdir', 'out')):
  """An absl flags_parser that reports flag and config mistakes in one line plus the usage.

  The flags named in `writes` (those of them the command defines) are directories it writes:
  each must be one it can write in or make (storage.check_writable_dir).
  """
  def parse(argv):
    config_path = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), None)
    try:
      if config_path:
        from electra_jax.common import config as config_lib  # pylint: disable=g-import-not-at-top
        config_lib.check_overrides(argv, config_path)
      rest = flags.FLAGS(argv)
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
  """Orbax narrates every save and restore at INFO through absl; keep only its warnings."""
  # Record levels are the standard library's (absl's own WARNING constant is 1, not 30).
  absl_logging.get_absl_logger().addFilter(
      lambda record: record.levelno >= logging.WARNING or '/orbax/' not in record.pathname)
