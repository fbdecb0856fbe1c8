"""The run's vocabulary in its workdir, and this host's directory for what must be local.

A workdir at a URI (gs://) holds the vocabulary too; each host loads a local copy, because
sentencepiece reads local files only.
"""

import hashlib
import os

import ml_collections

from electra_jax.common import storage
from electra_jax.common.errors import UsageError
from electra_jax.data import preparation, sources as sources_lib, store
from electra_jax.data import vocab as vocab_lib


def _prepared_vocab(prepared_dir: str) -> str:
  for name in ('vocab.model', 'vocab.txt'):
    if os.path.exists(os.path.join(prepared_dir, name)):
      return os.path.join(prepared_dir, name)
  raise UsageError(f"data.prepared_dir '{prepared_dir}' holds no vocab.model or vocab.txt; "
                   'pass the vocabulary it was prepared with as --config.data.vocab_model')


def local_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  """This host's directory for prepared examples and the vocabulary's copy: data.local_dir,
  <workdir>/data, or for a URI one named after it in ~/.cache/electra_jax (alike on every host)."""
  chosen = config.data.local_dir
  if chosen:
    if storage.is_uri(chosen):
      raise UsageError(f"data.local_dir='{chosen}' is not a local path; prepared examples are "
                       "memory-mapped, so name a directory on this host's disk")
    return os.path.expanduser(chosen)
  if not storage.is_uri(workdir):
    return os.path.join(workdir, 'data')
  digest = hashlib.sha256(workdir.rstrip('/').encode()).hexdigest()[:12]
  return os.path.join(os.path.expanduser('~/.cache/electra_jax'), digest)


def local_copy(path: str, directory: str) -> str:
  """`path` itself if local; else a copy of it in `directory` (made or refreshed now)."""
  if not storage.is_uri(path):
    return path
  copy = os.path.join(directory, os.path.basename(path))
  storage.copy_file(path, copy)
  return copy


def load_run_vocab(workdir: str, directory: str):
  """The vocabulary of the run in `workdir`, read from a copy in `directory` if it is remote."""
  return vocab_lib.load_vocab(local_copy(run_vocab_path(workdir), directory))


def setup_vocab(config: ml_collections.ConfigDict, workdir: str) -> vocab_lib.Vocab:
  """The workdir's vocab.model or vocab.txt, on first use copied from data.vocab_model or
  data.prepared_dir, or trained (in local_dir, then uploaded, for a workdir at a URI)."""
  given = config.data.vocab_model
  if config.data.prepared_dir:
    store.check_local(config.data.prepared_dir, 'data.prepared_dir')
    given = given or _prepared_vocab(config.data.prepared_dir)
  if storage.is_uri(given):
    raise UsageError(f"data.vocab_model='{given}' is not a local path; copy it to local disk "
                     '(gcloud storage cp) and name that file')
  local = local_dir(config, workdir)
  run_model = run_vocab_path(workdir, given)
  if storage.exists(run_model):
    vocab = vocab_lib.load_vocab(local_copy(run_model, local))
    if given and vocab_lib.vocab_fingerprint(vocab_lib.load_vocab(given)) != \
        vocab_lib.vocab_fingerprint(vocab):
      raise UsageError(f'{given} differs from the vocabulary this run was started with '
                       f'({run_model}); use a new --workdir, or drop --config.data.vocab_model '
                       '(or use data prepared with the run\'s vocabulary)')
    vocab_lib.check_casing(vocab, config.data.vocab_lowercase)
  elif given:
    # Fails clearly before anything is copied.
    vocab_lib.check_casing(vocab_lib.load_vocab(given), config.data.vocab_lowercase)
    storage.copy_file(given, run_model)
    vocab = vocab_lib.load_vocab(local_copy(run_model, local))
  else:
    remote = storage.is_uri(workdir)
    prefix = os.path.join(local if remote else workdir, 'vocab')
    vocab = preparation.train_vocab(
        sources_lib.from_config(config.data, 'train'), config.model.vocab_size, prefix,
        tfds_data_dir=config.data.tfds_data_dir, text_field=config.data.text_field,
        max_sentences=config.data.vocab_sample_sentences, seed=config.seed,
        lowercase=config.data.vocab_lowercase)
    if remote:  # the .model last: the run has a vocabulary once it exists
      for suffix in ('.vocab', '.model'):
        storage.copy_file(prefix + suffix, os.path.join(workdir, 'vocab' + suffix))
  if vocab.size != config.model.vocab_size:
    raise UsageError(f'the vocabulary {vocab.model_path} has {vocab.size} pieces but '
                     f'config.model.vocab_size={config.model.vocab_size}; set '
                     f'--config.model.vocab_size={vocab.size}')
  return vocab


def run_vocab_path(workdir: str, given: str = '') -> str:
  """Where the run's vocabulary is or goes: the existing file, else named after `given`'s kind."""
  paths = [os.path.join(workdir, name) for name in ('vocab.model', 'vocab.txt')]
  existing = [p for p in paths if storage.exists(p)]
  if existing:
    return existing[0]
  return paths[1] if given.endswith('.txt') else paths[0]
