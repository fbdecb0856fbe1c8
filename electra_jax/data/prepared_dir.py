"""A prepared data directory: the vocabulary and the splits a config names, written once.

`python -m electra_jax.prepare` is its command line; tests and scripts call `prepare_dataset`
directly (importing the command-line module would define its absl flags a second time).
"""

import os
import shutil

from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.data import preparation, sources as sources_lib, store, vocab as vocab_lib

SPLITS = ('train', 'eval')
# A vocabulary's files: sentencepiece's model and its piece list, or a WordPiece vocab.txt.
VOCAB_FILES = ('vocab.model', 'vocab.vocab', 'vocab.txt')


def _vocab(config, out: str, stage: str, train_sources, overwrite: bool):
  """DATA_DIR's vocabulary: the one already there, or a new one written to `stage`
  (data.vocab_model copied, or one trained on a sample of the training sources)."""
  given = config.data.vocab_model
  existing = [p for p in (os.path.join(out, n) for n in ('vocab.model', 'vocab.txt'))
              if os.path.exists(p)]
  if given:
    vocab = vocab_lib.load_vocab(given)
    name = 'vocab.txt' if given.endswith('.txt') else 'vocab.model'
    if existing and existing[0] == os.path.join(out, name) and vocab_lib.vocab_fingerprint(
        vocab_lib.load_vocab(existing[0])) == vocab_lib.vocab_fingerprint(vocab):
      return vocab_lib.load_vocab(existing[0])
    if existing and not overwrite:
      raise UsageError(f"{existing[0]} differs from data.vocab_model '{given}'; pass --overwrite "
                       'to prepare everything in --out again with it, or choose another --out')
    shutil.copyfile(given, os.path.join(stage, name))
    return vocab_lib.load_vocab(os.path.join(stage, name))
  if existing and not overwrite:
    vocab = vocab_lib.load_vocab(existing[0])
    vocab_lib.check_casing(vocab, config.data.vocab_lowercase)
    return vocab
  return preparation.train_vocab(
      train_sources, config.model.vocab_size, os.path.join(stage, 'vocab'),
      tfds_data_dir=config.data.tfds_data_dir, text_field=config.data.text_field,
      max_sentences=config.data.vocab_sample_sentences, seed=config.seed,
      lowercase=config.data.vocab_lowercase)


def _move_into_place(stage: str, out: str) -> None:
  """Moves what was made in `stage` into `out`; a new vocabulary replaces both kinds."""
  made = sorted(os.listdir(stage))
  if any(name in VOCAB_FILES for name in made):
    for name in VOCAB_FILES:
      if os.path.exists(os.path.join(out, name)):
        os.remove(os.path.join(out, name))
  for name in made:
    if os.path.isdir(os.path.join(stage, name)):
      preparation.move_into_place(os.path.join(stage, name), os.path.join(out, name))
    else:
      os.replace(os.path.join(stage, name), os.path.join(out, name))


def prepare_dataset(config, out: str, *, overwrite: bool = False) -> dict[str, dict]:
  """Prepares the vocabulary and the splits the config names into `out`; returns manifests.

  All of it is made in a directory beside `out` and moved in only once every split is
  complete, so a preparation stopped by an error (unreadable text, say) leaves `out` as it was.
  """
  if config.data.prepared_dir:
    raise UsageError('data.prepared_dir names data that is already prepared; name the corpus to '
                     'prepare with data.sources or data.train_files')
  store.check_local(out, '--out')
  specs = {split: sources_lib.from_config(config.data, split) for split in SPLITS}
  if specs['train'] is None:
    raise UsageError('no training data to prepare: pass --config.data.sources=... or '
                     '--config.data.train_files=PATH_OR_GLOB')
  # Held throughout: two preparations into one `out` would each move their own vocabulary and
  # splits in at the end, and finishing interleaved could pair one's vocabulary with the
  # other's examples.
  with run_lock.only_run_in(out, 'preparation', create=True):
    stage = f'{os.path.normpath(out)}.incomplete{os.getpid()}'
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    try:
      manifests = _prepare_into(config, out, stage, specs, overwrite)
      _move_into_place(stage, out)
    finally:
      shutil.rmtree(stage, ignore_errors=True)
  return manifests


def _prepare_into(config, out: str, stage: str, specs, overwrite: bool) -> dict[str, dict]:
  """Makes in `stage` what `out` lacks or holds from other inputs; returns every manifest."""
  vocab = _vocab(config, out, stage, specs['train'], overwrite)
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
        split_specs, units, vocab, os.path.join(stage, split),
        max_seq_length=config.max_seq_length, seed=config.seed, key=key,
        workers=config.data.prepare_workers, name=split)
  return manifests
