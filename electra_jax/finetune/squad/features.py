"""SQuAD questions -> fixed-length windows, as the original ELECTRA (after BERT) builds them:
`[CLS] question [SEP] context [SEP]`, segment ids 0 then 1, padding 0.

The question keeps max_query_length sub-tokens; a long context gets windows doc_stride apart, the
last ending at its end. A token in several windows is scored in the one where it has the most
context, min(left, right) + 0.01 * window length (the first on a tie). Contexts are tokenized
word by word, so each sub-token knows its character span, and an answer becomes the sub-tokens
overlapping its characters: the original's `_improve_answer_span` search gives the same span in
the usual case, and this also finds an answer inside a sub-token. A training window without the
whole answer, and an unanswerable question's, targets [CLS] (0) for start and end.
"""

from typing import NamedTuple

import numpy as np

from electra_jax.finetune.squad.data import Context, SquadSet


class TokenizedContext(NamedTuple):
  ids: np.ndarray       # [T] sub-token ids
  word: np.ndarray      # [T] the word each sub-token belongs to
  start: np.ndarray     # [T] character span of each sub-token in the context
  end: np.ndarray


class Windows(NamedTuple):
  """Model inputs and the bookkeeping that maps window positions back to context text."""
  input_ids: np.ndarray        # [N, L] int32
  segment_ids: np.ndarray      # [N, L] int32
  start_positions: np.ndarray  # [N] int32 training targets (0 = [CLS]: no answer here)
  end_positions: np.ndarray    # [N]
  is_impossible: np.ndarray    # [N] float32, 1 for an unanswerable question (2.0)
  question: np.ndarray         # [N] index into the SquadSet's questions
  doc_start: np.ndarray        # [N] first context sub-token in the window
  doc_offset: np.ndarray       # [N] its position in the window (question length + 2)
  doc_length: np.ndarray       # [N] context sub-tokens in the window
  max_context: np.ndarray      # [N, L] bool: the position's token has its max context here

  def model_inputs(self) -> dict[str, np.ndarray]:
    return {'input_ids': self.input_ids, 'segment_ids': self.segment_ids}

  def training_inputs(self) -> dict[str, np.ndarray]:
    return {**self.model_inputs(), 'start_positions': self.start_positions,
            'end_positions': self.end_positions, 'is_impossible': self.is_impossible}


def tokenize_context(context: Context, vocab) -> TokenizedContext:
  ids, word, start, end = [], [], [], []
  for number, (pieces, spans) in enumerate(vocab.encode_with_offsets(context.words)):
    offset = context.word_starts[number]
    ids += pieces
    word += [number] * len(pieces)
    start += [offset + s for s, _ in spans]
    end += [offset + e for _, e in spans]
  return TokenizedContext(*(np.asarray(x, np.int32) for x in (ids, word, start, end)))


def answer_tokens(tokens: TokenizedContext, context: Context, char_start: int,
                  char_end: int) -> tuple[int, int] | None:
  """First and last sub-token of the character span [char_start, char_end), or None if no
  sub-token overlaps it (an answer made only of characters the vocabulary drops)."""
  overlap = np.flatnonzero((tokens.start < char_end) & (tokens.end > char_start))
  if not len(overlap):
    # Fall back on the answer's whole words, as the original mapped answers.
    first_word = np.searchsorted(context.word_ends, char_start, side='right')
    last_word = np.searchsorted(context.word_starts, char_end, side='left') - 1
    overlap = np.flatnonzero((tokens.word >= first_word) & (tokens.word <= last_word))
    if not len(overlap):
      return None
  return int(overlap[0]), int(overlap[-1])


def doc_spans(num_tokens: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
  """(start, length) of each window over a context of `num_tokens` sub-tokens (one empty
  window for an empty context, so that its questions are still answered)."""
  if num_tokens == 0:
    return [(0, 0)]
  spans, start = [], 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens)
    spans.append((start, length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def best_span(num_tokens: int, spans: list[tuple[int, int]]) -> np.ndarray:
  """For each context sub-token, the window in which it has the most context."""
  position = np.arange(num_tokens)[:, None]
  starts = np.array([s for s, _ in spans])[None]
  lengths = np.array([n for _, n in spans])[None]
  inside = (position >= starts) & (position < starts + lengths)
  score = np.minimum(position - starts, starts + lengths - 1 - position) + 0.01 * lengths
  return np.argmax(np.where(inside, score, -np.inf), axis=1)  # argmax: the first on a tie


def build(squad: SquadSet, vocab, max_seq_length: int, max_query_length: int,
          doc_stride: int, training: bool) -> tuple[Windows, list[TokenizedContext], int]:
  """The windows of every question, the tokenized contexts, and the number of training
  questions left out because their answer covers no sub-token."""
  contexts = [tokenize_context(c, vocab) for c in squad.contexts]
  queries = [ids[:max_query_length] for ids in vocab.encode([q.text for q in squad.questions])]
  rows, dropped = [], 0
  for number, (question, query) in enumerate(zip(squad.questions, queries)):
    tokens = contexts[question.context]
    target = None
    if training and question.answers and not question.is_impossible:
      answer = question.answers[0]  # the original trains on the first answer
      target = answer_tokens(tokens, squad.contexts[question.context], answer.start,
                             answer.start + len(answer.text))
      if target is None:
        dropped += 1
        continue
    offset = len(query) + 2
    spans = doc_spans(len(tokens.ids), max_seq_length - offset - 1, doc_stride)
    best = best_span(len(tokens.ids), spans)
    for index, (start, length) in enumerate(spans):
      ids = [vocab.cls_id, *query, vocab.sep_id, *tokens.ids[start:start + length], vocab.sep_id]
      first = last = 0  # [CLS]: the answer is not wholly in this window
      if target is not None and target[0] >= start and target[1] < start + length:
        first, last = target[0] - start + offset, target[1] - start + offset
      max_context = np.zeros(max_seq_length, bool)
      max_context[offset:offset + length] = best[start:start + length] == index
      rows.append(dict(ids=ids, offset=offset, first=first, last=last, question=number,
                       start=start, length=length, max_context=max_context,
                       impossible=question.is_impossible))
  return _stack(rows, max_seq_length), contexts, dropped


def _stack(rows: list[dict], max_seq_length: int) -> Windows:
  count = len(rows)
  input_ids = np.zeros((count, max_seq_length), np.int32)
  segment_ids = np.zeros_like(input_ids)
  for i, row in enumerate(rows):
    input_ids[i, :len(row['ids'])] = row['ids']
    segment_ids[i, row['offset']:len(row['ids'])] = 1  # the context and its closing [SEP]
  column = lambda key, dtype=np.int32: np.asarray([r[key] for r in rows], dtype).reshape(count)
  return Windows(input_ids, segment_ids, column('first'), column('last'),
                 column('impossible', np.float32), column('question'), column('start'),
                 column('offset'), column('length'),
                 np.asarray([r['max_context'] for r in rows], bool).reshape(count, max_seq_length))
