"""Command line: fine-tune on one task (GLUE, SQuAD or CoNLL-2000 chunking), for one or more seeds.

python -m electra_jax.finetune --config=configs/finetune/glue.py --config.task=MRPC \
    --config.init_from=RUN_OR_HF_DIR [--config.data_dir=GLUE_DIR] [--config.seeds=0,1,2] \
    --workdir=DIR
(configs/finetune/squad.py with --config.task=squad_v1|squad_v2, or configs/finetune/chunk.py)
Writes DIR/results.json, DIR/config.json (the resolved recipe) and the task's outputs.
"""

from absl import app, flags
from ml_collections import config_flags

from electra_jax.common import cli, interrupts, storage

USAGE = ('python -m electra_jax.finetune --config=configs/finetune/glue.py --config.task=TASK '
         '--config.init_from=RUN_OR_HF_DIR --workdir=DIR [--config.x=y ...]')
_CONFIG = config_flags.DEFINE_config_file('config', None, 'Fine-tuning config file '
                                          '(configs/finetune/glue.py).', lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Output directory: results.json, submissions.')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}\nusage: {USAGE}')
  if storage.is_uri(_WORKDIR.value):  # its checkpoints and outputs are written with local I/O
    cli.fail(f"--workdir='{_WORKDIR.value}' is not a local path; fine-tuning writes to local "
             'disk: pass a local --workdir, then copy it (gcloud storage cp -r DIR gs://...)')
  cli.quiet_orbax()
  # pylint: disable=g-import-not-at-top  (keeps --help fast)
  from electra_jax.finetune import loop, families as run
  with interrupts.catching():  # SIGTERM, Ctrl-C: the seed under way saves; exit 143, 130
    summary = cli.run(run.fine_tune, _CONFIG.value, _WORKDIR.value)
  # GLUE's classification tasks: the floor the score must clear, beside it.
  majority = summary['majority_class'] if 'majority_class' in summary else None
  print(f'{summary["task"]}: {summary["score_metric"]} {summary["score"]:.4f} (median of '
        f'{len(summary["seeds"])} seed(s)); {loop.format_scores(summary["median"])}; '
        + (f'majority class {loop.format_scores(majority)}; ' if majority else '')
        + f'{_WORKDIR.value}/{loop.RESULTS}')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE))
