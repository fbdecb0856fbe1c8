"""Tests of electra_jax.data: reading corpora, the vocabulary, packing examples and batches."""

import hashlib
import math
import os
from pathlib import Path
import re

import numpy as np
import pytest
import sentencepiece as spm

from electra_jax.data import packing
from electra_jax.data import text
from electra_jax.data import vocab as vocab_lib
from electra_jax.training import inputs
from electra_jax.common.errors import UsageError

WIKITEXT = Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'wikitext-2-raw'
WIKI_VALID = WIKITEXT / 'wiki.valid.raw'
WIKI_TRAIN_PART = WIKITEXT / 'wiki.train.PARTIAL-first-1019-lines.raw'
needs_wikitext = pytest.mark.skipif(
    not WIKI_VALID.exists() or not WIKI_TRAIN_PART.exists(),
    reason=f'WikiText-2 raw not found in {WIKITEXT} (the shared/ folder beside the repo)')
CLS, SEP = 2, 3


def write(path: Path, content: str | bytes) -> str:
  path.write_bytes(content.encode() if isinstance(content, str) else content)
  return str(path)


# ----------------------------------------------------------------------------- text


def test_resolve_files_sorts_each_glob_and_keeps_pattern_order(tmp_path):
  for name in ('b.txt', 'a.txt', 'c.md'):
    write(tmp_path / name, 'x\n')
  (tmp_path / 'sub.txt').mkdir()  # A directory matching the glob is not a file.
  files = text.resolve_files(f'{tmp_path}/c.md, {tmp_path}/*.txt,{tmp_path}/a.txt')
  assert files == [str(tmp_path / n) for n in ('c.md', 'a.txt', 'b.txt')]
  assert text.resolve_files([str(tmp_path / 'b.txt')]) == [str(tmp_path / 'b.txt')]


@pytest.mark.parametrize('pattern', ['missing.txt', '*.nothing'])
def test_resolve_files_names_a_pattern_that_matches_nothing(tmp_path, pattern):
  write(tmp_path / 'a.txt', 'x\n')
  with pytest.raises(UsageError, match=re.escape(f"no file matches '{tmp_path}/{pattern}'")):
    text.resolve_files(f'{tmp_path}/a.txt,{tmp_path}/{pattern}')


def test_resolve_files_rejects_nothing_and_directories(tmp_path):
  with pytest.raises(UsageError, match='names no file'):
    text.resolve_files(' , ')
  with pytest.raises(UsageError, match='only directories'):
    text.resolve_files(str(tmp_path))


def test_read_documents_splits_on_blank_lines_and_file_ends(tmp_path):
  first = write(tmp_path / 'a.txt', ' Line one. \nLine two.\r\n\n \t \n\nOther doc.\n\n')
  second = write(tmp_path / 'b.txt', 'Last doc, no newline at the end')
  assert list(text.read_documents([first, second])) == [
      ['Line one.', 'Line two.'], ['Other doc.'], ['Last doc, no newline at the end']]


def test_read_documents_tolerates_a_utf8_bom(tmp_path):
  path = write(tmp_path / 'bom.txt', b'\xef\xbb\xbfcaf\xc3\xa9\n')
  assert list(text.read_documents([path])) == [['café']]


def test_read_documents_reports_bad_utf8_with_file_line_and_offset(tmp_path):
  path = write(tmp_path / 'latin.txt', b'hello\n\xff\xfeworld\n')
  with pytest.raises(UsageError) as error:
    list(text.read_documents([path]))
  message = str(error.value)
  assert path in message and 'line 2' in message and 'byte offset 6' in message
  assert 'iconv' in message and '\n' not in message


def test_read_documents_reports_a_missing_file(tmp_path):
  with pytest.raises(UsageError, match='cannot read'):
    list(text.read_documents([str(tmp_path / 'gone.txt')]))


# ----------------------------------------------------------------------------- vocab


@pytest.fixture(scope='module')
def vocab(tmp_path_factory):
  if not WIKI_VALID.exists():
    pytest.skip(f'WikiText-2 raw not found at {WIKI_VALID} (the shared/ folder beside the repo)')
  prefix = tmp_path_factory.mktemp('vocab') / 'wiki'
  return vocab_lib.train_vocab([str(WIKI_VALID)], 1000, str(prefix))


@needs_wikitext
def test_vocab_has_fixed_special_ids(vocab):
  assert vocab.size == 1000
  assert [vocab.processor.id_to_piece(i) for i in range(5)] == list(vocab_lib.SPECIAL_PIECES)
  assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (0, 1, 2, 3, 4)
  assert os.path.exists(vocab.model_path.removesuffix('.model') + '.vocab')
  assert vocab_lib.vocab_fingerprint(vocab) == hashlib.sha256(
      Path(vocab.model_path).read_bytes()).hexdigest()


@needs_wikitext
def test_special_tokens_in_text_are_not_encoded_as_specials(vocab):
  [ids] = vocab.encode(['The [MASK] token , [CLS] and [SEP] and [PAD] .'])
  assert ids and not set(ids) & {0, 2, 3, 4}


def test_reservoir_sample_is_uniform():
  rng = np.random.default_rng(0)
  trials, population, size = 2000, 100, 10
  hits = np.zeros(population)
  for _ in range(trials):
    sample = vocab_lib.reservoir_sample(range(population), size, rng)
    assert len(set(sample)) == size
    hits[sample] += 1
  # Each item is in a sample with p = 0.1: 200 expected hits, standard deviation about 13.4.
  assert np.all(np.abs(hits - trials * size / population) < 5 * math.sqrt(trials * 0.1 * 0.9))
  assert vocab_lib.reservoir_sample(range(3), size, rng) == [0, 1, 2]


@needs_wikitext
def test_training_is_deterministic_and_independent_of_output_path(tmp_path):
  # Fewer sample lines than the corpus has, so the line sampling is exercised too.
  train = lambda prefix, seed: Path(vocab_lib.train_vocab(
      [str(WIKI_TRAIN_PART)], 300, str(tmp_path / prefix), max_sentences=200,
      seed=seed).model_path).read_bytes()
  assert train('one/spm', 0) == train('two/other', 0)
  assert train('three/spm', 0) != train('four/spm', 1)


@needs_wikitext
def test_lowercase_vocab_folds_case_in_its_own_normalizer(tmp_path, vocab):
  uncased = vocab_lib.train_vocab([str(WIKI_VALID)], 1000, str(tmp_path / 'lc'), lowercase=True)
  reloaded = vocab_lib.load_vocab(uncased.model_path)  # The casing travels in the .model file.
  assert reloaded.lowercase and not vocab.lowercase
  cased_text = ['The Battle of HASTINGS', 'Ωmega Café']
  assert reloaded.encode(cased_text) == reloaded.encode([t.lower() for t in cased_text])
  assert vocab.encode(cased_text) != vocab.encode([t.lower() for t in cased_text])
  pieces = [reloaded.processor.id_to_piece(i) for i in range(5, reloaded.size)]
  assert all(p == p.lower() for p in pieces)
  # Folding case merges "The" and "the": the same number of pieces covers the text in fewer.
  lines = WIKI_VALID.read_text(encoding='utf-8').splitlines()[:2000]
  assert sum(map(len, reloaded.encode(lines))) < sum(map(len, vocab.encode(lines)))
  with pytest.raises(UsageError, match='cased vocabulary') as refused:
    vocab_lib.check_casing(vocab, lowercase=True)
  assert 'vocab_lowercase' in str(refused.value)
  vocab_lib.check_casing(reloaded, lowercase=True)
  vocab_lib.check_casing(reloaded, lowercase=False)  # An existing uncased vocabulary is kept.


@needs_wikitext
def test_too_large_vocab_names_the_largest_possible(tmp_path):
  with pytest.raises(UsageError) as error:
    vocab_lib.train_vocab([str(WIKI_TRAIN_PART)], 100_000, str(tmp_path / 'big'))
  limit = int(re.search(r'--config\.model\.vocab_size=(\d+)', str(error.value)).group(1))
  assert 1000 < limit < 100_000
  assert vocab_lib.train_vocab([str(WIKI_TRAIN_PART)], limit, str(tmp_path / 'max')).size == limit


def test_vocab_from_an_empty_corpus_is_refused(tmp_path):
  path = write(tmp_path / 'blank.txt', ' \n\n \t\n')
  with pytest.raises(UsageError, match=re.escape(f"corpus '{path}' holds no text")):
    vocab_lib.train_vocab([path], 100, str(tmp_path / 'v'))


def test_load_vocab_refuses_missing_foreign_and_broken_models(tmp_path):
  with pytest.raises(UsageError, match='does not exist'):
    vocab_lib.load_vocab(str(tmp_path / 'none.model'))
  with pytest.raises(UsageError, match='is not a sentencepiece model'):
    vocab_lib.load_vocab(write(tmp_path / 'junk.model', b'not a model'))
  lines = [f'sentence number {i} about lobsters and crabs .' for i in range(200)]
  # A model with sentencepiece's default specials: <unk>, <s>, </s>.
  spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), vocab_size=40,
                                 model_prefix=str(tmp_path / 'foreign'), hard_vocab_limit=False,
                                 minloglevel=2)
  with pytest.raises(UsageError, match=r"\['<unk>', '<s>', '</s>'.*trained with those specials"):
    vocab_lib.load_vocab(str(tmp_path / 'foreign.model'))


# ----------------------------------------------------------------------------- packing


class ScriptedRng:
  """Stands in for np.random.Generator with scripted draws, so rules can be checked exactly."""

  def __init__(self, uniforms, integers=()):
    self.uniforms, self.integers_left = list(uniforms), list(integers)

  def random(self):
    return self.uniforms.pop(0)

  def integers(self, low, high):
    value = self.integers_left.pop(0)
    assert low <= value < high
    return value

  def exhausted(self):
    return not self.uniforms and not self.integers_left


def pairs_of(documents, max_seq_length, rng):
  return [(p.first, p.second, p.target_length, p.single_segment)
          for p in packing.segment_pairs(documents, max_seq_length, rng)]


def test_line_that_fills_segment_a_sends_the_rest_to_b_truncated():
  # L=16: first target (16-3)//2 = 6. A's first line already reaches 6, so no coin is drawn.
  doc = [[10] * 6, [20] * 5, [30] * 9]  # 20 tokens >= 16: one example when the third is added.
  rng = ScriptedRng([0.5, 0.9])  # Not single-segment; next target stays L.
  assert pairs_of([doc], 16, rng) == [([10] * 6, [20] * 5 + [30] * 2, 16, False)]
  assert rng.exhausted()
  example = packing.pack_examples([doc], 16, CLS, SEP, seed=0)
  assert example['input_ids'].dtype == np.int32 and example['input_ids'].shape == (1, 16)


def test_single_segment_draw_lets_a_take_every_line():
  doc = [[10] * 6, [20] * 5, [30] * 9]
  rng = ScriptedRng([0.05, 0.9])
  assert pairs_of([doc], 16, rng) == [([10] * 6 + [20] * 5 + [30] * 3, [], 16, True)]
  assert rng.exhausted()


@pytest.mark.parametrize('coin, first, second', [
    (0.3, [10] * 4 + [20] * 5, [30] * 4),   # Heads: the overshooting line joins A.
    (0.7, [10] * 4, [20] * 5 + [30] * 4),   # Tails: it starts B. B is cut to 16 - len(A) - 3.
])
def test_coin_decides_a_line_that_would_overshoot_a(coin, first, second):
  doc = [[10] * 4, [20] * 5, [30] * 9]
  rng = ScriptedRng([0.5, coin, 0.9])  # Only one coin: after it, A is full or B has begun.
  assert pairs_of([doc], 16, rng) == [(first, second, 16, False)]
  assert rng.exhausted()


def test_short_line_after_b_started_still_joins_a_as_in_the_original():
  # 14 tokens < 16, so the example is emitted at the end of the document.
  doc = [[10] * 3, [20] * 9, [40] * 2]
  rng = ScriptedRng([0.5, 0.7, 0.9])  # Tails sends the 9-token line to B; 3+2 < 6 fits A.
  assert pairs_of([doc], 16, rng) == [([10] * 3 + [40] * 2, [20] * 8, 16, False)]
  assert rng.exhausted()


def test_short_target_applies_to_the_next_example_and_empty_lines_are_skipped():
  docs = [[[10] * 16], [[], [1] * 3, [2] * 3, [3] * 3, [4] * 2]]
  # Example 1: not single; next target short (0.01 < 0.05), length 7.
  # Example 2 (target 7, first target 2) is emitted at 9 tokens; the [4, 4] line forms example 3.
  rng = ScriptedRng([0.5, 0.01, 0.5, 0.9, 0.5, 0.9], integers=[7])
  assert pairs_of(docs, 16, rng) == [
      ([10] * 14, [], 16, False), ([1] * 3, [2] * 3 + [3] * 3, 7, False), ([4] * 2, [], 16, False)]
  assert rng.exhausted()


def test_pack_examples_lays_out_segments():
  # The first draw decides single-segment (< 0.1); seed 0's is not, and no coin is needed.
  assert np.random.default_rng(0).random() >= 0.1
  rows = packing.pack_examples([[[7] * 6, [8] * 5, [9] * 9], [[6] * 3]], 16, CLS, SEP, seed=0)
  assert rows['input_ids'].tolist() == [
      [CLS] + [7] * 6 + [SEP] + [8] * 5 + [9] * 2 + [SEP],
      [CLS] + [6] * 3 + [SEP] + [0] * 11]
  assert rows['segment_ids'].tolist() == [[0] * 8 + [1] * 8, [0] * 16]


def test_pack_examples_refuses_bad_input():
  with pytest.raises(UsageError, match='no examples'):
    packing.pack_examples([[[], []]], 16, CLS, SEP, seed=0)
  with pytest.raises(UsageError, match='max_seq_length'):
    packing.pack_examples([[[5]]], 4, CLS, SEP, seed=0)


@pytest.fixture(scope='module')
def valid_documents(vocab):
  return [vocab.encode(document) for document in text.read_documents([str(WIKI_VALID)])]


def assert_well_formed(input_ids, segment_ids):
  for ids, segments in zip(input_ids.tolist(), segment_ids.tolist()):
    length = len(ids) - ids[::-1].index(SEP)  # Everything after the last [SEP] is padding.
    assert ids[0] == CLS and not any(ids[length:]) and not any(segments[length:])
    body = ids[:length]
    assert 0 not in body and body.count(CLS) == 1
    seps = [i for i, t in enumerate(body) if t == SEP]
    assert len(seps) in (1, 2) and seps[-1] == length - 1 and seps[0] > 1
    first_len = seps[0] + 1
    assert segments[:first_len] == [0] * first_len
    assert segments[first_len:length] == [1] * (length - first_len)
    if len(seps) == 2:
      assert seps[1] > seps[0] + 1  # A non-empty B.


@needs_wikitext
def test_packing_wikitext_follows_the_electra_statistics(valid_documents):
  max_seq_length = 128
  pairs = list(packing.segment_pairs(valid_documents, max_seq_length, np.random.default_rng(0)))
  n = len(pairs)
  assert all(len(p.first) + len(p.second) + 2 + bool(p.second) <= max_seq_length for p in pairs)
  assert all(not p.second for p in pairs if p.single_segment)
  # Each proportion is a mean of n independent draws; 4 standard errors bound it loosely.
  full = [p for p in pairs if p.target_length == max_seq_length]
  single_share = np.mean([p.single_segment for p in full])
  assert abs(single_share - 0.1) < 4 * math.sqrt(0.1 * 0.9 / len(full))
  short_share = np.mean([p.target_length < max_seq_length for p in pairs])
  assert abs(short_share - 0.05) < 4 * math.sqrt(0.05 * 0.95 / n)
  assert all(5 <= p.target_length <= max_seq_length for p in pairs)

  examples = packing.pack_examples(valid_documents, max_seq_length, CLS, SEP, seed=0)
  assert examples['input_ids'].shape == (n, max_seq_length)
  assert_well_formed(examples['input_ids'], examples['segment_ids'])
  corpus_tokens = sum(len(line) for document in valid_documents for line in document)
  content = examples['input_ids'][~np.isin(examples['input_ids'], [0, CLS, SEP])]
  assert 0 < content.size <= corpus_tokens
  assert content.size == sum(len(p.first) + len(p.second) for p in pairs)


@needs_wikitext
def test_packing_is_a_function_of_the_seed(valid_documents):
  pack = lambda seed: packing.pack_examples(valid_documents[:300], 128, CLS, SEP, seed)
  first, again, other = pack(0), pack(0), pack(1)
  np.testing.assert_array_equal(first['input_ids'], again['input_ids'])
  np.testing.assert_array_equal(first['segment_ids'], again['segment_ids'])
  assert (first['input_ids'].shape != other['input_ids'].shape or
          not np.array_equal(first['segment_ids'], other['segment_ids']))


# ----------------------------------------------------------------------------- pipeline


def stream(num_examples, seed, num_epochs):
  """The example stream by its definition: epoch permutations back to back."""
  return np.concatenate([np.random.default_rng([seed, e]).permutation(num_examples)
                         for e in range(num_epochs)])


@pytest.mark.parametrize('num_examples, batch_size', [(24, 8), (10, 4), (3, 8), (1, 5)])
def test_batch_indices_follow_the_epoch_stream(num_examples, batch_size):
  steps = 6
  expected = stream(num_examples, seed=7, num_epochs=steps * batch_size // num_examples + 1)
  inputs._epoch_permutation.cache_clear()
  for step in reversed(range(steps)):  # Any order, as after a restart: each step stands alone.
    indices = inputs.batch_indices(num_examples, batch_size, 7, step)
    assert indices.dtype == np.int64 and indices.shape == (batch_size,)
    np.testing.assert_array_equal(indices, expected[step * batch_size:(step + 1) * batch_size])


def test_each_epoch_of_batches_covers_every_example_once():
  n, b = 24, 8
  epoch = lambda e: np.concatenate([inputs.batch_indices(n, b, 3, s)
                                    for s in range(e * n // b, (e + 1) * n // b)])
  assert sorted(epoch(0)) == sorted(epoch(1)) == list(range(n))
  assert not np.array_equal(epoch(0), epoch(1))
  assert not np.array_equal(inputs.batch_indices(n, b, 3, 0), inputs.batch_indices(n, b, 4, 0))
  np.testing.assert_array_equal(inputs.batch_indices(n, b, 3, 2),
                                inputs.batch_indices(n, b, 3, 2))


def fake_examples(n, length=4):
  ids = np.arange(n * length, dtype=np.int32).reshape(n, length)
  return {'input_ids': ids, 'segment_ids': ids % 2}


def test_local_batches_of_all_processes_make_the_global_batch():
  examples = fake_examples(10)
  whole = inputs.local_batch(examples, 8, seed=1, step=3)
  assert whole['input_ids'].shape == (8, 4) and whole['input_ids'].dtype == np.int32
  for processes in (2, 4, 8):
    shares = [inputs.local_batch(examples, 8, 1, 3, p, processes) for p in range(processes)]
    for key in ('input_ids', 'segment_ids'):
      np.testing.assert_array_equal(np.concatenate([s[key] for s in shares]), whole[key])
  with pytest.raises(UsageError, match='not divisible'):
    inputs.local_batch(examples, 6, 1, 0, 0, 4)


def test_eval_batches_are_fixed_and_wrap_around():
  examples = fake_examples(5)
  batches = list(inputs.eval_batches(examples, 4, 3))
  assert len(batches) == 3
  rows = np.concatenate([b['input_ids'] for b in batches])
  np.testing.assert_array_equal(rows, examples['input_ids'][np.arange(12) % 5])
  halves = [list(inputs.eval_batches(examples, 4, 3, p, 2)) for p in range(2)]
  for step in range(3):
    np.testing.assert_array_equal(
        np.concatenate([halves[0][step]['input_ids'], halves[1][step]['input_ids']]),
        batches[step]['input_ids'])
