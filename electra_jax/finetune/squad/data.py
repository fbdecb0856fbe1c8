"""SQuAD 1.1 and 2.0 files (the official JSON layout) as questions over whitespace-split contexts.

Each context is split into words at whitespace exactly as the original ELECTRA (and BERT) code
does it (space, tab, CR, LF and U+202F), keeping every word's character span, so answers can be
mapped from characters to words and sub-tokens and predicted spans back to the context's text.

Every gold answer must be the context's text at its `answer_start`: anything else means the
file is not what it claims to be, and reading stops with the file, the question id and both
texts. (The original skipped such training questions with a log line; the official files have
none, so a mismatch is the user's to fix.)
"""

import json
import os
from typing import NamedTuple

from electra_jax.common.errors import UsageError

_WHITESPACE = frozenset(' \t\r\n\u202f')


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

  @property
  def has_answer(self) -> dict[str, bool]:
    """What the official 2.0 script calls qid_to_has_ans."""
    return {q.qid: bool(q.answers) for q in self.questions}


def split_words(text: str) -> Context:
  starts, ends, inside = [], [], False
  for i, char in enumerate(text):
    if char in _WHITESPACE:
      if inside:
        ends.append(i)
      inside = False
    elif not inside:
      starts.append(i)
      inside = True
  if inside:
    ends.append(len(text))
  return Context(text, tuple(starts), tuple(ends))


def _load_json(path: str):
  if not os.path.isfile(path):
    raise UsageError(f"SQuAD file '{path}' does not exist; set --config.data_dir (and "
                     '--config.train_file / --config.dev_file) to the official JSON files')
  try:
    with open(path, encoding='utf-8') as f:
      data = json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise UsageError(f"'{path}' is not a SQuAD JSON file ({e})") from None
  if not isinstance(data, dict) or not isinstance(data.get('data'), list):
    raise UsageError(f"'{path}' is not a SQuAD JSON file: it has no list 'data' of articles")
  return data['data']


def _answers(path: str, qa: dict, context: str) -> tuple[Answer, ...]:
  answers = []
  for answer in qa.get('answers') or ():
    text, start = answer.get('text'), answer.get('answer_start')
    if not isinstance(text, str) or not isinstance(start, int):
      raise UsageError(f"'{path}' question {qa['id']}: an answer without 'text' and an integer "
                       f"'answer_start' ({answer!r})")
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
    for paragraph in article.get('paragraphs', ()):
      if not isinstance(paragraph.get('context'), str):
        raise UsageError(f"'{path}': a paragraph of '{article.get('title', '?')}' has no "
                         "'context' text")
      context = paragraph['context']
      number = len(contexts)
      contexts.append(split_words(context))
      for qa in paragraph.get('qas', ()):
        qid = qa.get('id')
        if not isinstance(qid, str) or not isinstance(qa.get('question'), str):
          raise UsageError(f"'{path}': a question of '{article.get('title', '?')}' lacks an "
                           "'id' or its 'question' text")
        if qid in seen:
          raise UsageError(f"'{path}' question {qid}: the id occurs twice")
        seen.add(qid)
        impossible = bool(qa.get('is_impossible', False))
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
