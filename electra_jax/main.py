"""Command line: python -m electra_jax.main --config=configs/<size>.py --workdir=DIR [--config.x=y ...]

Running the same command again resumes from the latest checkpoint in DIR; raising
--config.num_train_steps continues a finished run.
"""

import glob
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from electra_jax.errors import UsageError

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Run config file (configs/*.py).',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory of the run: checkpoints, logs, vocab.')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None,
    'host:port of process 0, to start several processes by hand (CPU tests, GPU clusters). '
    'Not needed on Cloud TPU VMs, where processes find each other.')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', None, 'With --coordinator_address.')
_PROCESS_ID = flags.DEFINE_integer('process_id', None, 'With --coordinator_address: 0..N-1.')
flags.mark_flags_as_required(['config', 'workdir'])


def on_tpu_vm() -> bool:
  # TPU chips appear as /dev/accel* (v2-v4) or VFIO devices (v5e and later).
  return bool(glob.glob('/dev/accel*') or glob.glob('/dev/vfio/[0-9]*'))


def start_processes():
  """Joins this process to the others of a multi-process run, before JAX does any work."""
  import jax  # pylint: disable=g-import-not-at-top
  if _COORDINATOR.value:
    if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
      fail('--coordinator_address needs --num_processes and --process_id')
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  elif on_tpu_vm():
    jax.distributed.initialize()  # every worker of a pod slice runs the same command


def fail(message: str):
  sys.exit(f'electra_jax: error: {message}')


def parse_flags(argv):
  """absl flag parsing, with config mistakes reported as one line instead of a traceback."""
  config_path = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), None)
  try:
    if config_path:
      from electra_jax import config as config_lib  # pylint: disable=g-import-not-at-top
      config_lib.check_overrides(argv, config_path)
    return flags.FLAGS(argv)
  except UsageError as e:
    fail(str(e))
  except flags.Error as e:
    fail(f'{e}\nusage: python -m electra_jax.main --config=configs/tiny.py --workdir=DIR')
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    fail(f'bad --config override: {e}')


def main(argv):
  if len(argv) > 1:
    fail(f'unexpected arguments: {" ".join(argv[1:])}')
  start_processes()
  from electra_jax import train  # pylint: disable=g-import-not-at-top  (keeps --help fast)
  # Orbax narrates every save at INFO through absl; keep its warnings, drop the narration.
  logging.get_absl_logger().addFilter(
      lambda record: record.levelno >= logging.WARNING or '/orbax/' not in record.pathname)
  try:
    train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except UsageError as e:
    fail(str(e))


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags)
