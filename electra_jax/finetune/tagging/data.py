"""CoNLL-2000 chunking: sentences from its files, tag encodings, and one label per word.

Files hold `WORD POS CHUNK` lines, a blank line between sentences (`-DOCSTART-` skipped, as the
original's reader does). The original trains on BIOES tags made from the file's BIO chunks;
'BIO' trains on the file's own. Predictions go back to BIO before scoring. A sentence is
`[CLS] sub-tokens [SEP]`, each word labelled and predicted at its first sub-token; a word that
does not fit, or has no sub-token, is predicted 'O'.
"""

import os
import re
from typing import NamedTuple

import numpy as np

from electra_jax.common.errors import UsageError
from electra_jax.finetune.tagging import metrics as chunk_metrics

ENCODINGS = ('BIOES', 'BIO')
IGNORED = -1  # label of the sub-tokens that are not a word's first
CHUNK_TAG = re.compile(r'O|[BIES]-\S+')  # what a CoNLL line ends in (BIO, or BIOES)


class Sentences(NamedTuple):
  path: str
  words: list[list[str]]
  tags: list[list[str]]


def read(path: str, max_sentences: int = 0) -> Sentences:
  if not os.path.isfile(path):
    raise UsageError(f"CoNLL file '{path}' does not exist; set --config.data_dir (and "
                     '--config.train_file / --config.eval_file) to the CoNLL-2000 files')
  sentences = [[]]  # (word, tag) pairs; each blank line starts another
  with open(path, encoding='utf-8') as f:
    for number, line in enumerate(f, start=1):
      fields = line.split()
      if not fields:
        sentences.append([])
      elif fields[0] != '-DOCSTART-':  # other text (a GLUE TSV) is refused at its first line
        where = f"'{path}' line {number}: {line.strip()[:80]!r}"
        if len(fields) < 2:
          raise UsageError(f"{where} has no tag; CoNLL lines are 'WORD POS CHUNK'")
        if not CHUNK_TAG.fullmatch(fields[-1]):
          raise UsageError(f'{where} is not CoNLL: it ends in {fields[-1]!r}, no chunk tag (B-NP, '
                           "I-VP, O); chunking reads 'WORD POS CHUNK' lines, a blank line "
                           'between sentences (the CoNLL-2000 files)')
        sentences[-1].append((fields[0], fields[-1]))
  sentences = [sentence for sentence in sentences if sentence]
  if not sentences:
    raise UsageError(f"'{path}' holds no sentences")
  if max_sentences > 0:
    sentences = sentences[:max_sentences]
  return Sentences(path, [[word for word, _ in s] for s in sentences],
                   [[tag for _, tag in s] for s in sentences])


def to_bioes(tags: list[str]) -> list[str]:
  """BIOES tags of the chunks conlleval finds in `tags`."""
  result = ['O'] * len(tags)
  for first, last, kind in chunk_metrics.chunks(tags):
    result[first:last + 1] = [f'I-{kind}'] * (last - first + 1)
    result[last] = f'E-{kind}'
    result[first] = f'S-{kind}' if first == last else f'B-{kind}'
  return result


def to_bio(tags: list[str]) -> list[str]:
  """BIO tags of BIOES ones (a stray I- or E- that continues no chunk begins one)."""
  result, prev = [], ('O', '')
  for tag in tags:
    prefix, kind = chunk_metrics.split_tag(tag)
    if prefix == 'O':
      result.append('O')
    else:
      continues = prefix in ('I', 'E') and prev[0] in ('B', 'I') and prev[1] == kind
      result.append(f'{"I" if continues else "B"}-{kind}')
    prev = (prefix, kind)
  return result


def encoded(tags: list[list[str]], encoding: str) -> list[list[str]]:
  return [to_bioes(t) for t in tags] if encoding == 'BIOES' else [list(t) for t in tags]


def label_set(tags: list[list[str]]) -> tuple[str, ...]:
  return tuple(sorted({tag for sentence in tags for tag in sentence}))


class Features(NamedTuple):
  input_ids: np.ndarray       # [N, L] int32
  segment_ids: np.ndarray     # [N, L] int32, all 0 (the original used 1; one segment either way)
  labels: np.ndarray          # [N, L] int32 label of each word's first sub-token, else IGNORED
  first_token: list[np.ndarray]  # per sentence, each word's first sub-token position (-1: none)

  def model_inputs(self) -> dict[str, np.ndarray]:
    return {'input_ids': self.input_ids, 'segment_ids': self.segment_ids}

  def training_inputs(self) -> dict[str, np.ndarray]:
    return {**self.model_inputs(), 'labels': self.labels}


def build(sentences: Sentences, tags: list[list[str]], labels: tuple[str, ...], vocab,
          max_seq_length: int) -> Features:
  """Features of the sentences; `tags` (encoded as trained) give labels, unknown ones IGNORED."""
  index = {label: i for i, label in enumerate(labels)}
  count = len(sentences.words)
  input_ids = np.zeros((count, max_seq_length), np.int32)
  label_ids = np.full((count, max_seq_length), IGNORED, np.int32)
  firsts = []
  pieces_of = iter(vocab.encode([word for words in sentences.words for word in words]))
  for row, (words, sentence_tags) in enumerate(zip(sentences.words, tags)):
    ids, first, full = [vocab.cls_id], np.full(len(words), -1, np.int32), False
    for word, tag in enumerate(sentence_tags):
      pieces = next(pieces_of)
      full = full or len(ids) + len(pieces) > max_seq_length - 1  # and so are all that follow
      if full or not pieces:
        continue  # not seen: predicted 'O'
      first[word] = len(ids)
      label_ids[row, len(ids)] = index.get(tag, IGNORED)
      ids += pieces
    ids.append(vocab.sep_id)
    input_ids[row, :len(ids)] = ids
    firsts.append(first)
  return Features(input_ids, np.zeros_like(input_ids), label_ids, firsts)


def predicted_tags(features: Features, predictions: np.ndarray, labels: tuple[str, ...],
                   encoding: str) -> list[list[str]]:
  """BIO tags per sentence from the label ids predicted at every position [N, L]."""
  tags = [[labels[predictions[row, p]] if p >= 0 else 'O' for p in first]
          for row, first in enumerate(features.first_token)]
  return [to_bio(t) for t in tags] if encoding == 'BIOES' else tags


def conlleval_text(sentences: Sentences, predicted: list[list[str]]) -> str:
  """conlleval's input: `WORD GOLD PREDICTED` per line, a blank line after each sentence."""
  return ''.join(''.join(f'{w} {g} {p}\n' for w, g, p in zip(words, gold, tags)) + '\n'
                 for words, gold, tags in zip(sentences.words, sentences.tags, predicted))
