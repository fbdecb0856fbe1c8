"""Tokenized documents packed into fixed-length examples: 'original', as google-research/electra's
build_pretraining_dataset.py (ExampleBuilder) packs them, or 'fill', which drops no text.

An example is [CLS] A [SEP] B [SEP] (B only when non-empty), zero-padded to L, with segment id 0
up to the first [SEP] and 1 after; docs/data.md ("Packing") gives both packings' rules and costs.
All draws come from one Generator, so the examples are a pure function of (documents, L, seed).
"""

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from electra_jax.common.errors import UsageError

SINGLE_SEGMENT_PROB = 0.1   # Chance that A may take all lines, giving a one-segment example.
SHORT_TARGET_PROB = 0.05    # Chance that the next example aims at a random length in [5, L].
_MIN_SHORT_TARGET = 5
_ROWS_PER_BLOCK = 8192


class SegmentPair(NamedTuple):
  """One example before adding specials, with the draws that shaped it (for checking them)."""
  first: list[int]        # Segment A, truncated to fit.
  second: list[int]       # Segment B, truncated to fit; empty for a single-segment example.
  target_length: int      # The buffer length this example was built towards.
  single_segment: bool    # Whether the 10% draw let A take every line.


def _split_segments(lines: Sequence[Sequence[int]], target_length: int, max_seq_length: int,
                    rng: np.random.Generator) -> SegmentPair:
  """Splits buffered lines into segments A and B and truncates them to fit with 3 specials."""
  single_segment = rng.random() < SINGLE_SEGMENT_PROB
  # -3 leaves room for [CLS], [SEP], [SEP].
  first_target = np.inf if single_segment else (target_length - 3) // 2
  first, second = [], []
  for line in lines:
    # As in the original: a short line may join A after B has started, and the coin is drawn
    # only when the earlier conditions fail (the original's short-circuit draws).
    if (not first or len(first) + len(line) < first_target or
        (not second and len(first) < first_target and rng.random() < 0.5)):
      first.extend(line)
    else:
      second.extend(line)
  first = first[:max_seq_length - 2]
  second = second[:max(0, max_seq_length - len(first) - 3)]
  return SegmentPair(first, second, target_length, bool(single_segment))


def _next_target_length(max_seq_length: int, rng: np.random.Generator) -> int:
  if rng.random() < SHORT_TARGET_PROB:
    return int(rng.integers(_MIN_SHORT_TARGET, max_seq_length + 1))
  return max_seq_length


def segment_pairs(documents: Iterable[Sequence[Sequence[int]]], max_seq_length: int,
                  rng: np.random.Generator) -> Iterator[SegmentPair]:
  """The segment pairs of packing 'original', in corpus order; a document is its lines' ids.

  A document's end emits the buffer, as the blank line after it does in the original.
  """
  target_length = max_seq_length
  for document in documents:
    buffer, buffered_tokens = [], 0
    for line in document:
      if not len(line):
        continue
      buffer.append(line)
      buffered_tokens += len(line)
      if buffered_tokens >= target_length:
        yield _split_segments(buffer, target_length, max_seq_length, rng)
        buffer, buffered_tokens = [], 0
        target_length = _next_target_length(max_seq_length, rng)
    if buffer:
      yield _split_segments(buffer, target_length, max_seq_length, rng)
      target_length = _next_target_length(max_seq_length, rng)


def _cut(lines: Sequence[Sequence[int]], size: int) -> tuple[list[int], list, int]:
  """(first `size` tokens of the lines, the lines left after them, the lines used up)."""
  head = []
  for index, line in enumerate(lines):
    if len(head) + len(line) > size:
      taken = size - len(head)
      head.extend(line[:taken])
      return head, [line[taken:], *lines[index + 1:]], index
    head.extend(line)
  return head, [], len(lines)


def _fill(lines: list, owners: list[int], target_length: int, max_seq_length: int,
          rng: np.random.Generator) -> tuple[SegmentPair, list, list[int]]:
  """One full example from the buffered lines: (its pair, the lines left, their documents).

  `owners[i]` is the document of `lines[i]`; where the buffer reaches past the first line's
  document, that document's lines are A. Lines stay in order (A's run, then B), unlike the
  original, so that what does not fit is the buffer's tail.
  """
  single_segment = rng.random() < SINGLE_SEGMENT_PROB
  own = next((i for i, owner in enumerate(owners) if owner != owners[0]), len(owners))
  if own < len(lines):
    single_segment, in_first = False, own  # The document boundary is the A/B boundary.
  else:
    first_target = np.inf if single_segment else (target_length - 3) // 2
    in_first, first_length = 0, 0
    for line in lines:  # The original's rule for A (and its draws), on the first lines.
      joins_first = (not in_first or first_length + len(line) < first_target or
                     (first_length < first_target and rng.random() < 0.5))
      if not joins_first:
        break
      in_first += 1
      first_length += len(line)
  first_length = sum(map(len, lines[:in_first]))
  if first_length >= max_seq_length - 3:  # No room for B: A alone, cut where it is full.
    first, rest, used = _cut(lines[:own], max_seq_length - 2)  # Within its document.
    return SegmentPair(first, [], target_length, single_segment), rest + lines[own:], owners[used:]
  first = [token for line in lines[:in_first] for token in line]
  second, rest, used = _cut(lines[in_first:], max_seq_length - 3 - first_length)
  return SegmentPair(first, second, target_length, single_segment), rest, owners[in_first + used:]


def filled_pairs(documents: Iterable[Sequence[Sequence[int]]], max_seq_length: int,
                 rng: np.random.Generator) -> Iterator[SegmentPair]:
  """The segment pairs of packing 'fill', in corpus order."""
  target_length = max_seq_length
  lines, owners, tokens = [], [], 0
  for index, document in enumerate(documents):
    for line in document:
      if not len(line):
        continue
      lines.append(line)
      owners.append(index)
      tokens += len(line)
      while tokens >= target_length:
        pair, lines, owners = _fill(lines, owners, target_length, max_seq_length, rng)
        tokens = sum(map(len, lines))
        target_length = _next_target_length(max_seq_length, rng)
        yield pair
  while lines:  # The end of the corpus: what is left, padded.
    pair, lines, owners = _fill(lines, owners, target_length, max_seq_length, rng)
    yield pair


def fill_example(pair: SegmentPair, input_ids: np.ndarray, segment_ids: np.ndarray, cls_id: int,
                 sep_id: int) -> None:
  """Writes [CLS] A [SEP] (B [SEP]) into zeroed rows `input_ids` and `segment_ids`."""
  end_a = 1 + len(pair.first)
  input_ids[0] = cls_id
  input_ids[1:end_a] = pair.first
  input_ids[end_a] = sep_id
  if pair.second:
    end_b = end_a + 1 + len(pair.second)
    input_ids[end_a + 1:end_b] = pair.second
    input_ids[end_b] = sep_id
    segment_ids[end_a + 1:end_b + 1] = 1


def packed_rows(pairs: Iterable[SegmentPair], dtype: np.dtype, cls_id: int,
                sep_id: int) -> np.ndarray:
  """The examples of `pairs` as rows of a structured `dtype` ('input_ids', 'segment_ids', ...)."""
  # Preallocated blocks: an array per example would cost several times the data's memory.
  blocks, filled = [], _ROWS_PER_BLOCK
  for pair in pairs:
    if filled == _ROWS_PER_BLOCK:
      blocks.append(np.zeros(_ROWS_PER_BLOCK, dtype))
      filled = 0
    block = blocks[-1]
    write = fill_example if isinstance(pair, SegmentPair) else fill_documents
    write(pair, block['input_ids'][filled], block['segment_ids'][filled], cls_id, sep_id)
    filled += 1
  return np.concatenate([*blocks[:-1], blocks[-1][:filled]]) if blocks else np.zeros(0, dtype)


def pack_examples(documents: Iterable[Sequence[Sequence[int]]], max_seq_length: int,
                  cls_id: int, sep_id: int, seed: int,
                  packing: str = 'original') -> dict[str, np.ndarray]:
  """{'input_ids', 'segment_ids'}, both int32 [N, L]; the attention mask is `input_ids != 0`."""
  if max_seq_length < _MIN_SHORT_TARGET:
    raise UsageError(f'max_seq_length={max_seq_length} leaves no room for text; '
                     f'set --config.max_seq_length to at least {_MIN_SHORT_TARGET} (e.g. 128)')
  dtype = np.dtype([(name, np.int32, (max_seq_length,)) for name in ('input_ids', 'segment_ids')])
  pairs = PACKINGS[packing](documents, max_seq_length, np.random.default_rng(seed))
  rows = packed_rows(pairs, dtype, cls_id, sep_id)
  if not len(rows):
    raise UsageError('the corpus produced no examples: none of its lines holds a token; '
                     'check that data.train_files (or data.eval_files) name text files')
  return {name: np.ascontiguousarray(rows[name]) for name in ('input_ids', 'segment_ids')}


# ---- packing 'documents': documents kept apart (data.document_attention) -------------------

OPEN_EXAMPLES = 64  # examples kept open for best-fit placement of the next piece
MAX_DOCUMENTS = 255  # per example: the document ids are the uint8 segment ids of the store


def document_pieces(documents: Iterable[Sequence[Sequence[int]]],
                    max_seq_length: int) -> Iterator[list[int]]:
  """Each document's tokens in order, cut into pieces of at most L - 2 (room for its [CLS] and
  [SEP]); no segment pairs or short targets: a document attends only to itself."""
  for document in documents:
    tokens = [token for line in document for token in line]
    for start in range(0, len(tokens), max_seq_length - 2):
      yield tokens[start:start + max_seq_length - 2]


def packed_documents(documents: Iterable[Sequence[Sequence[int]]], max_seq_length: int,
                     rng: np.random.Generator | None = None) -> Iterator[list[list[int]]]:
  """Examples as lists of pieces ([CLS] piece [SEP] each), placed best-fit: a piece goes to the
  open example it fills most closely, and the fullest is closed when OPEN_EXAMPLES are open.
  Deterministic (`rng` is unused, for PACKINGS' signature); the order follows the corpus's."""
  del rng
  open_examples: list[tuple[int, list[list[int]]]] = []  # (tokens used, pieces)
  for piece in document_pieces(documents, max_seq_length):
    need = len(piece) + 2
    fits = [i for i, (used, _) in enumerate(open_examples) if used + need <= max_seq_length]
    if fits:
      index = max(fits, key=lambda i: open_examples[i][0])
    else:
      if len(open_examples) == OPEN_EXAMPLES:
        fullest = max(range(len(open_examples)), key=lambda i: open_examples[i][0])
        yield open_examples.pop(fullest)[1]
      open_examples.append((0, []))
      index = len(open_examples) - 1
    used, pieces = open_examples[index]
    pieces.append(piece)
    if used + need > max_seq_length - 3 or len(pieces) == MAX_DOCUMENTS:  # full
      del open_examples[index]
      yield pieces
    else:
      open_examples[index] = (used + need, pieces)
  yield from (pieces for _, pieces in open_examples)


def fill_documents(pieces: Sequence[Sequence[int]], input_ids: np.ndarray,
                   document_ids: np.ndarray, cls_id: int, sep_id: int) -> None:
  """Writes [CLS] piece [SEP] for each piece into zeroed rows, the k-th piece's tokens (its
  specials too) with document id k (1, 2, ...; 0 is padding)."""
  start = 0
  for k, piece in enumerate(pieces, start=1):
    end = start + len(piece) + 2
    input_ids[start], input_ids[start + 1:end - 1], input_ids[end - 1] = cls_id, piece, sep_id
    document_ids[start:end] = k
    start = end


PACKINGS = {'original': segment_pairs, 'fill': filled_pairs, 'documents': packed_documents}
