"""Command line: start a run from Hugging Face ELECTRA checkpoint(s).

python -m electra_jax.import_hf --hf_dir=DIR [--generator_dir=DIR] [--vocab=PATH] \
    [--allow_pickle] --workdir=NEW_RUN --config=configs/<size>.py [--config.x=y ...]

--hf_dir is one model directory (ElectraForPreTraining or ElectraForMaskedLM, e.g. a local copy
of google/electra-small-discriminator) or a directory holding discriminator/ and generator/ (what
electra_jax.export writes), or a pretrained BERT (BertModel, BertForMaskedLM, BertForPreTraining),
read as the discriminator's encoder (hf/bert.py). The run's model comes from the checkpoint; the
config file supplies the rest (optimizer, data, steps). Then continue pretraining with
electra_jax.main and the same config, plus the --config.model flags this command prints.
"""

from absl import app, flags
from ml_collections import config_flags

from electra_jax.common import cli

USAGE = ('python -m electra_jax.import_hf --hf_dir=DIR [--generator_dir=DIR] [--vocab=PATH] '
         '[--allow_pickle] --workdir=NEW_RUN --config=configs/<size>.py')
_CONFIG = config_flags.DEFINE_config_file('config', None, 'Run config file (configs/*.py).',
                                          lock_config=True)
_HF_DIR = flags.DEFINE_string('hf_dir', None, 'Hugging Face ELECTRA model directory, one '
                              'holding discriminator/ and generator/, or a pretrained BERT.')
_GENERATOR_DIR = flags.DEFINE_string('generator_dir', None, 'The generator (ElectraForMaskedLM) '
                                     'when it lives in a directory of its own.')
_VOCAB = flags.DEFINE_string('vocab', None, 'Vocabulary (WordPiece vocab.txt or sentencepiece '
                             '.model) if the checkpoint directory has none.')
_ALLOW_PICKLE = flags.DEFINE_bool('allow_pickle', False, 'Read pytorch_model.bin (pickle, which '
                                  'can run code) when there is no model.safetensors.')
_WORKDIR = flags.DEFINE_string('workdir', None, 'New run directory to create.')
flags.mark_flags_as_required(['config', 'hf_dir', 'workdir'])


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}\nusage: {USAGE}')
  cli.quiet_orbax()
  # pylint: disable=g-import-not-at-top  (keeps --help fast)
  from electra_jax.common import config as config_lib
  from electra_jax.hf import importing
  config_path = config_flags.get_config_filename(flags.FLAGS['config'])
  file_model = config_lib.load_config_file(config_path).model
  pinned = {k for k, v in _CONFIG.value.model.items() if file_model[k] != v}
  config = cli.run(importing.import_checkpoint, _CONFIG.value, _WORKDIR.value, _HF_DIR.value,
                   _GENERATOR_DIR.value, _VOCAB.value, _ALLOW_PICKLE.value, pinned)
  flags_needed = ' '.join(importing.model_overrides(config.model, file_model))
  print(f'imported {_HF_DIR.value} into {_WORKDIR.value} (checkpoint of step 0). Continue '
        f'pretraining with:\n  python -m electra_jax.main --config={config_path} '
        f'--workdir={_WORKDIR.value} --config.data.train_files=FILES {flags_needed}'.rstrip())


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE))
