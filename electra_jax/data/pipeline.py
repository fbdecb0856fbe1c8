"""Which example ids each step reads: a pure function of (examples, batch size, seed, step).

So a resumed run sees the batches the uninterrupted one would have: the checkpointed step is the
iterator position. Process p of P reads rows [p * B/P, (p + 1) * B/P) of each global batch, so
the global batches do not depend on the number of hosts. `examples` is a store.ExampleStore
(len, gather; weighted sources make a mixture) or a dict of 'input_ids' and 'segment_ids'.
"""

from collections.abc import Iterator, Mapping, Sequence
import functools

import numpy as np

from electra_jax.common.errors import UsageError

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


def batch_indices(num_examples: int, global_batch_size: int, seed: int,
                  step: int) -> np.ndarray:
  """Example indices (int64 [B]) of global batch `step`: positions [step * B, (step + 1) * B)
  of the stream epoch 0, epoch 1, ..., epoch e a permutation drawn from default_rng([seed, e])."""
  _check_arguments(num_examples, global_batch_size, seed, step)
  start = int(step) * int(global_batch_size)
  return _stream_slice(int(num_examples), int(seed), start, start + int(global_batch_size))


def mixture_counts(weights: Sequence[float], global_batch_size: int) -> list[int]:
  """Examples of each source in every batch: B * weight, rounded by largest remainder.

  A fixed count puts every source's stream at s * count at step s: any step is computed directly.
  """
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
  """Example ids (int64 [B]) of global batch `step` of a weighted mixture of sources.

  Each source has its own epoch stream; the batch's rows are shuffled with (seed, step), so
  every process's share mixes sources.
  """
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
  """The rows of a global batch that belong to this process: a contiguous share."""
  if global_batch_size % process_count:
    raise UsageError(f'batch_size={global_batch_size} is not divisible by the {process_count} '
                     f'processes; set --config.batch_size to a multiple of {process_count}')
  if not 0 <= process_index < process_count:
    raise ValueError(f'process_index {process_index} is not in [0, {process_count})')
  rows = global_batch_size // process_count
  return slice(process_index * rows, (process_index + 1) * rows)


def local_batch_indices(examples, global_batch_size: int, seed: int, step: int,
                        process_index: int = 0, process_count: int = 1) -> np.ndarray:
  """The example ids this process reads for global batch `step`."""
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
  """This process's rows of an unshuffled pass over the first num_batches * B examples.

  It wraps around a smaller set, so every batch is full and one compiled step serves them all.
  """
  rows = _process_rows(global_batch_size, process_index, process_count)
  num_examples = _num_examples(examples)
  if num_examples == 0:
    raise UsageError('the evaluation set holds no examples; check data.eval_files')
  for batch in range(num_batches):
    positions = np.arange(batch * global_batch_size, (batch + 1) * global_batch_size)
    yield _gather(examples, positions[rows] % num_examples)
