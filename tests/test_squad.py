"""SQuAD: the official EM/F1 on hand-written cases, features (windows, answer offsets), answer
decoding, end to end on real SQuAD files at tiny size, and one-line errors."""

import collections
import json
import logging
import os
import re
import string
import subprocess
import sys

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import torch
import transformers

from conftest import REPO, SHARED_DATA, error_line, real_file as real
from electra_jax.common.config import load_config_file
from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError
from electra_jax.finetune.squad import (model as qa_model, data as squad_data,
                                        features as squad_features, metrics as squad_metrics)
from electra_jax.finetune import families as run, loop
from electra_jax.finetune.squad import predict as squad_predict
from electra_jax.finetune import export as finetuned

SQUAD = SHARED_DATA / 'squad'
TRAIN = SQUAD / 'train-v2.0.first-11-articles.json'
SQUAD_CONFIG = str(REPO / 'configs' / 'finetune' / 'squad.py')


# ---- the official metrics -------------------------------------------------------------------

@pytest.mark.parametrize('text, normalized', [
    ('Denver Broncos', 'denver broncos'),                 # lowercase
    ('"Denver," (Broncos)!', 'denver broncos'),           # punctuation removed...
    ("Broncos'", 'broncos'),
    ('Den-ver', 'denver'),                                # ...even inside a word, not split at
    ('the Broncos', 'broncos'),                           # articles
    ('A cat and an owl', 'cat and owl'),
    ('The', ''),
    ('theory another', 'theory another'),                 # only whole words
    ('the.cat', 'thecat'),                                # punctuation goes before articles
    ('  Denver \t\n Broncos  ', 'denver broncos'),        # whitespace collapsed
    ('Élan — “quoted”', 'élan — “quoted”'),               # only ASCII punctuation
])
def test_normalize_answer_rule_by_rule(text, normalized):
  assert squad_metrics.normalize_answer(text) == normalized


def test_v1_exact_match_and_f1_take_the_best_gold_answer():
  gold = {'q1': ['Denver Broncos', 'the Broncos'], 'q2': ['Santa Clara, California'],
          'q3': ['1990s'], 'q4': ['a b c d']}
  predictions = {'q1': 'broncos', 'q2': 'Santa Clara', 'q3': 'the 1980s'}
  # q1: EM with 'the Broncos'; q2: precision 1, recall 2/3 -> F1 0.8; q3: nothing in common;
  # q4: no prediction, scored 0 and counted.
  assert squad_metrics.evaluate_v1(gold, predictions) == pytest.approx(
      {'exact_match': 25.0, 'f1': 100 * (1 + 0.8) / 4})
  assert squad_metrics.f1_v1('a a b', 'a b b') == pytest.approx(2 / 3)  # bags, not sets
  assert squad_metrics.f1_v1('', 'anything') == 0.0
  assert squad_metrics.exact_v1('The', 'a') == 1.0  # both normalise to ''


def test_v2_no_answer_handling_and_the_has_ans_no_ans_breakdown():
  # n3's only answer normalises to '', so only "" matches it; having an answer at all still
  # makes it a HasAns question, as in the official script (qid_to_has_ans = bool(answers)).
  gold = {'a1': ['Denver Broncos'], 'a2': ['1990s', 'late 1990s'], 'n1': [], 'n2': [],
          'n3': ['the']}
  predictions = {'a1': 'Denver Broncos', 'a2': 'early 1990s', 'n1': '', 'n2': 'Broncos',
                 'n3': ''}
  exact, f1 = squad_metrics.raw_scores_v2(gold, predictions)
  assert exact == {'a1': 1, 'a2': 0, 'n1': 1, 'n2': 0, 'n3': 1}
  # a2: '1990s' gives precision 1/2, recall 1 (F1 2/3); 'late 1990s' 1/2 and 1/2.
  assert f1['a2'] == pytest.approx(2 / 3) and f1['n2'] == 0 and f1['n1'] == 1
  assert squad_metrics.f1_v2('', '') == 1.0 and squad_metrics.f1_v2('x', '') == 0.0

  result = squad_metrics.evaluate_v2(gold, predictions)
  assert result['exact'] == pytest.approx(60.0) and result['total'] == 5
  assert result['HasAns_total'] == 3 and result['HasAns_exact'] == pytest.approx(200 / 3)
  assert result['HasAns_f1'] == pytest.approx(100 * (1 + 2 / 3 + 1) / 3)
  assert result['NoAns_total'] == 2 and result['NoAns_exact'] == pytest.approx(50.0)
  assert 'best_f1' not in result

  # No-answer scores above the threshold count as "no answer" whatever the text: right for n2
  # (unanswerable), wrong for a1.
  na = {'a1': 3.0, 'a2': -1.0, 'n1': 0.5, 'n2': 2.0, 'n3': -2.0}
  result = squad_metrics.evaluate_v2(gold, predictions, na, na_prob_thresh=1.0)
  assert result['exact'] == pytest.approx(60.0)   # a1 lost, n2 won
  assert result['HasAns_exact'] == pytest.approx(100 / 3) and result['NoAns_exact'] == 100.0
  # The best threshold: sweeping up the sorted scores, the EM count starts at the 2 NoAns
  # questions and goes n3 +1 (-> 3 at -2.0), a2 +0, n1 +0 (predicted ""), n2 -1, a1 +1.
  assert result['best_exact'] == pytest.approx(60.0) and result['best_exact_thresh'] == -2.0
  result = squad_metrics.evaluate_v2(gold, {**predictions, 'a2': '1990s'}, {**na, 'a2': 5.0})
  # a2, now right, has the top score: ..., a1 +1 -> 3, a2 +1 -> 4 at 5.0.
  assert result['best_exact'] == pytest.approx(80.0) and result['best_exact_thresh'] == 5.0


# ---- words, sub-tokens and windows ----------------------------------------------------------

PIECES = ('[PAD] [UNK] [CLS] [SEP] [MASK] ( ) - . , \' s the leader was john smith 1895 1943 '
          'japanese electronics who born when what year ##s industry').split()


@pytest.fixture(scope='module')
def pieces_vocab(tmp_path_factory):
  path = tmp_path_factory.mktemp('squad_vocab') / 'vocab.txt'
  path.write_text('\n'.join(PIECES) + '\n')
  return vocab_lib.load_wordpiece(str(path))


def test_answers_map_to_sub_tokens_and_back_to_the_context_text(pieces_vocab):
  context = squad_data.split_words('The leader was John Smith\u202f(1895-1943).\nJapanese '
                                   "electronics. Smith's")
  assert context.words == ['The', 'leader', 'was', 'John', 'Smith', '(1895-1943).', 'Japanese',
                           'electronics.', "Smith's"]
  tokens = squad_features.tokenize_context(context, pieces_vocab)
  for answer, expected in (('1895', '1895'),               # a part of a whitespace word
                           ('John Smith', 'John Smith'),
                           ('Japan', 'Japanese'),          # inside a sub-token: the sub-token
                           ('Smith\u202f(1895', 'Smith (1895'),  # words joined by one space
                           ("Smith'", "Smith'")):          # "Smith's": no sub-token 'smith's'
    start = context.text.find(answer)
    first, last = squad_features.answer_tokens(tokens, context, start, start + len(answer))
    assert squad_predict.span_text(context, tokens, first, last) == expected, answer


def test_windows_stride_max_context_and_cls_targets(pieces_vocab):
  words = ' '.join(['the leader was john smith'] * 8)  # 40 sub-tokens
  squad = squad_data.SquadSet('mem', [squad_data.split_words(words + ' 1895')], [
      squad_data.Question('q', 'who was born', 0, (squad_data.Answer('1895', len(words) + 1),),
                          False),
      squad_data.Question('n', 'when', 0, (), True)])
  windows, _, dropped = squad_features.build(squad, pieces_vocab, max_seq_length=24,
                                             max_query_length=2, doc_stride=8, training=True)
  assert dropped == 0
  q = windows.question == 0
  # Query 2 sub-tokens (truncated from 3) -> 24 - 2 - 3 = 19 context sub-tokens per window,
  # starts 0, 8, 16, 24 (the last reaches the 41st sub-token).
  assert list(windows.doc_start[q]) == [0, 8, 16, 24]
  assert list(windows.doc_length[q]) == [19, 19, 19, 17]
  assert list(windows.doc_offset[q]) == [4, 4, 4, 4]
  first = windows.input_ids[0]
  assert first[0] == pieces_vocab.cls_id and first[3] == pieces_vocab.sep_id
  assert list(windows.segment_ids[0]) == [0] * 4 + [1] * 20
  # Only the last window holds the answer (the 41st sub-token); the others point at [CLS].
  assert list(windows.start_positions[q]) == [0, 0, 0, 4 + 40 - 24]
  assert windows.end_positions[q][-1] == windows.start_positions[q][-1]
  # Each context sub-token has max context in exactly one window.
  per_token = np.zeros(41, int)
  for w in np.flatnonzero(q):
    positions = np.flatnonzero(windows.max_context[w])
    per_token[positions - windows.doc_offset[w] + windows.doc_start[w]] += 1
  assert list(per_token) == [1] * 41
  # Sub-token 12 is in windows 0 (left 12, right 6) and 1 (left 4, right 14): window 0.
  assert windows.max_context[0, 4 + 12] and not windows.max_context[1, 4 + 12 - 8]
  # The unanswerable question: every window points at [CLS] and is marked impossible.
  n = windows.question == 1
  assert not windows.start_positions[n].any() and windows.is_impossible[n].all()


def oracle_outputs(windows, beam=3):
  """The 'electra' head's outputs if it were sure of each training window's target."""
  count = len(windows.input_ids)
  start_index = np.zeros((count, beam), np.int32)
  end_index = np.zeros((count, beam, beam), np.int32)
  start_index[:, 0], end_index[:, 0, 0] = windows.start_positions, windows.end_positions
  log_probs = np.full((count, beam), -20.0)
  log_probs[:, 0] = np.where(windows.start_positions > 0, 0.0, -10.0)
  return {'start_top_index': start_index, 'start_top_log_probs': log_probs,
          'end_top_index': end_index, 'end_top_log_probs': np.repeat(log_probs[:, None], beam, 1),
          'answerable_logit': np.where(windows.start_positions > 0, -5.0, 5.0)}


@pytest.fixture(scope='module')
def squad_vocab(tmp_path_factory):
  """A sentencepiece vocabulary of the real training file's text."""
  articles = json.loads(real(TRAIN).read_text())['data']
  lines = [p['context'] for a in articles for p in a['paragraphs']]
  lines += [q['question'] for a in articles for p in a['paragraphs'] for q in p['qas']]
  prefix = str(tmp_path_factory.mktemp('squad_sp') / 'vocab')
  return vocab_lib.train_vocab_on_sentences(lines, 1000, prefix, 'SQuAD train')


def test_answer_offsets_round_trip_on_real_articles(squad_vocab, tmp_path):
  """Windows built from the real answers, decoded as if the model predicted the targets, give
  the gold answers back: the whole character -> sub-token -> character path."""
  squad = squad_data.read(str(TRAIN), answerable_only=True, max_articles=2)
  windows, contexts, dropped = squad_features.build(squad, squad_vocab, 96, 24, 32, True)
  assert dropped == 0 and len(squad.questions) > 500
  found = squad_predict.answers(squad, windows, contexts, oracle_outputs(windows), 'electra',
                                False, n_best_size=20, max_answer_length=64)
  gold = {q.qid: [q.answers[0].text] for q in squad.questions}
  exact = [found.best_non_null[qid] == texts[0] for qid, texts in gold.items()]
  # Character-exact for all but answers whose edge splits a sentencepiece piece.
  assert np.mean(exact) > 0.97
  assert squad_metrics.evaluate_v1(gold, found.best_non_null)['exact_match'] > 99.0

  # SQuAD 2.0: the smallest answerability logit over a question's windows is its score, and
  # above the threshold the prediction is "".
  squad2 = squad_data.read(str(subset_file(tmp_path / 'v2.json', 1, 1000, first=4)))
  windows2, contexts2, _ = squad_features.build(squad2, squad_vocab, 96, 24, 32, True)
  found2 = squad_predict.answers(squad2, windows2, contexts2, oracle_outputs(windows2),
                                 'electra', True, 20, 64)
  impossible = {q.qid for q in squad2.questions if q.is_impossible}
  assert impossible and all(found2.null_odds[q] == 5.0 for q in impossible)
  assert all(found2.null_odds[q.qid] == -5.0 for q in squad2.questions if not q.is_impossible)
  predictions = found2.predictions(threshold=0.0)
  assert all(predictions[q] == '' for q in impossible)
  gold2 = {q.qid: [a.text for a in q.answers] for q in squad2.questions}
  assert squad_metrics.evaluate_v2(gold2, predictions)['exact'] > 99.0


# ---- end to end -----------------------------------------------------------------------------

def subset_file(path, articles, paragraphs, first=0):
  """A SQuAD file of the first paragraphs of some of the real file's articles (the 5th, 4 here,
  and 6th have SQuAD 2.0's unanswerable questions; the others none)."""
  data = json.loads(real(TRAIN).read_text())
  data['data'] = [{**a, 'paragraphs': a['paragraphs'][:paragraphs]}
                  for a in data['data'][first:first + articles]]
  path.write_text(json.dumps(data))
  return path


def tiny_config(squad_vocab, data_dir, **overrides):
  config = load_config_file(SQUAD_CONFIG)
  config.model.update(vocab_size=squad_vocab.size, embedding_size=16, hidden_size=32,
                      num_layers=2, num_heads=2, intermediate_size=64)
  config.update(vocab=squad_vocab.model_path, data_dir=str(data_dir), train_file='part.json',
                dev_file='part.json', max_seq_length=64, max_query_length=16, doc_stride=32,
                batch_size=8, eval_batch_size=32, beam_size=4, n_best_size=4, log_every=2,
                num_epochs=0.25)
  config.update(overrides)
  return config


def independent_v1(gold: dict, predictions: dict) -> tuple[float, float]:
  """The v1.1 script's EM and F1, written again from its definition."""
  def norm(s):
    s = ''.join(c for c in s.lower() if c not in set(string.punctuation))
    return ' '.join(re.sub(r'\b(a|an|the)\b', ' ', s).split())
  def f1(p, g):
    p, g = norm(p).split(), norm(g).split()
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    return 0.0 if not same else 2 * same / (len(p) + len(g))
  em = [max(norm(predictions[q]) == norm(a) for a in answers) for q, answers in gold.items()]
  f = [max(f1(predictions[q], a) for a in answers) for q, answers in gold.items()]
  return 100 * np.mean(em), 100 * np.mean(f)


@pytest.mark.parametrize('task, head', [('squad_v1', 'plain'), ('squad_v2', 'electra')])
def test_fine_tunes_on_real_squad_and_writes_official_outputs(squad_vocab, tmp_path, task, head,
                                                             monkeypatch, caplog):
  subset_file(tmp_path / 'part.json', articles=1, paragraphs=3, first=4)
  out = tmp_path / 'out'
  monkeypatch.setattr(loop, 'PROGRESS_EVERY_S', 0.0)  # a progress line after every batch
  with caplog.at_level(logging.INFO, logger='absl'):
    summary = run.fine_tune(tiny_config(squad_vocab, tmp_path, task=task, head=head,
                                        seeds='0,1'), str(out))
  # The dev prediction (6.4 minutes on the full dev set) says it starts, how far it is and when
  # it will end, and when it ended.
  windows = summary['budget']['dev_windows']
  assert windows > 64  # three batches of 32
  said = [r.getMessage() for r in caplog.records]
  assert (f"seed 0: predicting {summary['budget']['dev_questions']} dev questions ({windows} "
          'windows)') in said
  progress = [m for m in said if m.startswith('predicting ')]
  assert re.fullmatch(rf'predicting 32/{windows} dev windows \(\d+%\), eta \d+m\d\ds', progress[0])
  assert progress[1].startswith(f'predicting 64/{windows} dev windows (')
  assert any(re.fullmatch(r'seed 1: predicted the dev answers in \d+\.\d s', m) for m in said)
  squad = squad_data.read(str(tmp_path / 'part.json'), answerable_only=task == 'squad_v1')
  gold = {q.qid: [a.text for a in q.answers] for q in squad.questions}
  predictions = json.loads((out / 'predictions.json').read_text())
  assert set(predictions) == set(gold)
  results = json.loads((out / 'results.json').read_text())
  assert results == summary and results['task'] == task and results['head'] == head
  assert set(results['seeds']) == {'0', '1'} and results['score_metric'] == 'dev f1'
  chosen = results['seeds'][str(results['files_seed'])]['dev']
  assert (out / f'seed_{results["files_seed"]}' / 'predictions.json').read_text() == \
      (out / 'predictions.json').read_text()
  if task == 'squad_v1':
    em, f1 = independent_v1(gold, predictions)
    assert (chosen['exact_match'], chosen['f1']) == pytest.approx((em, f1))
    assert_exports_as_electra_for_question_answering(out, tmp_path / 'hf', squad_vocab.size)
  else:
    null_odds = json.loads((out / 'null_odds.json').read_text())
    best = json.loads((out / 'best_non_null.json').read_text())
    assert set(null_odds) == set(gold) and all(best.values())
    assert all(predictions[q] == ('' if null_odds[q] > -2.75 else best[q]) for q in gold)
    assert {'HasAns_exact', 'NoAns_exact', 'best_f1', 'best_f1_thresh'} <= set(chosen)
    assert chosen['threshold'] == -2.75
    assert chosen['exact'] == pytest.approx(
        squad_metrics.evaluate_v2(gold, predictions)['exact'])  # "" = thresholded


def assert_exports_as_electra_for_question_answering(workdir, out, vocab_size):
  """Seed 0's plain head, exported, loads as ElectraForQuestionAnswering and gives our start and
  end logits (1e-4) where an answer may lie; ours add -1000 elsewhere, transformers' do not."""
  finetuned.export_seed(str(workdir), str(out), seed=0)
  params, _ = finetuned.seed_params(str(workdir), 0)
  model = ml_collections.ConfigDict(json.loads((workdir / 'config.json').read_text())['model'])
  rng = np.random.default_rng(0)
  ids = rng.integers(5, vocab_size, (2, 24)).astype(np.int32)
  ids[1, 20:] = 0
  segments = np.where(np.arange(24) >= 8, 1, 0)[None].repeat(2, 0) * (ids != 0)
  ours = qa_model.QuestionAnswerer(model, head='plain').apply(
      {'params': params}, jnp.asarray(ids), jnp.asarray(segments))
  hf = transformers.ElectraForQuestionAnswering.from_pretrained(str(out)).eval()
  with torch.no_grad():
    theirs = hf(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(ids != 0, dtype=torch.long),
                token_type_ids=torch.tensor(segments, dtype=torch.long))
  allowed = np.asarray(qa_model.answer_bias(jnp.asarray(ids), jnp.asarray(segments))) == 0
  for name in ('start_logits', 'end_logits'):
    np.testing.assert_allclose(getattr(theirs, name).numpy()[allowed],
                               np.asarray(ours[name])[allowed], rtol=1e-4, atol=1e-4)
  with pytest.raises(UsageError, match='already exists'):
    finetuned.export_seed(str(workdir), str(out), seed=0)


@pytest.mark.slow
def test_trained_and_evaluated_on_two_articles_it_reaches_90_em(squad_vocab, tmp_path):
  """The whole feature/offset/answer path: a model that can memorise 2 articles answers them.

  Memorising takes room and nothing in the way: tiny's widths, no dropout, no layer-wise decay,
  40 epochs (33,700 steps of 8; EM 98.6 in 88 minutes on a busy 2-core machine). With E 16 / H 32,
  dropout and the recipe's decay, 30 epochs reached EM 39.
  """
  subset_file(tmp_path / 'part.json', articles=2, paragraphs=1000)
  config = tiny_config(
      squad_vocab, tmp_path, task='squad_v1', head='electra', max_seq_length=128,
      max_query_length=32, doc_stride=64, num_epochs=40.0, learning_rate=1e-3, layer_decay=1.0,
      beam_size=20, n_best_size=20, log_every=100)
  config.model.update(embedding_size=64, hidden_size=128, num_heads=2, intermediate_size=512,
                      dropout_rate=0.0, attention_dropout_rate=0.0)
  summary = run.fine_tune(config, str(tmp_path / 'out'))
  assert summary['median']['dev']['exact_match'] >= 90.0


# ---- bad input ------------------------------------------------------------------------------

def test_an_answer_that_does_not_match_its_context_names_the_file_and_question(tmp_path):
  path = subset_file(tmp_path / 'bad.json', articles=1, paragraphs=1)
  data = json.loads(path.read_text())
  qa = data['data'][0]['paragraphs'][0]['qas'][0]
  qa['answers'][0]['answer_start'] += 3
  path.write_text(json.dumps(data))
  with pytest.raises(UsageError, match=rf"'{re.escape(str(path))}' question {qa['id']}: answer "
                                       r"'in the late 1990s' at character \d+ does not match"):
    squad_data.read(str(path))
  with pytest.raises(UsageError, match='does not exist'):
    squad_data.read(str(tmp_path / 'missing.json'))


def test_a_training_file_whose_answers_cover_no_sub_token_is_refused_before_compiling(
    squad_vocab, tmp_path):
  subset_file(tmp_path / 'part.json', articles=1, paragraphs=1)
  data = json.loads((tmp_path / 'part.json').read_text())
  paragraph = data['data'][0]['paragraphs'][0]
  for qa in paragraph['qas']:  # a space: a span of the context that no sub-token covers
    qa['answers'] = [{'text': ' ', 'answer_start': paragraph['context'].index(' ')}]
  (tmp_path / 'none.json').write_text(json.dumps(data))
  config = tiny_config(squad_vocab, tmp_path, task='squad_v1', train_file='none.json')
  count = len(paragraph['qas'])
  with pytest.raises(UsageError, match=rf"squad_v1 has nothing to train on: none of the training "
                                       rf"file's {count} answerable questions has an answer that "
                                       'covers a sub-token'):
    run.fine_tune(config, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


def cli(*args):
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}
  return subprocess.run([sys.executable, '-m', 'electra_jax.finetune', *map(str, args)], env=env,
                        cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize('args, message', [
    (['--config.task=squad_v3'], "unknown GLUE task 'squad_v3'; use one of CoLA"),
    (['--config.task=squad_v1', '--config.data_dir=DIR'], "DIR/train-v1.1.json' does not exist"),
    (['--config.task=squad_v1', '--config.head=joint'], "config.head='joint'"),
])
def test_command_line_errors_are_one_line(tmp_path, squad_vocab, args, message):
  args = [a.replace('DIR', str(tmp_path)) for a in args]
  message = message.replace('DIR', str(tmp_path))
  result = cli(f'--config={SQUAD_CONFIG}', f'--workdir={tmp_path}/out',
               f'--config.vocab={squad_vocab.model_path}',
               f'--config.model.vocab_size={squad_vocab.size}', *args)
  assert message in error_line(result)
