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
import shutil

from absl import app, flags
from ml_collections import config_flags

from electra_jax import cli
from electra_jax.data import preparation, sources as sources_lib, store, vocab as vocab_lib
from electra_jax.errors import UsageError

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Run config file (configs/*.py).',
                                          lock_config=True)
_OUT = flags.DEFINE_string('out', None, 'Directory to write the prepared data to.')
_OVERWRITE = flags.DEFINE_bool('overwrite', False,
                               'Replace data in --out that was prepared from other inputs.')
_VERIFY = flags.DEFINE_string('verify', None, 'Check the shards of this prepared directory.')

SPLITS = ('train', 'eval')


def _vocab(config, out: str, train_sources, overwrite: bool):
  """DATA_DIR's vocabulary: data.vocab_model copied, the one already there, or a new one."""
  given = config.data.vocab_model
  existing = [p for p in (os.path.join(out, n) for n in ('vocab.model', 'vocab.txt'))
              if os.path.exists(p)]
  if given:
    vocab = vocab_lib.load_vocab(given)
    target = os.path.join(out, 'vocab.txt' if given.endswith('.txt') else 'vocab.model')
    if existing and (existing[0] != target or vocab_lib.vocab_fingerprint(vocab_lib.load_vocab(
        existing[0])) != vocab_lib.vocab_fingerprint(vocab)) and not overwrite:
      raise UsageError(f"{existing[0]} differs from data.vocab_model '{given}'; pass --overwrite "
                       'to prepare everything in --out again with it, or choose another --out')
    for path in existing:
      os.remove(path)
    shutil.copyfile(given, target)
    return vocab_lib.load_vocab(target)
  if existing and not overwrite:
    return vocab_lib.load_vocab(existing[0])
  return preparation.train_vocab(
      train_sources, config.model.vocab_size, os.path.join(out, 'vocab'),
      tfds_data_dir=config.data.tfds_data_dir, text_field=config.data.text_field,
      max_sentences=config.data.vocab_sample_sentences, seed=config.seed)


def prepare_dataset(config, out: str, *, overwrite: bool = False) -> dict[str, dict]:
  """Prepares the vocabulary and the splits the config names into `out`; returns manifests."""
  if config.data.prepared_dir:
    raise UsageError('data.prepared_dir names data that is already prepared; name the corpus to '
                     'prepare with data.sources or data.train_files')
  store.check_local(out, '--out')
  specs = {split: sources_lib.from_config(config.data, split) for split in SPLITS}
  if specs['train'] is None:
    raise UsageError('no training data to prepare: pass --config.data.sources=... or '
                     '--config.data.train_files=PATH_OR_GLOB')
  os.makedirs(out, exist_ok=True)
  vocab = _vocab(config, out, specs['train'], overwrite)
  manifests = {}
  for split, split_specs in specs.items():
    if split_specs is None:
      continue
    units = preparation.resolve(split_specs, tfds_data_dir=config.data.tfds_data_dir,
                                text_field=config.data.text_field)
    key = preparation.preparation_key(split_specs, units, vocab, config.max_seq_length,
                                      config.seed, config.data.text_field)
    split_dir = os.path.join(out, split)
    if os.path.exists(os.path.join(split_dir, store.MANIFEST)):
      manifest = store.read_manifest(split_dir)
      if manifest['key'] == key:
        manifests[split] = manifest
        continue
      if not overwrite:
        raise UsageError(f'{split_dir} holds data prepared from other inputs (sources, '
                         'vocabulary, max_seq_length or seed); pass --overwrite to replace it, '
                         'or choose another --out')
    manifests[split] = preparation.prepare_split(
        split_specs, units, vocab, split_dir, max_seq_length=config.max_seq_length,
        seed=config.seed, key=key, workers=config.data.prepare_workers, name=split)
  return manifests


def _summary(split: str, manifest: dict) -> str:
  counts = manifest['counts']
  # Computed, not read: splits prepared before the manifest recorded it are summarized too.
  kept_fraction = round(counts['tokens_in_examples'] / max(counts['tokens'], 1), 6)
  return json.dumps({'split': split, **{k: counts[k] for k in (
      'documents', 'tokens', 'examples', 'tokens_in_examples')},
                     'kept_fraction': kept_fraction, 'padding_fraction': counts['padding_fraction'],
                     'shards': len(manifest['shards']), 'seconds': counts['seconds'],
                     'tokens_per_s': round(counts['tokens'] / max(counts['seconds'], 1e-9))})


def _verify(directory: str) -> None:
  splits = [s for s in SPLITS if os.path.isdir(os.path.join(directory, s))]
  if not splits:
    raise UsageError(f"'{directory}' holds no prepared split (train/ or eval/)")
  for split in splits:
    checked = store.verify_store(os.path.join(directory, split))
    print(json.dumps({'split': split, 'verified_bytes': checked}))


USAGE = 'python -m electra_jax.prepare --config=configs/<size>.py --out=DIR (or --verify=DIR)'


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  if _VERIFY.value:
    cli.run(_verify, _VERIFY.value)
    return
  if not _CONFIG.value or not _OUT.value:
    cli.fail('pass --config=CONFIG_FILE and --out=DIR (or --verify=DIR)')
  manifests = cli.run(prepare_dataset, _CONFIG.value, _OUT.value, overwrite=_OVERWRITE.value)
  for split, manifest in manifests.items():
    print(_summary(split, manifest))
  print(f'# train on it with --config.data.prepared_dir={_OUT.value}')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE))
