"""EM and F1 exactly as the official SQuAD evaluation scripts (v1.1 and v2.0) compute them:
answers normalised (lowercase, no ASCII punctuation, a/an/the out, whitespace collapsed), each
question's best over its gold answers, percentages over the questions.

Where they differ: v1.1 counts an unanswered question as 0. v2.0 leaves it out, keeps the gold
answers that normalise to something (else [''], where only "" is right), scores F1 1 when both
token lists are empty, and, given no-answer scores `na_probs` (higher: more likely
unanswerable), counts one above `na_prob_thresh` as "no answer"; it reports HasAns and NoAns
too, and the thresholds that would have maximised EM and F1.
"""

import collections
import re
import string

_ARTICLES = re.compile(r'\b(a|an|the)\b', re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
  text = text.lower()
  text = ''.join(char for char in text if char not in _PUNCTUATION)
  text = _ARTICLES.sub(' ', text)
  return ' '.join(text.split())


def _f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
  same = sum((collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)).values())
  if same == 0:
    return 0.0
  precision, recall = same / len(prediction_tokens), same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


# ---- v1.1 -----------------------------------------------------------------------------------

def exact_v1(prediction: str, gold: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
  return _f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def evaluate_v1(gold: dict[str, list[str]], predictions: dict[str, str]) -> dict[str, float]:
  """{'exact_match', 'f1'} (percent) of `predictions` over every question of `gold`
  (question id -> its gold answer texts)."""
  exact = f1 = 0.0
  for qid, answers in gold.items():
    if qid in predictions:
      exact += max(exact_v1(predictions[qid], a) for a in answers)
      f1 += max(f1_v1(predictions[qid], a) for a in answers)
  return {'exact_match': 100.0 * exact / len(gold), 'f1': 100.0 * f1 / len(gold)}


# ---- v2.0 -----------------------------------------------------------------------------------

def f1_v2(gold: str, prediction: str) -> float:
  gold_tokens = normalize_answer(gold).split()
  prediction_tokens = normalize_answer(prediction).split()
  if not gold_tokens or not prediction_tokens:
    return float(gold_tokens == prediction_tokens)
  return _f1(prediction_tokens, gold_tokens)


def raw_scores_v2(gold: dict[str, list[str]], predictions: dict[str, str]):
  """Per-question EM and F1 (0/1 and [0, 1]) before any no-answer threshold."""
  exact, f1 = {}, {}
  for qid, answers in gold.items():
    answers = [a for a in answers if normalize_answer(a)] or ['']
    if qid not in predictions:
      continue
    exact[qid] = max(exact_v1(predictions[qid], a) for a in answers)
    f1[qid] = max(f1_v2(a, predictions[qid]) for a in answers)
  return exact, f1


def apply_threshold(scores, na_probs, has_answer, na_prob_thresh):
  return {qid: float(not has_answer[qid]) if na_probs[qid] > na_prob_thresh else score
          for qid, score in scores.items()}


def _summary(exact, f1, qids=None) -> dict[str, float]:
  qids = list(qids) if qids else list(exact)
  return {'exact': 100.0 * sum(exact[q] for q in qids) / len(qids),
          'f1': 100.0 * sum(f1[q] for q in qids) / len(qids), 'total': len(qids)}


def best_threshold(predictions, scores, na_probs, has_answer) -> tuple[float, float]:
  """The score (percent) and threshold that predicting "no answer" above it would give."""
  current = best = sum(1 for qid in has_answer if not has_answer[qid])
  threshold = 0.0
  for qid in sorted(na_probs, key=lambda q: na_probs[q]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      current += scores[qid]
    elif predictions[qid]:
      current -= 1
    if current > best:
      best, threshold = current, na_probs[qid]
  return 100.0 * best / len(scores), threshold


def evaluate_v2(gold: dict[str, list[str]], predictions: dict[str, str],
                na_probs: dict[str, float] | None = None,
                na_prob_thresh: float = 1.0) -> dict[str, float]:
  """The official v2.0 evaluation dict: exact, f1, total, HasAns_*, NoAns_* and (with
  na_probs) best_exact, best_exact_thresh, best_f1, best_f1_thresh."""
  has_answer = {qid: bool(answers) for qid, answers in gold.items()}
  probs = na_probs if na_probs is not None else {qid: 0.0 for qid in predictions}
  exact_raw, f1_raw = raw_scores_v2(gold, predictions)
  exact = apply_threshold(exact_raw, probs, has_answer, na_prob_thresh)
  f1 = apply_threshold(f1_raw, probs, has_answer, na_prob_thresh)
  result = _summary(exact, f1)
  for name, wanted in (('HasAns', True), ('NoAns', False)):
    qids = [qid for qid, has in has_answer.items() if has == wanted and qid in exact]
    if qids:
      result.update({f'{name}_{k}': v for k, v in _summary(exact, f1, qids).items()})
  if na_probs is not None:
    result['best_exact'], result['best_exact_thresh'] = best_threshold(
        predictions, exact_raw, na_probs, has_answer)
    result['best_f1'], result['best_f1_thresh'] = best_threshold(
        predictions, f1_raw, na_probs, has_answer)
  return result
