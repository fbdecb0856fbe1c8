"""What the trainer needs from data/: the run's vocabulary, its examples, and batches on the mesh.

The vocabulary lives in the workdir, and the examples either in the local directory
(local_dir: data.local_dir, by default <workdir>/data, where they are prepared from
data.train_files / data.sources on first use) or in data.prepared_dir (written once by
`python -m electra_jax.prepare`). Prepared examples record the sha256 of the vocabulary they
were tokenized with, and a run refuses examples of another vocabulary. A workdir at a URI
(gs://, a pod slice's) holds the vocabulary too, and each host loads a copy of it from its
local directory, because sentencepiece reads local files only.

Batches: the example ids of step s are a pure function of (seed, s) (see data/pipeline.py), so
the step saved in the checkpoint is the whole iterator state; each process gathers its own rows
and the global batch is assembled on the mesh with jax.make_array_from_process_local_data.
"""

from collections.abc import Iterator
import hashlib
import os
import queue
import threading

import jax
import ml_collections
import numpy as np

from electra_jax.core import storage
from electra_jax.data import pipeline, preparation, sources as sources_lib, store
from electra_jax.data import vocab as vocab_lib
from electra_jax.core.errors import UsageError


def _prepared_vocab(prepared_dir: str) -> str:
  for name in ('vocab.model', 'vocab.txt'):
    if os.path.exists(os.path.join(prepared_dir, name)):
      return os.path.join(prepared_dir, name)
  raise UsageError(f"data.prepared_dir '{prepared_dir}' holds no vocab.model or vocab.txt; "
                   'pass the vocabulary it was prepared with as --config.data.vocab_model')


def local_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  """This host's directory for what must be local: prepared examples, the vocabulary's copy.

  data.local_dir, else <workdir>/data for a local workdir, else a directory named after the
  workdir in ~/.cache/electra_jax, the same on every host of a slice.
  """
  chosen = config.data.get('local_dir', '')  # config.json of older runs lacks the field
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
  """The workdir's vocabulary, created on first use by copying or training one.

  It is `vocab.model` (sentencepiece) or, for a run that keeps a WordPiece vocabulary such as
  one imported from a Google checkpoint, `vocab.txt`. Without data.vocab_model, a run on
  data.prepared_dir takes the vocabulary stored there, and any other run trains one. With a
  workdir at a URI the vocabulary is trained in local_dir and uploaded, and loaded from a copy
  there.
  """
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


def load_examples(config: ml_collections.ConfigDict, workdir: str, vocab: vocab_lib.Vocab,
                  split: str) -> store.ExampleStore | None:
  """The examples of `split` ('train' or 'eval'), or None when the config names none.

  Sources named in the config are prepared once into <local_dir>/<split> (and prepared again
  when they, the vocabulary, max_seq_length or seed change); otherwise the split comes
  from data.prepared_dir, whose vocabulary hash and max_seq_length must match the run's. With
  several processes, train.py lets process 0 prepare first; the others then take its split even
  though their own copies of the files carry other modification times.
  """
  specs = sources_lib.from_config(config.data, split)
  if specs is None:
    prepared = config.data.prepared_dir
    if not prepared or (split != 'train' and not os.path.isdir(os.path.join(prepared, split))):
      return None
    return store.open_store(os.path.join(prepared, split), vocab_sha256=vocab.fingerprint(),
                            max_seq_length=config.max_seq_length)
  return preparation.ensure_prepared(
      specs, vocab, os.path.join(local_dir(config, workdir), split),
      max_seq_length=config.max_seq_length, seed=config.seed,
      tfds_data_dir=config.data.tfds_data_dir, text_field=config.data.text_field,
      workers=config.data.prepare_workers, check_mtimes=jax.process_index() == 0, name=split)


def to_global_array(local_batch: dict[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  """Assembles each process's rows into one global batch sharded over the mesh's data axis."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


def _global_batch(examples, config: ml_collections.ConfigDict, step: int, sharding):
  batch = pipeline.local_batch(examples, config.batch_size, config.seed, step,
                               jax.process_index(), jax.process_count())
  return to_global_array(batch, sharding)


def train_batches(examples, config: ml_collections.ConfigDict, first_step: int,
                  sharding) -> Iterator[dict[str, jax.Array]]:
  """The global batches of steps first_step, first_step + 1, ... < num_train_steps, in order.

  A background thread gathers and transfers up to data.prefetch_batches batches ahead, so the
  step never waits for input. What each step gets is still a pure function of (seed, step).
  Close the iterator (or let it be collected) to stop the thread.
  """
  steps = range(first_step, config.num_train_steps)
  depth = config.data.prefetch_batches
  if depth <= 0:
    yield from (_global_batch(examples, config, step, sharding) for step in steps)
    return
  ready, stop = queue.Queue(maxsize=depth), threading.Event()

  def put(item) -> bool:
    while not stop.is_set():
      try:
        ready.put(item, timeout=0.1)
        return True
      except queue.Full:
        pass
    return False

  def produce():
    try:
      for step in steps:
        if not put(_global_batch(examples, config, step, sharding)):
          return
    except BaseException as e:  # pylint: disable=broad-except  (re-raised in the consumer)
      put(e)

  thread = threading.Thread(target=produce, name='electra_jax-prefetch', daemon=True)
  thread.start()
  try:
    for _ in steps:
      item = ready.get()
      if isinstance(item, BaseException):
        raise item
      yield item
  finally:
    stop.set()
    thread.join()
