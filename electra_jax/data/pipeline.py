"""Prepared pretraining examples, cached on disk, and the deterministic batches drawn from them.

The batch of every step is a pure function of (number of examples, batch size, seed, step), so
a run resumed from a checkpoint sees exactly the batches the uninterrupted run would have, and
no data-loader state needs saving.
"""

from collections.abc import Iterable, Iterator, Sequence
import contextlib
import functools
import json
import os
import zipfile

from absl import logging
import numpy as np

from electra_jax.data import packing
from electra_jax.data import text
from electra_jax.data import vocab as vocab_lib
from electra_jax.errors import UsageError

# Bump when packing or tokenization changes, so caches made by older code are rebuilt.
_CACHE_FORMAT = 1
_LINES_PER_ENCODE = 4096  # Lines tokenized per sentencepiece call (it encodes them in parallel).


def _document_chunks(documents: Iterable[list[str]]) -> Iterator[list[list[str]]]:
  """Groups documents into chunks of about _LINES_PER_ENCODE lines, in order."""
  chunk, chunk_lines = [], 0
  for document in documents:
    chunk.append(document)
    chunk_lines += len(document)
    if chunk_lines >= _LINES_PER_ENCODE:
      yield chunk
      chunk, chunk_lines = [], 0
  if chunk:
    yield chunk


def _tokenized_documents(files: Sequence[str], vocab: vocab_lib.Vocab,
                         counts: dict[str, int]) -> Iterator[list[list[int]]]:
  """Yields each document as token-id lists, one per line; tallies documents and tokens."""
  for chunk in _document_chunks(text.read_documents(files)):
    ids = iter(vocab.encode([line for document in chunk for line in document]))
    for document in chunk:
      tokenized = [next(ids) for _ in document]
      counts['documents'] += 1
      counts['tokens'] += sum(map(len, tokenized))
      yield tokenized


def _file_records(files: Sequence[str]) -> list[dict]:
  """What identifies the corpus for the cache: path, size and modification time of each file."""
  records = []
  for path in files:
    try:
      stat = os.stat(path)
    except OSError as e:
      raise UsageError(f"cannot read '{path}': {e.strerror}; check the path") from None
    records.append({'path': os.path.abspath(path), 'bytes': stat.st_size,
                    'mtime_ns': stat.st_mtime_ns})
  return records


def _load_cached(npz_path: str, json_path: str, key: dict) -> dict[str, np.ndarray] | None:
  try:
    with open(json_path) as f:
      if json.load(f).get('key') != key:
        return None
    with np.load(npz_path) as cached:
      return {name: cached[name] for name in ('input_ids', 'segment_ids')}
  except (OSError, ValueError, KeyError, AttributeError, EOFError, zipfile.BadZipFile):
    return None  # Absent, unreadable or truncated: rebuild it.


def _replace_atomically(path: str, write) -> None:
  tmp_path = f'{path}.tmp{os.getpid()}'
  with open(tmp_path, 'wb') as f:
    write(f)
  os.replace(tmp_path, path)


def prepare_examples(files: Sequence[str], vocab: vocab_lib.Vocab, max_seq_length: int,
                     seed: int, cache_dir: str, name: str) -> dict[str, np.ndarray]:
  """Tokenizes and packs the corpus, or loads the result cached by an earlier identical call.

  The cache is `cache_dir/<name>.npz` plus `cache_dir/<name>.json`, which records what the
  arrays were made from (vocabulary fingerprint, files with sizes and mtimes, max_seq_length,
  seed) and what they hold (documents, tokens, examples, padding fraction). The arrays are
  reused only when the recorded inputs match this call's.
  """
  key = {'format': _CACHE_FORMAT, 'vocab_sha256': vocab_lib.vocab_fingerprint(vocab),
         'files': _file_records(files), 'max_seq_length': max_seq_length, 'seed': seed}
  npz_path = os.path.join(cache_dir, f'{name}.npz')
  json_path = os.path.join(cache_dir, f'{name}.json')
  examples = _load_cached(npz_path, json_path, key)
  if examples is not None:
    logging.info('%s: loaded %d cached examples from %s', name, len(examples['input_ids']),
                 npz_path)
    return examples

  counts = {'documents': 0, 'tokens': 0}
  try:
    examples = packing.pack_examples(_tokenized_documents(files, vocab, counts),
                                     max_seq_length, vocab.cls_id, vocab.sep_id, seed)
  except UsageError:
    if counts['documents'] == 0:  # Say which files are empty, which packing cannot know.
      raise UsageError(f'corpus {text.describe_files(files)} holds no text (only blank '
                       'lines); check data.train_files / data.eval_files') from None
    raise
  input_ids = examples['input_ids']
  specials = (input_ids == 0) | (input_ids == vocab.cls_id) | (input_ids == vocab.sep_id)
  counts['examples'] = len(input_ids)
  # Packing drops the part of a line that does not fit an example; this shows how much.
  counts['tokens_in_examples'] = int(input_ids.size - specials.sum())
  counts['padding_fraction'] = round(float(np.mean(input_ids == 0)), 6)
  logging.info('%s: %d documents, %d tokens, %d examples of %d tokens (%d tokens kept, '
               '%.1f%% padding) from %s', name, counts['documents'], counts['tokens'],
               counts['examples'], max_seq_length, counts['tokens_in_examples'],
               100 * counts['padding_fraction'], text.describe_files(files))

  os.makedirs(cache_dir, exist_ok=True)
  # The record goes first, so a crash while the arrays are written leaves no record claiming
  # that a stale or half-written .npz matches.
  with contextlib.suppress(FileNotFoundError):
    os.remove(json_path)
  _replace_atomically(npz_path, lambda f: np.savez(f, **examples))
  record = json.dumps({'key': key, 'counts': counts}, indent=2).encode()
  _replace_atomically(json_path, lambda f: f.write(record))
  return examples


@functools.lru_cache(maxsize=8)
def _epoch_permutation(num_examples: int, seed: int, epoch: int) -> np.ndarray:
  permutation = np.random.default_rng([seed, epoch]).permutation(num_examples)
  permutation.flags.writeable = False  # Shared by the cache, so nobody may change it.
  return permutation


def batch_indices(num_examples: int, global_batch_size: int, seed: int,
                  step: int) -> np.ndarray:
  """Example indices (int64 [B]) of global batch `step`.

  The example stream is epoch 0, epoch 1, ... in order, epoch e being a permutation of
  range(num_examples) drawn from np.random.default_rng([seed, e]); batch `step` is stream
  positions [step * B, (step + 1) * B). A batch may straddle epochs, or span several when B
  exceeds the number of examples. Only the permutations of those epochs are computed.
  """
  if num_examples <= 0:
    raise UsageError('there are no examples to draw batches from; check data.train_files')
  if global_batch_size <= 0:
    raise UsageError(f'batch_size={global_batch_size}; set --config.batch_size to a positive '
                     'number')
  if seed < 0:
    raise UsageError(f'seed={seed}; set --config.seed to a non-negative integer')
  if step < 0:
    raise ValueError(f'step must be non-negative, got {step}')
  num_examples, global_batch_size = int(num_examples), int(global_batch_size)
  start = int(step) * global_batch_size
  stop = start + global_batch_size
  parts = []
  for epoch in range(start // num_examples, (stop - 1) // num_examples + 1):
    epoch_start = epoch * num_examples
    permutation = _epoch_permutation(num_examples, int(seed), epoch)
    parts.append(permutation[max(start - epoch_start, 0):min(stop - epoch_start, num_examples)])
  return np.concatenate(parts).astype(np.int64, copy=False)


def _process_rows(global_batch_size: int, process_index: int, process_count: int) -> slice:
  """The rows of a global batch that belong to this process: a contiguous share."""
  if global_batch_size % process_count:
    raise UsageError(f'batch_size={global_batch_size} is not divisible by the {process_count} '
                     f'processes; set --config.batch_size to a multiple of {process_count}')
  if not 0 <= process_index < process_count:
    raise ValueError(f'process_index {process_index} is not in [0, {process_count})')
  rows = global_batch_size // process_count
  return slice(process_index * rows, (process_index + 1) * rows)


def _gather(examples: dict[str, np.ndarray], indices: np.ndarray) -> dict[str, np.ndarray]:
  return {name: examples[name][indices] for name in ('input_ids', 'segment_ids')}


def local_batch(examples: dict[str, np.ndarray], global_batch_size: int, seed: int, step: int,
                process_index: int = 0, process_count: int = 1) -> dict[str, np.ndarray]:
  """This process's rows ([B / P, L] int32 arrays) of shuffled global batch `step`."""
  rows = _process_rows(global_batch_size, process_index, process_count)
  indices = batch_indices(len(examples['input_ids']), global_batch_size, seed, step)
  return _gather(examples, indices[rows])


def eval_batches(examples: dict[str, np.ndarray], global_batch_size: int, num_batches: int,
                 process_index: int = 0,
                 process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """This process's rows of a fixed, unshuffled pass over the first num_batches * B examples.

  The pass wraps around to the first example when the evaluation set is smaller, so every
  batch is full and has the same shape (one compiled evaluation step serves them all).
  """
  rows = _process_rows(global_batch_size, process_index, process_count)
  num_examples = len(examples['input_ids'])
  if num_examples == 0:
    raise UsageError('the evaluation set holds no examples; check data.eval_files')
  for batch in range(num_batches):
    positions = np.arange(batch * global_batch_size, (batch + 1) * global_batch_size)
    yield _gather(examples, positions[rows] % num_examples)
