"""What the trainer needs from data/: the run's vocabulary, its examples, and batches on the mesh.

The vocabulary and the prepared examples live in the workdir, so a resumed run reads exactly what
the first run wrote, whatever happened to the source files or the config since.
"""

import os
import shutil

import jax
import ml_collections
import numpy as np

from electra_jax.data import pipeline, text, vocab as vocab_lib
from electra_jax.errors import UsageError


def setup_vocab(config: ml_collections.ConfigDict, workdir: str) -> vocab_lib.Vocab:
  """The workdir's vocabulary, created on first use by copying or training one.

  It is `vocab.model` (sentencepiece) or, for a run that keeps a WordPiece vocabulary such as
  one imported from a Google checkpoint, `vocab.txt`.
  """
  given = config.data.vocab_model
  run_model = run_vocab_path(workdir, given)
  if os.path.exists(run_model):
    vocab = vocab_lib.load_vocab(run_model)
    if given and vocab_lib.vocab_fingerprint(vocab_lib.load_vocab(given)) != \
        vocab_lib.vocab_fingerprint(vocab):
      raise UsageError(f'{given} differs from the vocabulary this run was started with '
                       f'({run_model}); use a new --workdir or drop --config.data.vocab_model')
  elif given:
    vocab_lib.load_vocab(given)  # fails clearly before anything is copied
    shutil.copyfile(given, run_model + '.tmp')
    os.replace(run_model + '.tmp', run_model)
    vocab = vocab_lib.load_vocab(run_model)
  else:
    files = text.resolve_files(config.data.train_files)
    vocab = vocab_lib.train_vocab(files, config.model.vocab_size, os.path.join(workdir, 'vocab'),
                                  max_sentences=config.data.vocab_sample_sentences,
                                  seed=config.seed)
  if vocab.size != config.model.vocab_size:
    raise UsageError(f'the vocabulary {vocab.model_path} has {vocab.size} pieces but '
                     f'config.model.vocab_size={config.model.vocab_size}; set '
                     f'--config.model.vocab_size={vocab.size}')
  return vocab


def run_vocab_path(workdir: str, given: str = '') -> str:
  """Where the run's vocabulary is or goes: the existing file, else named after `given`'s kind."""
  paths = [os.path.join(workdir, name) for name in ('vocab.model', 'vocab.txt')]
  existing = [p for p in paths if os.path.exists(p)]
  if existing:
    return existing[0]
  return paths[1] if given.endswith('.txt') else paths[0]


def load_examples(config: ml_collections.ConfigDict, workdir: str, vocab: vocab_lib.Vocab,
                  split: str) -> dict[str, np.ndarray] | None:
  """Packed examples of `split` ('train' or 'eval'), prepared once into <workdir>/data/."""
  patterns = config.data[f'{split}_files']
  if not patterns:
    return None
  return pipeline.prepare_examples(
      text.resolve_files(patterns, setting=f'data.{split}_files'), vocab, max_seq_length=config.max_seq_length,
      seed=config.seed, cache_dir=os.path.join(workdir, 'data'), name=split)


def to_global_array(local_batch: dict[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  """Assembles each process's rows into one global batch sharded over the mesh's data axis."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}
