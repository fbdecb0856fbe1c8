"""CoNLL-2000 chunking: conlleval's chunk F1 on hand-written tag sequences (and against a literal
port of its counting loop), tag encodings, first-sub-token features, end to end on real data."""


import json

import ml_collections
import numpy as np
import pytest
import torch
import transformers

from conftest import REPO, SHARED_DATA, real_file as real
from electra_jax.common.config import load_config_file
from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError
from electra_jax.finetune.tagging import (data as chunk_data, metrics as chunk_metrics,
                                          run as tagging_run)
from electra_jax.finetune import families as run
from electra_jax.finetune import export as finetuned

CONLL = SHARED_DATA / 'conll2000'
CHUNK_CONFIG = str(REPO / 'configs' / 'finetune' / 'chunk.py')


@pytest.mark.parametrize('tags, expected', [
    ('B-NP I-NP O B-VP', {(0, 1, 'NP'), (3, 3, 'VP')}),
    ('I-NP I-NP O', {(0, 1, 'NP')}),                      # I- with no B- starts a chunk
    ('O I-VP I-VP B-VP', {(1, 2, 'VP'), (3, 3, 'VP')}),
    ('B-NP I-VP I-VP', {(0, 0, 'NP'), (1, 2, 'VP')}),    # a new type starts a chunk
    ('B-NP B-NP', {(0, 0, 'NP'), (1, 1, 'NP')}),
    ('I-NP', {(0, 0, 'NP')}),                             # the sentence's end closes it
    ('O O', set()),
])
def test_conlleval_chunks(tags, expected):
  assert chunk_metrics.chunks(tags.split()) == expected


def test_conlleval_precision_recall_f1_by_hand():
  gold = [['B-NP', 'I-NP', 'O', 'B-VP', 'I-VP'], ['I-PP', 'B-NP', 'I-NP']]
  predicted = [['B-NP', 'I-NP', 'O', 'B-VP', 'B-VP'], ['B-PP', 'I-NP', 'I-NP']]
  # Gold: NP(0-1) VP(3-4) | PP(0) NP(1-2). Predicted: NP(0-1) VP(3) VP(4) | PP(0) NP(1-2):
  # the I-NP after B-PP starts an NP. 3 of 5 predicted right, 3 of 4 gold found.
  result = chunk_metrics.conlleval(gold, predicted)
  assert result['precision'] == pytest.approx(60.0) and result['recall'] == pytest.approx(75.0)
  assert result['f1'] == pytest.approx(2 * 60 * 75 / 135)
  assert result['accuracy'] == pytest.approx(100 * 5 / 8)  # whole tags: I-PP is not B-PP
  assert chunk_metrics.conlleval([['O']], [['O']])['f1'] == 0.0


def conlleval_counts(gold, predicted):
  """conlleval's own loop, line by line: correct chunks, gold chunks, predicted chunks."""
  def split(tag):
    return tuple(tag.split('-', 1)) if '-' in tag else (tag, '')
  correct = found_correct = found_guessed = 0
  in_correct = False
  last_correct, last_guessed, last_correct_type, last_guessed_type = 'O', 'O', '', ''
  lines = [pair for g, p in zip(gold, predicted) for pair in [*zip(g, p), None]]
  for pair in lines:
    (c, c_type), (g, g_type) = (('O', ''), ('O', '')) if pair is None else map(split, pair)
    c_end = chunk_metrics.ends_chunk(last_correct, c, last_correct_type, c_type)
    g_end = chunk_metrics.ends_chunk(last_guessed, g, last_guessed_type, g_type)
    c_start = chunk_metrics.starts_chunk(last_correct, c, last_correct_type, c_type)
    g_start = chunk_metrics.starts_chunk(last_guessed, g, last_guessed_type, g_type)
    if in_correct:
      if c_end and g_end and last_guessed_type == last_correct_type:
        in_correct, correct = False, correct + 1
      elif c_end != g_end or g_type != c_type:
        in_correct = False
    if c_start and g_start and g_type == c_type:
      in_correct = True
    found_correct += c_start
    found_guessed += g_start
    last_correct, last_guessed, last_correct_type, last_guessed_type = c, g, c_type, g_type
  return correct + in_correct, found_correct, found_guessed


def test_chunk_sets_count_what_conllevals_loop_counts():
  rng = np.random.default_rng(0)
  tags = ['O', 'B-NP', 'I-NP', 'B-VP', 'I-VP', 'E-NP', 'I-PP']
  for _ in range(300):
    length = int(rng.integers(1, 9))
    gold = [list(rng.choice(tags, length)) for _ in range(3)]
    predicted = [list(rng.choice(tags, len(g))) for g in gold]
    sets = [(chunk_metrics.chunks(g), chunk_metrics.chunks(p)) for g, p in zip(gold, predicted)]
    ours = (sum(len(a & b) for a, b in sets), sum(len(a) for a, _ in sets),
            sum(len(b) for _, b in sets))
    assert ours == conlleval_counts(gold, predicted), (gold, predicted)


def test_bioes_round_trip_keeps_the_chunks_of_the_real_training_file():
  sentences = chunk_data.read(str(real(CONLL / 'train.txt')))
  assert len(sentences.words) == 8936 and sum(map(len, sentences.words)) == 211727
  assert chunk_data.to_bioes(['B-NP', 'I-NP', 'B-PP', 'I-VP', 'O']) == \
      ['B-NP', 'E-NP', 'S-PP', 'S-VP', 'O']
  for tags in sentences.tags:
    bioes = chunk_data.to_bioes(tags)
    assert chunk_metrics.chunks(chunk_data.to_bio(bioes)) == chunk_metrics.chunks(tags)


def test_each_word_is_labelled_at_its_first_sub_token(tmp_path):
  (tmp_path / 'vocab.txt').write_text('\n'.join(
      '[PAD] [UNK] [CLS] [SEP] [MASK] the cat sat ##s on mat .'.split()) + '\n')
  vocab = vocab_lib.load_wordpiece(str(tmp_path / 'vocab.txt'))
  sentences = chunk_data.Sentences('mem', [['The', 'cats', 'sat', 'on', 'the', 'mat']],
                                   [['B-NP', 'I-NP', 'B-VP', 'B-PP', 'B-NP', 'I-NP']])
  labels = chunk_data.label_set(sentences.tags)
  features = chunk_data.build(sentences, sentences.tags, labels, vocab, max_seq_length=7)
  # [CLS] the cat ##s sat on [SEP]: 'the mat' does not fit and is not seen.
  assert list(features.input_ids[0]) == [2, 5, 6, 8, 7, 9, 3]
  assert list(features.first_token[0]) == [1, 2, 4, 5, -1, -1]
  expected = [-1, labels.index('B-NP'), labels.index('I-NP'), -1, labels.index('B-VP'),
              labels.index('B-PP'), -1]
  assert list(features.labels[0]) == expected
  predicted = np.where(features.labels >= 0, features.labels, 0)
  assert chunk_data.predicted_tags(features, predicted, labels, 'BIO') == \
      [['B-NP', 'I-NP', 'B-VP', 'B-PP', 'O', 'O']]


def test_fine_tunes_on_real_conll_and_writes_conlleval_input(tmp_path):
  for name, count in (('train.txt', 48), ('test.txt', 24)):  # the files' first sentences
    text = real(CONLL / name).read_text()
    (tmp_path / name).write_text('\n\n'.join(text.split('\n\n')[:count]) + '\n\n')
  words = {line.split()[0].lower() for line in (tmp_path / 'train.txt').read_text().splitlines()
           if line}
  pieces = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', *sorted(words)]
  (tmp_path / 'vocab.txt').write_text('\n'.join(pieces) + '\n')
  vocab_size = len(pieces)
  config = load_config_file(CHUNK_CONFIG)
  config.model.update(vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_layers=2,
                      num_heads=2, intermediate_size=64)
  config.update(vocab=str(tmp_path / 'vocab.txt'), data_dir=str(tmp_path), max_seq_length=64,
                batch_size=8, eval_batch_size=8, num_epochs=2.0, learning_rate=1e-3,
                log_every=2, seeds='0,1,2')
  summary = run.fine_tune(config, str(tmp_path / 'out'))
  assert summary['task'] == 'chunk' and set(summary['seeds']) == {'0', '1', '2'}
  assert summary['budget']['steps'] == 12 and summary['score_metric'] == 'eval f1'
  lines = (tmp_path / 'out' / 'predictions.txt').read_text().split('\n\n')[:-1]
  gold = [[line.split()[1] for line in s.splitlines()] for s in lines]
  predicted = [[line.split()[2] for line in s.splitlines()] for s in lines]
  assert len(gold) == 24
  chosen = summary['seeds'][str(summary['files_seed'])]['eval']
  assert chunk_metrics.conlleval(gold, predicted) == pytest.approx(chosen)
  assert summary['score'] == pytest.approx(
      np.median([s['eval']['f1'] for s in summary['seeds'].values()]))

  # Seed 1's model, exported, is an ElectraForTokenClassification with the same logits.
  out = tmp_path / 'hf'
  assert finetuned.export_seed(str(tmp_path / 'out'), str(out), seed=1) == 12
  params, _ = finetuned.seed_params(str(tmp_path / 'out'), 1)
  labels = summary['labels']
  ids = np.random.default_rng(0).integers(5, vocab_size, (3, 20)).astype(np.int32)
  ids[1, 12:] = 0
  ours = tagging_run.Tagger(ml_collections.ConfigDict(json.loads(
      (tmp_path / 'out' / 'config.json').read_text())['model']), len(labels)).apply(
          {'params': params}, ids, np.zeros_like(ids))
  assert_same_logits(transformers.ElectraForTokenClassification, out, ids, ours, labels)


def assert_same_logits(hf_class, path, ids, ours, labels):
  """The exported model loads as `hf_class` with our labels and gives `ours` at every token
  that is not padding (1e-4)."""
  hf = hf_class.from_pretrained(str(path)).eval()
  assert [hf.config.id2label[i] for i in range(len(labels))] == labels
  with torch.no_grad():
    logits = hf(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(ids != 0, dtype=torch.long)).logits.numpy()
  real = ids != 0
  np.testing.assert_allclose(logits[real], np.asarray(ours)[real], rtol=1e-4, atol=1e-4)


def test_bad_conll_input_is_one_clear_error(tmp_path):
  (tmp_path / 'train.txt').write_text('Confidence NN B-NP\nin\n')
  with pytest.raises(UsageError, match=r"train.txt' line 2: 'in' has no tag"):
    chunk_data.read(str(tmp_path / 'train.txt'))
  with pytest.raises(UsageError, match=r"'.*missing.txt' does not exist"):
    chunk_data.read(str(tmp_path / 'missing.txt'))
  config = load_config_file(CHUNK_CONFIG)
  config.task = 'squad_v1'
  with pytest.raises(UsageError, match=r'squad task: pass --config=configs/finetune/squad.py'):
    run.fine_tune(config, str(tmp_path / 'out'))


def test_text_that_is_not_conll_is_refused_at_its_first_line():
  """GLUE's TSV trained as "1 training sentences, 35 labels" (each line's last word a tag), F1 0."""
  for task, first_line in (('SST-2', "'sentence\\tlabel' is not CoNLL: it ends in 'label'"),
                           ('MRPC', "'\\ufeffQuality\\t#1 ID\\t#2 ID\\t#1 String\\t#2 String' "
                                    "is not CoNLL: it ends in 'String'")):
    glue = str(real(SHARED_DATA / 'glue' / task / 'train.tsv'))
    with pytest.raises(UsageError) as refused:
      chunk_data.read(glue)
    assert str(refused.value) == (
        f"'{glue}' line 1: {first_line}, no chunk tag (B-NP, I-VP, O); chunking reads 'WORD POS "
        "CHUNK' lines, a blank line between sentences (the CoNLL-2000 files)")
