"""Chunk-level precision, recall and F1 as conlleval (the CoNLL-2000 shared task's script) counts.

conlleval reads a tag as PREFIX-TYPE and finds chunk boundaries from each pair of neighbouring
tags alone (ends_chunk, starts_chunk), so an I- after O or another type starts a chunk. A chunk
never runs past its sentence; a predicted one is correct with the gold one's first word, last
word and type. Accuracy counts words whose whole tag is right.
"""

from collections.abc import Sequence


def split_tag(tag: str) -> tuple[str, str]:
  prefix, dash, kind = tag.partition('-')
  return (prefix, kind) if dash else (tag, '')


def ends_chunk(prev: str, tag: str, prev_type: str, kind: str) -> bool:
  return ((prev, tag) in {('B', 'B'), ('B', 'O'), ('I', 'B'), ('I', 'O'), ('E', 'E'),
                          ('E', 'I'), ('E', 'O')} or
          (prev not in ('O', '.') and prev_type != kind) or prev in ('[', ']'))


def starts_chunk(prev: str, tag: str, prev_type: str, kind: str) -> bool:
  return ((prev, tag) in {('B', 'B'), ('I', 'B'), ('O', 'B'), ('O', 'I'), ('E', 'E'),
                          ('E', 'I'), ('O', 'E')} or
          (tag not in ('O', '.') and prev_type != kind) or tag in ('[', ']'))


def chunks(tags: Sequence[str]) -> set[tuple[int, int, str]]:
  """The (first word, last word, type) of every chunk in one sentence's tags."""
  found, opened = set(), None
  prev, prev_type = 'O', ''
  for i, full in enumerate([*tags, 'O']):  # the sentence boundary counts as O
    tag, kind = split_tag(full)
    if opened is not None and ends_chunk(prev, tag, prev_type, kind):
      found.add((opened, i - 1, prev_type))
      opened = None
    if i < len(tags) and starts_chunk(prev, tag, prev_type, kind):
      opened = i
    prev, prev_type = tag, kind
  return found


def conlleval(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
  """Precision, recall, F1 (percent) of the chunks, and word accuracy, over all sentences."""
  correct = found_gold = found_predicted = right_words = words = 0
  for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
    if len(gold_tags) != len(predicted_tags):
      raise ValueError(f'a sentence has {len(gold_tags)} gold tags and {len(predicted_tags)} '
                       'predicted ones')
    gold_chunks, predicted_chunks = chunks(gold_tags), chunks(predicted_tags)
    correct += len(gold_chunks & predicted_chunks)
    found_gold += len(gold_chunks)
    found_predicted += len(predicted_chunks)
    right_words += sum(g == p for g, p in zip(gold_tags, predicted_tags))
    words += len(gold_tags)
  precision = 100.0 * correct / found_predicted if found_predicted else 0.0
  recall = 100.0 * correct / found_gold if found_gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {'f1': f1, 'precision': precision, 'recall': recall,
          'accuracy': 100.0 * right_words / words if words else 0.0}
