"""The model's window outputs -> one answer text per question, as the original's qa_metrics.py.

Each window proposes (start, end) pairs: 'electra', its beam scored log p(start) + log p(end |
start); 'plain', the n_best_size best starts x ends, scored by their summed logits. A pair counts
inside the window's context, with its start where that token has max context, end >= start and
at most max_answer_length sub-tokens. The answer is the best pair's text (the original's "empty"
if none counts): the context's characters from its first to its last sub-token, words joined by
one space, as the original's get_final_text gives them. SQuAD 2.0's no-answer score is the
smallest answerability logit over the windows ('electra'), or start_logit[CLS] +
end_logit[CLS] minus the best answer's score ('plain'); above the threshold the answer is "".
"""

from typing import NamedTuple

import numpy as np

from electra_jax.finetune.squad.data import Context, SquadSet
from electra_jax.finetune.squad.features import TokenizedContext, Windows


class Answers(NamedTuple):
  best_non_null: dict[str, str]      # question id -> the best answer text
  null_odds: dict[str, float] | None  # question id -> no-answer score (SQuAD 2.0)

  def predictions(self, threshold: float) -> dict[str, str]:
    """What predictions.json holds: the answer, or "" where the no-answer score > threshold."""
    if self.null_odds is None:
      return dict(self.best_non_null)
    return {qid: '' if self.null_odds[qid] > threshold else text
            for qid, text in self.best_non_null.items()}


def span_text(context: Context, tokens: TokenizedContext, first: int, last: int) -> str:
  """The context's text from sub-token `first` to sub-token `last`, words joined by a space."""
  start, end = int(tokens.start[first]), int(tokens.end[last])
  pieces = (context.text[max(start, context.word_starts[w]):min(end, context.word_ends[w])]
            for w in range(int(tokens.word[first]), int(tokens.word[last]) + 1))
  return ' '.join(piece for piece in pieces if piece)


def _pairs(outputs, window: int, head: str, n_best_size: int):
  """(start, end, score) arrays of a window's candidate pairs."""
  if head == 'electra':
    starts = np.broadcast_to(outputs['start_top_index'][window][:, None],
                             outputs['end_top_index'][window].shape)
    return (starts, outputs['end_top_index'][window],
            outputs['start_top_log_probs'][window][:, None] + outputs['end_top_log_probs'][window])
  start_logits, end_logits = outputs['start_logits'][window], outputs['end_logits'][window]
  best = lambda logits: np.argsort(-logits, kind='stable')[:n_best_size]
  starts, ends = np.broadcast_arrays(best(start_logits)[:, None], best(end_logits)[None, :])
  return starts, ends, start_logits[starts] + end_logits[ends]


def answers(squad: SquadSet, windows: Windows, contexts: list[TokenizedContext], outputs,
            head: str, v2: bool, n_best_size: int, max_answer_length: int) -> Answers:
  """Every question's best answer (and, for v2, its no-answer score) from the windows' outputs
  (a dict of [N, ...] arrays, as the model's predict step returns them)."""
  best, null_odds = {}, {} if v2 else None
  shift = windows.doc_start - windows.doc_offset  # a window's position -> its context token
  bounds = np.flatnonzero(np.diff(windows.question, prepend=-1, append=len(squad.questions)))
  for first, stop in zip(bounds[:-1], bounds[1:]):
    question = squad.questions[windows.question[first]]
    candidates, null = [], np.inf
    for w in range(first, stop):
      offset, length = windows.doc_offset[w], windows.doc_length[w]
      starts, ends, scores = (np.ravel(x) for x in _pairs(outputs, w, head, n_best_size))
      valid = ((starts >= offset) & (starts < offset + length) & (ends >= offset) &
               (ends < offset + length) & (ends >= starts) &
               (ends - starts + 1 <= max_answer_length))
      valid &= windows.max_context[w][np.clip(starts, 0, windows.max_context.shape[1] - 1)]
      candidates += [(float(scores[k]), w, int(starts[k]), int(ends[k]))
                     for k in np.flatnonzero(valid)]
      if v2 and head == 'electra':
        null = min(null, float(outputs['answerable_logit'][w]))
      elif v2:
        null = min(null, float(outputs['start_logits'][w][0] + outputs['end_logits'][w][0]))
    # sorted() is stable: equal scores keep window, then beam order, as the original's.
    candidates.sort(key=lambda c: c[0], reverse=True)
    context, tokens = squad.contexts[question.context], contexts[question.context]
    texts = ((span_text(context, tokens, start + shift[w], end + shift[w]), score)
             for score, w, start, end in candidates)
    # The best pair's text, passing over empty ones; the original's "empty" when none is left.
    text, score = next((found for found in texts if found[0]), ('empty', 0.0))
    best[question.qid] = text
    if v2:
      null_odds[question.qid] = null if head == 'electra' else null - score
  return Answers(best, null_odds)
