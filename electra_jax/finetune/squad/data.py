"""SQuAD 1.1 and 2.0 files (the official JSON layout) as questions over whitespace-split contexts.

Contexts split into words at whitespace as the original's code does (space, tab, CR, LF,
U+202F), each word keeping its character span. A gold answer that is not the context's text at
its `answer_start` stops reading (the original skipped such training questions; the official
files have none, so a mismatch is the user's to fix).
"""

import json
import os
import re
from typing import NamedTuple

from electra_jax.common.errors import UsageError

_WORD = re.compile('[^ \t\r\n\u202f]+')  # a word: a run of anything but that whitespace


class Context(NamedTuple):
  text: str
  word_starts: tuple[int, ...]   # character offset of each whitespace-separated word
  word_ends: tuple[int, ...]     # one past its last character

  @property
  def words(self) -> list[str]:
    return [self.text[s:e] for s, e in zip(self.word_starts, self.word_ends)]


class Answer(NamedTuple):
  text: str
  start: int                     # character offset in the context


class Question(NamedTuple):
  qid: str
  text: str
  context: int                   # index into SquadSet.contexts
  answers: tuple[Answer, ...]    # () for an unanswerable (2.0) question
  is_impossible: bool


class SquadSet(NamedTuple):
  path: str
  contexts: list[Context]
  questions: list[Question]


def split_words(text: str) -> Context:
  spans = [word.span() for word in _WORD.finditer(text)]
  return Context(text, tuple(start for start, _ in spans), tuple(end for _, end in spans))


def _has(record: dict, name: str, kind: type) -> bool:
  """Whether `record` is a JSON object with the field `name`, of type `kind`."""
  return isinstance(record, dict) and name in record and isinstance(record[name], kind)


def _load_json(path: str):
  if not os.path.isfile(path):
    raise UsageError(f"SQuAD file '{path}' does not exist; set --config.data_dir (and "
                     '--config.train_file / --config.dev_file) to the official JSON files')
  try:
    with open(path, encoding='utf-8') as f:
      data = json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise UsageError(f"'{path}' is not a SQuAD JSON file ({e})") from None
  if not _has(data, 'data', list):
    raise UsageError(f"'{path}' is not a SQuAD JSON file: it has no list 'data' of articles")
  return data['data']


def _answers(path: str, qa: dict, context: str) -> tuple[Answer, ...]:
  answers = []
  for answer in qa.get('answers') or ():  # an unanswerable question may leave it out
    if not _has(answer, 'text', str) or not _has(answer, 'answer_start', int):
      raise UsageError(f"'{path}' question {qa['id']}: an answer without 'text' and an integer "
                       f"'answer_start' ({answer!r})")
    text, start = answer['text'], answer['answer_start']
    found = context[start:start + len(text)]
    if start < 0 or found != text:
      raise UsageError(f"'{path}' question {qa['id']}: answer {text!r} at character {start} "
                       f'does not match its context, which has {found!r} there')
    answers.append(Answer(text, start))
  return tuple(answers)


def read(path: str, answerable_only: bool = False, max_articles: int = 0) -> SquadSet:
  """The questions of a SQuAD file (its first `max_articles` articles if > 0);
  `answerable_only` drops 2.0's unanswerable questions (for SQuAD 1.1)."""
  contexts, questions, seen = [], [], set()
  articles = _load_json(path)
  for article in articles[:max_articles] if max_articles > 0 else articles:
    title = article.get('title', '?')  # for messages; SQuAD's articles have one
    for paragraph in article['paragraphs'] if 'paragraphs' in article else ():
      if not _has(paragraph, 'context', str):
        raise UsageError(f"'{path}': a paragraph of '{title}' has no 'context' text")
      context = paragraph['context']
      number = len(contexts)
      contexts.append(split_words(context))
      for qa in paragraph['qas'] if 'qas' in paragraph else ():
        if not _has(qa, 'id', str) or not _has(qa, 'question', str):
          raise UsageError(f"'{path}': a question of '{title}' lacks an "
                           "'id' or its 'question' text")
        qid = qa['id']
        if qid in seen:
          raise UsageError(f"'{path}' question {qid}: the id occurs twice")
        seen.add(qid)
        impossible = bool(qa.get('is_impossible', False))  # SQuAD 1.1 has no such field
        answers = _answers(path, qa, context)
        if not impossible and not answers:
          raise UsageError(f"'{path}' question {qid}: no answers, and it is not marked "
                           "'is_impossible'")
        if impossible and answerable_only:
          continue
        questions.append(Question(qid, qa['question'], number, answers, impossible))
  if not questions:
    raise UsageError(f"'{path}' holds no questions")
  return SquadSet(path, contexts, questions)
