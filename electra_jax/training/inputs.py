"""A training run's inputs: its vocabulary, its examples, and its batches on the mesh.

The vocabulary lives in the workdir; each host of a workdir at a URI (gs://) loads a local copy,
because sentencepiece reads local files only. The example ids of step s are a pure function of
(examples, batch size, seed, s), and process p of P reads rows [p * B/P, (p + 1) * B/P) of each
global batch (docs/data.md, "How the reader works"). `examples` is a store.ExampleStore (len,
gather; weighted sources make a mixture) or a dict of 'input_ids' and 'segment_ids'.
"""

import collections
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
import functools
import hashlib
import os

import jax
import ml_collections
import numpy as np

from electra_jax.common import storage
from electra_jax.common.errors import UsageError
from electra_jax.data import preparation, sources as sources_lib, store
from electra_jax.data import vocab as vocab_lib


def vocab_in(directory: str) -> str:
  """The vocabulary file (vocab_lib.VOCAB_NAMES) in the local `directory`, '' if none."""
  paths = [os.path.join(directory, name) for name in vocab_lib.VOCAB_NAMES]
  return next(filter(os.path.isfile, paths), '')


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


def check_files(config: ml_collections.ConfigDict) -> None:
  """Refuses a path or glob of either split's corpus that names no file, before any work."""
  for split in preparation.SPLITS:
    preparation.check_files(sources_lib.from_config(config.data, split) or ())


def setup_vocab(config: ml_collections.ConfigDict, workdir: str) -> vocab_lib.AnyVocab:
  """The workdir's vocab.model, vocab.txt or tokenizer.json, on first use copied from
  data.vocab_model or data.prepared_dir, or trained as data.vocab_type (in local_dir, then
  uploaded, for a workdir at a URI)."""
  given = vocab_lib.vocab_file(config.data.vocab_model)
  if config.data.prepared_dir:
    store.check_local(config.data.prepared_dir, 'data.prepared_dir')
    given = given or vocab_in(config.data.prepared_dir)
    if not given:
      raise UsageError(f"data.prepared_dir '{config.data.prepared_dir}' holds no vocab.model, "
                       'vocab.txt or tokenizer.json; pass the vocabulary it was prepared with as '
                       '--config.data.vocab_model')
  if storage.is_uri(given):
    raise UsageError(f"data.vocab_model='{given}' is not a local path; copy it to local disk "
                     '(gcloud storage cp) and name that file')
  local = local_dir(config, workdir)
  run_model = run_vocab_path(workdir, given)
  if (existed := storage.exists(run_model)) or given:
    # The run's vocabulary, or the given one checked before anything is copied.
    vocab = vocab_lib.load_vocab(local_copy(run_model, local) if existed else given)
    if existed and given and vocab_lib.load_vocab(given).fingerprint() != vocab.fingerprint():
      raise UsageError(f'{given} differs from the vocabulary this run was started with '
                       f'({run_model}); use a new --workdir, or drop --config.data.vocab_model '
                       '(or use data prepared with the run\'s vocabulary)')
    vocab_lib.check_casing(vocab, config.data.vocab_lowercase)
    vocab_lib.check_type(vocab, config.data.vocab_type)
    if not existed:
      storage.copy_file(given, run_model)
      vocab = vocab_lib.load_vocab(local_copy(run_model, local))
  else:
    remote = storage.is_uri(workdir)
    prefix = os.path.join(local if remote else workdir, 'vocab')
    vocab = preparation.train_vocab(
        sources_lib.from_config(config.data, 'train'), config.model.vocab_size, prefix,
        tfds_data_dir=config.data.tfds_data_dir, text_field=config.data.text_field,
        max_sentences=config.data.vocab_sample_sentences, seed=config.seed,
        lowercase=config.data.vocab_lowercase, vocab_type=config.data.vocab_type)
    if remote:  # the vocabulary last: the run has one once it exists
      for path in vocab_lib.trained_files(prefix, config.data.vocab_type):
        storage.copy_file(path, os.path.join(workdir, os.path.basename(path)))
  if vocab.size != config.model.vocab_size:
    raise UsageError(f'the vocabulary {vocab.model_path} has {vocab.size} pieces but '
                     f'config.model.vocab_size={config.model.vocab_size}; set '
                     f'--config.model.vocab_size={vocab.size}')
  return vocab


def run_vocab_path(workdir: str, given: str = '') -> str:
  """Where the run's vocabulary is or goes: the existing file, else named after `given`'s kind."""
  paths = [os.path.join(workdir, name) for name in vocab_lib.VOCAB_NAMES]
  return next(filter(storage.exists, paths),
              os.path.join(workdir, vocab_lib.vocab_name(vocab_lib.vocab_file(given))))


# Keep the mixture's random streams apart from the single-corpus one and from each other. Seeds
# are lists for np.random.SeedSequence, which ignores trailing zeros, so none ends in 0.
_MIXTURE_STREAM_TAG = 0xA11
_MIXTURE_ROWS_TAG = 0xA12


@functools.lru_cache(maxsize=8)
def _epoch_permutation(num_examples: int, seed: int, epoch: int,
                       stream: tuple[int, ...] = ()) -> np.ndarray:
  permutation = np.random.default_rng([seed, epoch, *stream]).permutation(num_examples)
  if num_examples < 1 << 31:
    permutation = permutation.astype(np.int32)  # Half the memory on a corpus of 10^8 examples.
  permutation.flags.writeable = False  # Shared by the cache, so nobody may change it.
  return permutation


def _stream_slice(num_examples: int, seed: int, start: int, stop: int,
                  stream: tuple[int, ...] = ()) -> np.ndarray:
  """Positions [start, stop) of the stream epoch 0, epoch 1, ... (each a permutation)."""
  parts = []
  for epoch in range(start // num_examples, (stop - 1) // num_examples + 1):
    epoch_start = epoch * num_examples
    permutation = _epoch_permutation(num_examples, seed, epoch, stream)
    parts.append(permutation[max(start - epoch_start, 0):min(stop - epoch_start, num_examples)])
  return np.concatenate(parts).astype(np.int64)


def _check_arguments(num_examples: int, global_batch_size: int, seed: int, step: int):
  if num_examples <= 0:
    raise UsageError('there are no examples to draw batches from; check data.train_files')
  if global_batch_size <= 0:
    raise UsageError(f'batch_size={global_batch_size}; set --config.batch_size to a positive '
                     'number')
  if seed < 0:
    raise UsageError(f'seed={seed}; set --config.seed to a non-negative integer')
  if step < 0:
    raise ValueError(f'step must be non-negative, got {step}')


def batch_indices(num_examples: int, global_batch_size: int, seed: int, step: int) -> np.ndarray:
  """Example indices (int64 [B]) of global batch `step`: positions [step * B, (step + 1) * B)
  of the stream epoch 0, epoch 1, ..., epoch e a permutation drawn from default_rng([seed, e])."""
  _check_arguments(num_examples, global_batch_size, seed, step)
  start = int(step) * int(global_batch_size)
  return _stream_slice(int(num_examples), int(seed), start, start + int(global_batch_size))


def mixture_counts(weights: Sequence[float], global_batch_size: int) -> list[int]:
  """Examples of each source in every batch: B * weight, rounded by largest remainder. A fixed
  count puts every source's stream at s * count at step s: any step is computed directly."""
  shares = np.asarray(weights, np.float64) / np.sum(weights) * global_batch_size
  counts = np.floor(shares).astype(np.int64)
  remainder_order = np.argsort(-(shares - counts), kind='stable')
  counts[remainder_order[:global_batch_size - counts.sum()]] += 1
  if counts.min() == 0:
    source = int(np.argmin(counts))
    raise UsageError(f'source {source} of the mixture has weight {weights[source]:g}, less than '
                     f'one example in a batch of {global_batch_size}; raise its weight to at '
                     f'least {np.sum(weights) / global_batch_size:.3g} or the batch size')
  return counts.tolist()


def mixture_batch_indices(source_sizes: Sequence[int], weights: Sequence[float],
                          global_batch_size: int, seed: int, step: int) -> np.ndarray:
  """Example ids (int64 [B]) of global batch `step` of a weighted mixture of sources: each has
  its own epoch stream, and rows are shuffled with (seed, step) so every process's share mixes."""
  _check_arguments(min(source_sizes), global_batch_size, seed, step)
  counts = mixture_counts(weights, global_batch_size)
  offsets = np.cumsum([0, *source_sizes[:-1]])
  parts = [offset + _stream_slice(int(size), int(seed), step * count, (step + 1) * count,
                                  (_MIXTURE_STREAM_TAG, k + 1))
           for k, (size, count, offset) in enumerate(zip(source_sizes, counts, offsets))]
  rows = np.random.default_rng([seed, step, _MIXTURE_ROWS_TAG]).permutation(global_batch_size)
  return np.concatenate(parts)[rows]


def _num_examples(examples) -> int:
  return len(examples['input_ids']) if isinstance(examples, Mapping) else len(examples)


def _gather(examples, indices: np.ndarray) -> dict[str, np.ndarray]:
  if isinstance(examples, Mapping):
    return {name: examples[name][indices] for name in ('input_ids', 'segment_ids')}
  return examples.gather(indices)


def global_batch_indices(examples, global_batch_size: int, seed: int, step: int) -> np.ndarray:
  """The example ids of global batch `step`: a single corpus, or a weighted mixture."""
  weights = getattr(examples, 'weights', None)
  if weights is not None and len(weights) > 1:
    return mixture_batch_indices(examples.source_sizes, weights, global_batch_size, seed, step)
  return batch_indices(_num_examples(examples), global_batch_size, seed, step)


def _process_rows(global_batch_size: int, process_index: int, process_count: int) -> slice:
  if global_batch_size % process_count:
    raise UsageError(f'batch_size={global_batch_size} is not divisible by the {process_count} '
                     f'processes; set --config.batch_size to a multiple of {process_count}')
  if not 0 <= process_index < process_count:
    raise ValueError(f'process_index {process_index} is not in [0, {process_count})')
  rows = global_batch_size // process_count
  return slice(process_index * rows, (process_index + 1) * rows)


def local_batch_indices(examples, global_batch_size: int, seed: int, step: int,
                        process_index: int = 0, process_count: int = 1) -> np.ndarray:
  rows = _process_rows(global_batch_size, process_index, process_count)
  return global_batch_indices(examples, global_batch_size, seed, step)[rows]


def local_batch(examples, global_batch_size: int, seed: int, step: int,
                process_index: int = 0, process_count: int = 1) -> dict[str, np.ndarray]:
  """This process's rows ([B / P, L] int32 arrays) of shuffled global batch `step`."""
  return _gather(examples, local_batch_indices(examples, global_batch_size, seed, step,
                                               process_index, process_count))


def eval_batches(examples, global_batch_size: int, num_batches: int,
                 process_index: int = 0,
                 process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """This process's rows of an unshuffled pass over the first num_batches * B examples, wrapping
  around a smaller set: every batch is full, and one compiled step serves them all."""
  rows = _process_rows(global_batch_size, process_index, process_count)
  num_examples = _num_examples(examples)
  if num_examples == 0:
    raise UsageError('the evaluation set holds no examples; check data.eval_files')
  for batch in range(num_batches):
    positions = np.arange(batch * global_batch_size, (batch + 1) * global_batch_size)
    yield _gather(examples, positions[rows] % num_examples)


def load_examples(config: ml_collections.ConfigDict, workdir: str, vocab: vocab_lib.Vocab,
                  split: str) -> store.ExampleStore | None:
  """The examples of `split` ('train' or 'eval'), or None when the config names none: sources
  prepared once into <local_dir>/<split> (again when they, the vocabulary, max_seq_length or seed
  change), or data.prepared_dir's split, whose vocabulary and max_seq_length must be the run's.
  Process 0 prepares first (train.py); the others take its split though their mtimes differ."""
  specs = sources_lib.from_config(config.data, split)
  if specs is None:
    prepared = config.data.prepared_dir
    if not prepared or (split != 'train' and not os.path.isdir(os.path.join(prepared, split))):
      return None
    return store.open_store(os.path.join(prepared, split), vocab_sha256=vocab.fingerprint(),
                            max_seq_length=config.max_seq_length,
                            documents=config.data.document_attention)
  return preparation.ensure_prepared(
      specs, vocab, os.path.join(local_dir(config, workdir), split),
      max_seq_length=config.max_seq_length, seed=config.seed,
      tfds_data_dir=config.data.tfds_data_dir, text_field=config.data.text_field,
      workers=config.data.prepare_workers, check_mtimes=jax.process_index() == 0, name=split)


def to_global_array(local_batch: dict[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  """Assembles each process's rows into one global batch sharded over the mesh's data axis."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


def train_batches(examples, config: ml_collections.ConfigDict, first_step: int,
                  sharding) -> Iterator[dict[str, jax.Array]]:
  """The global batches of steps first_step, first_step + 1, ... < num_train_steps, in order.

  A background thread gathers and transfers data.prefetch_batches batches ahead; closing the
  iterator stops it, and a batch's error is raised where the step takes that batch."""
  def batch(step):
    return to_global_array(local_batch(examples, config.batch_size, config.seed, step,
                                       jax.process_index(), jax.process_count()), sharding)

  steps = range(first_step, config.num_train_steps)
  if (depth := config.data.prefetch_batches) <= 0:
    yield from map(batch, steps)
    return
  pool = futures.ThreadPoolExecutor(1, thread_name_prefix='electra_jax-prefetch')
  ahead = collections.deque()
  try:
    for step in steps:
      ahead.append(pool.submit(batch, step))
      if len(ahead) > depth:
        yield ahead.popleft().result()
    while ahead:
      yield ahead.popleft().result()
  finally:
    pool.shutdown(cancel_futures=True)
