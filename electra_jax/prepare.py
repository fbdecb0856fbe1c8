"""Command line: prepare a corpus once, for any number of runs and hosts to read.

python -m electra_jax.prepare --config=configs/small.py --out=DATA_DIR \
    [--config.data.sources=tfds:wikipedia/20230601.en@0.7,books/*.txt@0.3] [--config.x=y ...]
python -m electra_jax.prepare --verify=DATA_DIR

Writes DATA_DIR/vocab.model (trained on a sample of the training sources, or data.vocab_model
copied), DATA_DIR/train/ and, when the config names evaluation sources, DATA_DIR/eval/. Then
train with --config.data.prepared_dir=DATA_DIR. Preparing again with the same inputs does
nothing; a DATA_DIR prepared from other inputs is left alone unless --overwrite is given.
--verify compares every shard with the sha256 recorded when it was written.
"""

import json
import os

from absl import app, flags
from ml_collections import config_flags

from electra_jax.common import cli
from electra_jax.data import preparation, store
from electra_jax.common.errors import UsageError

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Run config file (configs/*.py).',
                                          lock_config=True)
_OUT = flags.DEFINE_string('out', None, 'Directory to write the prepared data to.')
_OVERWRITE = flags.DEFINE_bool('overwrite', False,
                               'Replace data in --out that was prepared from other inputs.')
_VERIFY = flags.DEFINE_string('verify', None, 'Check the shards of this prepared directory.')
USAGE = 'python -m electra_jax.prepare --config=configs/<size>.py --out=DIR (or --verify=DIR)'


def _summary(split: str, manifest: dict) -> str:
  counts = manifest['counts']
  # Computed, not read: splits prepared before the manifest recorded it are summarized too.
  kept_fraction = round(counts['tokens_in_examples'] / max(counts['tokens'], 1), 6)
  return json.dumps({'split': split, **{k: counts[k] for k in (
      'documents', 'tokens', 'examples', 'tokens_in_examples')},
                     'kept_fraction': kept_fraction, 'padding_fraction': counts['padding_fraction'],
                     # Read past, not refused (see the warnings above it).
                     **{k: counts.get(k, 0) for k in ('files_without_text', 'unclosed_docs')},
                     'shards': len(manifest['shards']), 'seconds': counts['seconds'],
                     'tokens_per_s': round(counts['tokens'] / max(counts['seconds'], 1e-9))})


def _verify(directory: str) -> None:
  splits = [s for s in preparation.SPLITS if os.path.isdir(os.path.join(directory, s))]
  if not splits:
    raise UsageError(f"'{directory}' holds no prepared split (train/ or eval/)")
  for split in splits:
    checked = store.verify_store(os.path.join(directory, split))
    print(json.dumps({'split': split, 'verified_bytes': checked}))


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  if _VERIFY.value:
    cli.run(_verify, _VERIFY.value)
    return
  if not _CONFIG.value or not _OUT.value:
    cli.fail('pass --config=CONFIG_FILE and --out=DIR (or --verify=DIR)')
  manifests = cli.run(preparation.prepare_dataset, _CONFIG.value, _OUT.value,
                      overwrite=_OVERWRITE.value)
  for split, manifest in manifests.items():
    print(_summary(split, manifest))
  print(f'# train on it with --config.data.prepared_dir={_OUT.value}')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE))
