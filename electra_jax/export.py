"""Command line: python -m electra_jax.export --workdir=RUN --out=DIR [--step=N] [--overwrite]

Writes DIR/discriminator (ElectraForPreTraining) and DIR/generator (ElectraForMaskedLM), or for
a run of objective 'mlm' DIR/mlm (ElectraForMaskedLM), each a standard Hugging Face directory
with config.json, model.safetensors and tokenizer files, from the run's latest checkpoint or
from checkpoint N.
"""

from absl import app, flags

from electra_jax import cli

USAGE = 'python -m electra_jax.export --workdir=RUN --out=DIR [--step=N] [--overwrite]'
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory of the pretraining run to export.')
_OUT = flags.DEFINE_string('out', None, 'Output directory; gets discriminator/ and generator/ '
                           '(mlm/ for an MLM run).')
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint step to export (default: the latest).')
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace the existing directories in --out.')
flags.mark_flags_as_required(['workdir', 'out'])


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}\nusage: {USAGE}')
  cli.quiet_orbax()
  from electra_jax.hf import exporting  # pylint: disable=g-import-not-at-top  (keeps --help fast)
  run = cli.run(exporting.export_run, _WORKDIR.value, _OUT.value, _STEP.value, _OVERWRITE.value)
  written = ' and '.join(f'{_OUT.value}/{network}'
                         for network in exporting.EXPORTED[run.config.objective])
  print(f'exported step {run.step} of {_WORKDIR.value} to {written}')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE))
