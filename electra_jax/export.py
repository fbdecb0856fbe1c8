"""Command line: python -m electra_jax.export --workdir=RUN --out=DIR [--step=N] [--overwrite]
                  [--language=en] [--license=apache-2.0]

Writes DIR/discriminator (ElectraForPreTraining) and DIR/generator (ElectraForMaskedLM), or for
a run of objective 'mlm' DIR/mlm (ElectraForMaskedLM), each a standard Hugging Face directory
with config.json, model.safetensors and tokenizer files, from the run's latest checkpoint or
from checkpoint N.

With the --workdir of a fine-tuning run, it writes one seed's model (--seed, default 0) as DIR
itself: SQuAD's 'plain' head as ElectraForQuestionAnswering, chunking as
ElectraForTokenClassification, GLUE's 'transformers' head as ElectraForSequenceClassification
(finetune/export.py).

Each directory gets a model card (README.md) read from the run; --language and --license put
what the run cannot know, the text's language and license, into the card's metadata.
"""

from absl import app, flags

from electra_jax.common import cli

USAGE = ('python -m electra_jax.export --workdir=RUN --out=DIR [--step=N] [--overwrite] '
         '[--language=CODES] [--license=ID]\n'
         '       python -m electra_jax.export --workdir=FINETUNED --out=DIR [--seed=N] '
         '[--overwrite] [--language=CODES] [--license=ID]')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory of the pretraining run to export.')
_OUT = flags.DEFINE_string('out', None, 'Output directory; gets discriminator/ and generator/ '
                           '(mlm/ for an MLM run).')
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint step to export (default: the latest).')
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace the existing directories in --out.')
_SEED = flags.DEFINE_integer('seed', 0, 'A fine-tuning run: the seed whose model to export.')
_LANGUAGE = flags.DEFINE_string('language', '', "The text's language(s) for the model card: ISO "
                                '639 codes, comma-separated (en, or en,fr).')
_LICENSE = flags.DEFINE_string('license', '', "The license for the model card: the Hugging Face "
                               "Hub's identifier (apache-2.0, cc-by-sa-4.0, other).")
flags.mark_flags_as_required(['workdir', 'out'])


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}\nusage: {USAGE}')
  cli.quiet_orbax()
  from electra_jax.hf import exporting  # pylint: disable=g-import-not-at-top  (fast --help)
  from electra_jax.finetune import export as finetuned
  if finetuned.is_finetuned(_WORKDIR.value):
    step = cli.run(finetuned.export_seed, _WORKDIR.value, _OUT.value, _SEED.value,
                   _OVERWRITE.value, _LANGUAGE.value, _LICENSE.value)
    print(f'exported seed {_SEED.value} (step {step}) of {_WORKDIR.value} to {_OUT.value}')
    return
  run = cli.run(exporting.export_run, _WORKDIR.value, _OUT.value, _STEP.value, _OVERWRITE.value,
                _LANGUAGE.value, _LICENSE.value)
  written = ' and '.join(f'{_OUT.value}/{network}'
                         for network in exporting.exported_networks(run.config))
  print(f'exported step {run.step} of {_WORKDIR.value} to {written}')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE, writes=('out',)))  # --workdir is read
