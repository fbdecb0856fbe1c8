"""The real train step compiled for a TPU slice on this host, which needs libtpu but no TPU.

python -m electra_jax.compile --config=configs/base.py --topology=v4-8 [--config.x=y ...]
python -m electra_jax.compile --config=configs/small.py --topology=v5litepod-8 --step=finetune

Nothing runs: the step training runs is compiled for the named slice (v4-8, v5litepod-8, v6e-8,
v4-32, ...) from the same config. A few lines say whether it fits, what bounds the step and the
MFU ceiling; one JSON line after them says what it will cost there (docs/tpu.md lists its parts).
--step=finetune compiles the fine-tuning step instead (configs/finetune/glue.py on --config's
model).
"""

import json
from pathlib import Path

from absl import app, flags
import jax
from ml_collections import config_flags

from electra_jax.common import cli

USAGE = ('python -m electra_jax.compile --config=configs/base.py --topology=v4-8 '
         '[--config.x=y ...] [--step=finetune] [--search_batch=false]')
FINETUNE_CONFIG = str(Path(__file__).resolve().parents[1] / 'configs' / 'finetune' / 'glue.py')

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Run config file (configs/*.py).',
                                          lock_config=True)
_TOPOLOGY = flags.DEFINE_string('topology', None, 'The TPU slice to compile for (v4-8, '
                                'v5litepod-8, v6e-8, v4-32, ...).')
_STEP = flags.DEFINE_enum('step', 'pretrain', ['pretrain', 'finetune'], 'Which step to compile.')
_SEARCH = flags.DEFINE_bool('search_batch', True, 'Pretrain: search the largest per-chip batch '
                            'that fits, with and without remat (several compiles).')
_FINETUNE_CONFIG = config_flags.DEFINE_config_file(
    'finetune_config', FINETUNE_CONFIG, 'With --step=finetune: the fine-tuning recipe; the model '
    'is --config\'s.', lock_config=True)
_FINETUNE_EXAMPLES = flags.DEFINE_integer(
    'finetune_examples', 67349, 'With --step=finetune: training examples held on the devices '
    '(67,349: SST-2).')
flags.mark_flags_as_required(['config', 'topology'])


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  # Compiling for a described slice needs no accelerator here; keep JAX off any local one.
  jax.config.update('jax_platforms', 'cpu')
  # pylint: disable=g-import-not-at-top  (keeps --help fast)
  from electra_jax.training import aot
  if _STEP.value == 'pretrain':
    record = cli.run(aot.compile_pretraining, _CONFIG.value, _TOPOLOGY.value, _SEARCH.value)
  else:
    from electra_jax.finetune import aot as finetune_aot
    record = cli.run(finetune_aot.compile_finetuning, _CONFIG.value.model, _FINETUNE_CONFIG.value,
                     _TOPOLOGY.value, _FINETUNE_EXAMPLES.value)
  print(aot.summary(record))  # for a person; the JSON line last, for scripts
  print(json.dumps(record), flush=True)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE))
