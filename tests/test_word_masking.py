"""config.masking: whole words and SpanBERT's spans, on real text (WikiText-2) in both kinds of
vocabulary the runs take, against references built from the text itself rather than from the
vocabulary's marks.

Whole-word and span masking run in the compiled step like token masking: a step's masks are a
function of its key alone, which is what makes a resumed run exact (tests/test_faults.py kills
one mid-run, tests/test_every_switch.py runs each objective through the trainer).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from electra_jax import objective
from electra_jax.common.errors import UsageError
from electra_jax.data import vocab as vocab_lib
from electra_jax.objective import masking
from electra_jax.common import config as config_lib
from conftest import load_config

LENGTH = 128
SEQUENCES = 256


@pytest.fixture(scope='module')
def sentencepiece_vocab(wikitext, tmp_path_factory):
  prefix = tmp_path_factory.mktemp('word_masking') / 'sp'
  return vocab_lib.train_vocab([str(wikitext / 'wiki.valid.raw')], 2000, str(prefix),
                               max_sentences=20000)


@pytest.fixture(scope='module')
def wordpiece_vocab(wikitext, tmp_path_factory):
  """A WordPiece vocabulary from WikiText's own words: the 1,500 most frequent (lowercased), and
  every letter and the 100 most frequent word endings as '##' continuations, so that real
  words split into several pieces."""
  words = [w.lower() for line in open(wikitext / 'wiki.valid.raw', encoding='utf-8')
           for w in line.split() if w.isalpha()]
  counts = {}
  for w in words:
    counts[w] = counts.get(w, 0) + 1
  common = sorted(counts, key=lambda w: -counts[w])[:1500]
  endings = {}
  for w in words:
    for k in (2, 3, 4):
      if len(w) > k + 2:
        endings[w[-k:]] = endings.get(w[-k:], 0) + 1
  suffixes = sorted(endings, key=lambda s: -endings[s])[:100]
  letters = sorted({c for w in common for c in w})
  pieces = list(vocab_lib.SPECIAL_PIECES) + sorted(set(common) | set(letters) | set('.,;:()"\'-@'))
  pieces += [f'##{s}' for s in suffixes] + [f'##{c}' for c in letters]
  path = tmp_path_factory.mktemp('word_masking_wp') / 'vocab.txt'
  path.write_text('\n'.join(pieces) + '\n', encoding='utf-8')
  return vocab_lib.load_wordpiece(str(path))


def packed(vocab, wikitext, lines=SEQUENCES):
  """[SEQUENCES, LENGTH] ids of WikiText test lines as [CLS] text [SEP] [PAD]..., a third of them
  cut short at a random length, and each token's character span in its line."""
  text = [l.strip() for l in open(wikitext / 'wiki.test.raw', encoding='utf-8')
          if len(l.strip()) > 300][:lines]
  rng = np.random.default_rng(0)
  ids = np.zeros((len(text), LENGTH), np.int32)
  spans = []
  for row, (tokens, offsets) in enumerate(vocab.encode_with_offsets(text)):
    n = min(len(tokens), LENGTH - 2)
    if row % 3 == 0:
      n = min(n, int(rng.integers(8, LENGTH - 2)))
    ids[row, 0], ids[row, 1:n + 1], ids[row, n + 1] = vocab.cls_id, tokens[:n], vocab.sep_id
    spans.append(offsets[:n])
  return ids, text, spans


def whitespace_words(text, spans):
  """The reference: [SEQUENCES, LENGTH] word numbers where a word is a run of tokens with no
  whitespace between or at the start of them in the line itself; -1 outside the text."""
  words = -np.ones((len(text), LENGTH), np.int64)
  for row, (line, offsets) in enumerate(zip(text, spans)):
    word, end = -1, None
    for i, (start, stop) in enumerate(offsets):
      gap = line[end:start] if end is not None else ' '
      if any(c.isspace() for c in gap) or (stop > start and line[start].isspace()):
        word += 1
      words[row, i + 1], end = word, max(stop, end or 0)
  return words


def pretokenized_words(vocab, text, spans):
  """WordPiece's reference: the words BERT's pre-tokenizer cuts the line into (whitespace and
  punctuation) on the raw line, each token numbered by the one its characters fall in; as
  BERT's normalizer does, every CJK ideograph is a word of its own."""
  pre = vocab.tokenizer.pre_tokenizer
  words = -np.ones((len(text), LENGTH), np.int64)
  for row, (line, offsets) in enumerate(zip(text, spans)):
    bounds = [b for _, b in pre.pre_tokenize_str(line)]  # offsets into the line, as the tokens'

    for i, (start, _) in enumerate(offsets):
      cjk = 0x3400 <= ord(line[start]) <= 0x9FFF or 0xF900 <= ord(line[start]) <= 0xFAFF
      words[row, i + 1] = LENGTH * len(bounds) + i if cjk else next(
          k for k, (a, b) in enumerate(bounds) if a <= start < b)
  return words


def special_of(vocab):
  return masking.SpecialIds(vocab.pad_id, vocab.cls_id, vocab.sep_id, vocab.mask_id,
                            vocab.unk_id, vocab_lib.word_starts(vocab))


def same_partition(ours, reference):
  """Whether each sequence's tokens fall into the same words (numbers may differ by a shift)."""
  for a, b in zip(ours, reference):
    inside = b >= 0
    a, b = a[inside], b[inside]
    if not np.array_equal(a[1:] == a[:-1], b[1:] == b[:-1]):
      return False
  return True


def test_words_are_the_texts_own_in_both_kinds_of_vocabulary(sentencepiece_vocab,
                                                               wordpiece_vocab, wikitext):
  ids, text, spans = packed(sentencepiece_vocab, wikitext)
  ours = np.asarray(masking.word_numbers(jnp.asarray(ids), special_of(sentencepiece_vocab)))
  assert same_partition(ours, whitespace_words(text, spans))
  assert np.all(ours[ids == 0] == -1) and np.all(ours[:, 0] == -1)  # [PAD], [CLS]: no word
  assert np.all(ours[ids == sentencepiece_vocab.sep_id] == -1)

  ids, text, spans = packed(wordpiece_vocab, wikitext)
  ours = np.asarray(masking.word_numbers(jnp.asarray(ids), special_of(wordpiece_vocab)))
  reference = pretokenized_words(wordpiece_vocab, text, spans)
  assert same_partition(ours, reference)
  # The vocabulary does split words here: the test would not tell token from word otherwise.
  continued = np.isin(ids, [i for i, p in enumerate(wordpiece_vocab.pieces) if p.startswith('##')])
  assert continued.mean() > 0.05


@pytest.fixture(scope='module', params=['sentencepiece', 'wordpiece'])
def batch(request, sentencepiece_vocab, wordpiece_vocab, wikitext):
  vocab = sentencepiece_vocab if request.param == 'sentencepiece' else wordpiece_vocab
  ids, _, _ = packed(vocab, wikitext)
  return jnp.asarray(ids), special_of(vocab)


_SELECT = {}


def select(selection, special, mask_prob=0.15):
  key = (selection, special, mask_prob)
  if key not in _SELECT:  # one compiled program per setting
    _SELECT[key] = jax.jit(lambda rng, ids: masking.select_positions(rng, ids, mask_prob, special,
                                                                    selection))
  return _SELECT[key]


@pytest.mark.parametrize('selection', ['whole_word', 'span'])
def test_whole_words_only_never_specials_and_the_budget_of_token_masking(batch, selection):
  """Over 20 batches: every selected word is selected whole, only candidates are selected, no
  sequence exceeds token masking's count, and the selected share is mask_prob's: within 0.5% of
  token masking's count (a sequence falls short only when no remaining word fits its rest) and
  within 0.002 of 0.15 of the tokens."""
  ids, special = batch
  words = np.asarray(masking.word_numbers(ids, special))
  ids_np = np.asarray(ids)
  candidates = np.asarray(masking.candidates(ids, special))
  num_tokens = (ids_np != 0).sum(1)
  budget = np.clip(np.round(num_tokens * 0.15), 1, masking.num_slots(LENGTH, 0.15))
  selected_total = tokens_total = budget_total = 0
  for step in range(20):
    masked = select(selection, special)(jax.random.key(step), ids)
    weights, positions = np.asarray(masked.weights) > 0, np.asarray(masked.positions)
    for row in range(ids_np.shape[0]):
      chosen = positions[row][weights[row]]
      assert len(set(chosen.tolist())) == len(chosen)
      assert candidates[row, chosen].all()
      for word in set(words[row, chosen].tolist()):
        assert set(np.nonzero(words[row] == word)[0]) <= set(chosen.tolist()), (row, word)
    per_sequence = weights.sum(1)
    assert np.all(per_sequence <= budget)
    selected_total += per_sequence.sum()
    tokens_total += num_tokens.sum()
    budget_total += budget.sum()
  assert selected_total / budget_total > 0.995
  assert abs(selected_total / tokens_total - 0.15) < 0.002
  np.testing.assert_array_equal(np.asarray(masked.targets)[weights],
                                np.take_along_axis(ids_np, positions, 1)[weights])


def test_span_lengths_are_geometric_clipped_at_ten():
  """200,000 draws against P(k) = 0.2 * 0.8^(k-1), P(10) = 0.8^9: chi-square below 27.9 (9
  degrees of freedom, p = 0.001)."""
  drawn = np.asarray(masking.span_lengths(jax.random.key(0), (200_000,)))
  assert drawn.min() == 1 and drawn.max() == 10
  pmf = np.array([0.2 * 0.8 ** (k - 1) for k in range(1, 10)] + [0.8 ** 9])
  observed = np.bincount(drawn, minlength=11)[1:]
  expected = pmf * len(drawn)
  assert np.sum((observed - expected) ** 2 / expected) < 27.9


def test_masked_spans_on_real_text_follow_the_distribution(sentencepiece_vocab, wikitext):
  """Runs of consecutive selected words in 512-token sequences: the shares of runs of 2, 3 and 4
  words are the distribution's within 0.02 (merged neighbours lengthen a few runs, the budget
  cuts the last span of a sequence)."""
  flat = [t for line in open(wikitext / 'wiki.test.raw', encoding='utf-8') if line.strip()
          for t in sentencepiece_vocab.encode([line.strip()])[0]]
  rows, length = 32, 512
  ids = np.zeros((rows, length), np.int32)
  for row in range(rows):
    ids[row, 0], ids[row, -1] = 2, 3
    ids[row, 1:-1] = flat[row * (length - 2):(row + 1) * (length - 2)]
  special = special_of(sentencepiece_vocab)
  words = np.asarray(masking.word_numbers(jnp.asarray(ids), special))
  runs = []
  for step in range(8):
    masked = select('span', special)(jax.random.key(step), jnp.asarray(ids))
    weights, positions = np.asarray(masked.weights) > 0, np.asarray(masked.positions)
    for row in range(rows):
      chosen = sorted(set(words[row, positions[row][weights[row]]].tolist()))
      run = 1
      for a, b in zip(chosen, chosen[1:]):
        if b == a + 1:
          run += 1
        else:
          runs.append(run)
          run = 1
      runs.append(run)
  shares = np.bincount(runs, minlength=11) / len(runs)
  for k, expected in ((2, 0.16), (3, 0.128), (4, 0.1024)):
    assert abs(shares[k] - expected) < 0.02, (k, shares[k])


def test_masks_are_a_function_of_the_key_alone(batch):
  ids, special = batch
  for selection in ('whole_word', 'span'):
    a = select(selection, special)(jax.random.key(7), ids)
    b = select(selection, special)(jax.random.key(7), ids)
    c = select(selection, special)(jax.random.key(8), ids)
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.positions, c.positions)


def test_token_masking_draws_what_it_drew_before(batch):
  """The default is unchanged: the same key selects the same positions with or without the
  vocabulary's word starts at hand."""
  ids, special = batch
  plain = masking.SpecialIds(special.pad, special.cls, special.sep, special.mask, special.unk)
  a = masking.select_positions(jax.random.key(3), ids, 0.15, special)
  b = masking.select_positions(jax.random.key(3), ids, 0.15, plain)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize('name', ['electra', 'mlm', 'electra_15', 'replace_mlm',
                                  'all_tokens_mlm', 'electric', 'unigram'])
def test_every_objective_masks_whole_words(batch, name):
  ids, special = batch
  config = load_config('tiny')
  config.update(objective='electra' if name == 'unigram' else name, masking='span')
  if name == 'unigram':
    config.generator_kind = 'unigram'
  prepared = objective.prepare(jax.random.key(0), ids, config, special)
  words = np.asarray(masking.word_numbers(ids, special))
  weights = np.asarray(prepared.masked.weights) > 0
  positions = np.asarray(prepared.masked.positions)
  assert weights.sum() > 0.9 * 0.15 * np.sum(np.asarray(ids) != 0)
  for row in range(0, ids.shape[0], 7):
    chosen = set(positions[row][weights[row]].tolist())
    for word in set(words[row, list(chosen)].tolist()):
      assert set(np.nonzero(words[row] == word)[0]) <= chosen


def test_an_unknown_masking_is_refused_by_name():
  config = load_config('tiny')
  config.data.train_files = 'x.txt'
  config.masking = 'words'
  with pytest.raises(UsageError, match=r"config.masking='words': use one of token, whole_word, "
                                       r'span'):
    config_lib.validate(config, 1)
