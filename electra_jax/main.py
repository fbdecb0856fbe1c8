"""Command line: python -m electra_jax.main --config=configs/<size>.py --workdir=DIR [--config.x=y ...]

Running the same command again resumes from the latest checkpoint in DIR; raising
--config.num_train_steps continues a finished run. SIGTERM or Ctrl-C saves and stops the run,
which then exits 143 or 130 (docs/reliability.md); a second Ctrl-C stops it at once.
"""

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from electra_jax.common import cli, interrupts

USAGE = 'python -m electra_jax.main --config=configs/tiny.py --workdir=DIR [--config.x=y ...]'

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Run config file (configs/*.py).',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory of the run: checkpoints, logs, vocab; '
                               'local, or a gs:// folder (pip install electra_jax[gcs]).')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None,
    'host:port of process 0, to start several processes by hand (CPU tests, GPU clusters). '
    'Not needed on Cloud TPU VMs, where processes find each other.')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', None, 'With --coordinator_address.')
_PROCESS_ID = flags.DEFINE_integer('process_id', None, 'With --coordinator_address: 0..N-1.')
flags.mark_flags_as_required(['config', 'workdir'])


def start_processes():
  """Joins this process to the others of a multi-process run, before JAX does any work."""
  import jax  # pylint: disable=g-import-not-at-top
  if _COORDINATOR.value:
    if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
      cli.fail('--coordinator_address needs --num_processes and --process_id')
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    connect_all_devices()
  elif cli.found(cli.TPU_FILES):  # a Cloud TPU VM
    try:
      jax.distributed.initialize()  # every worker of a pod slice runs the same command
    except (RuntimeError, ValueError) as e:
      # A single-host TPU runtime (e.g. Colab's) may have no cluster to join; on a pod slice
      # this succeeds, and a failure there would show as fewer devices than the slice has.
      logging.warning('running as a single process: jax.distributed.initialize() failed (%s)', e)


def connect_all_devices():
  """One collective over all devices, which the train step's collectives then reuse: CPU
  collectives (gloo) connect a group at its first collective and give up if a process arrives
  30 s after another (no flag changes it), and processes finish compiling far apart. initialize()
  has just released them together. (sync_global_devices gathers over a group of its own.)"""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from electra_jax.training import train  # pylint: disable=g-import-not-at-top
  mesh = train.make_mesh()
  spread = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec('data'))
  ones = jax.make_array_from_process_local_data(
      spread, np.ones(jax.local_device_count(), np.float32))
  summed = jax.jit(lambda x: x.sum(),
                   out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
  jax.block_until_ready(summed(ones))


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  start_processes()
  import jax  # pylint: disable=g-import-not-at-top
  from electra_jax.training import train  # pylint: disable=g-import-not-at-top  (keeps --help fast)
  from electra_jax.hf import importing  # pylint: disable=g-import-not-at-top
  cli.quiet_orbax()
  # Several processes leave SIGTERM to JAX's preemption notice, which Orbax's sync reads, and
  # Ctrl-C to Python: one process stopping alone would hang the others in a collective.
  with interrupts.catching(() if jax.process_count() > 1 else interrupts.SIGNALS) as stop:
    # A Hugging Face config.generator_init is read by hf/, a floor above training.
    state = cli.run(train.train_and_evaluate, _CONFIG.value, _WORKDIR.value,
                    importing.read_generator)
  if int(state.step) < _CONFIG.value.num_train_steps:  # stopped before its end: not finished
    sys.exit(stop.exit_status())


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE))
