"""word_pairs.py: which pairs it keeps, and its similarities on tables of known shape."""

import numpy as np

from electra_jax.data import vocab as vocab_lib
from research.transfer_study import word_pairs


def small_vocab(tmp_path):
  """A vocabulary that has seen most of the listed words often and 'frequently' never."""
  words = sorted({w for pair in word_pairs.OPPOSITES + word_pairs.SYNONYMS for w in pair}
                 - {'frequently'})
  sentences = [f'the {a} and the {b} were here .' for a in words for b in words[::7]]
  return vocab_lib.train_vocab_on_sentences(sentences, 68, str(tmp_path / 'v'), 'test',
                                            model_type='word')


def test_only_pairs_of_whole_words_are_kept(tmp_path):
  vocab = small_vocab(tmp_path)
  kept = word_pairs.whole_words(word_pairs.SYNONYMS, vocab)
  names = [(a, b) for a, b, *_ in kept]
  assert ('often', 'frequently') not in names and ('big', 'large') in names
  known = lambda w: vocab.processor.piece_to_id('▁' + w) != vocab.unk_id
  assert names == [(a, b) for a, b in word_pairs.SYNONYMS if known(a) and known(b)]
  assert len(names) >= len(word_pairs.SYNONYMS) - 3
  for a, b, i, j in kept:
    assert vocab.processor.id_to_piece(int(i)) == '▁' + a
    assert vocab.processor.id_to_piece(int(j)) == '▁' + b


def test_similarity_ignores_the_shared_direction_and_finds_planted_pairs(tmp_path):
  vocab = small_vocab(tmp_path)
  rng = np.random.default_rng(1)
  table = rng.normal(size=(vocab.size, 16))
  pairs = word_pairs.whole_words(word_pairs.OPPOSITES, vocab)
  for _, _, i, j in pairs:  # every opposite the same vector as its partner
    table[j] = table[i]
  shifted = table + 50 * rng.normal(size=16)  # one direction every word shares
  found = word_pairs.similarities(shifted, vocab)
  np.testing.assert_allclose(list(found['opposites']['pairs'].values()), 1.0, atol=1e-3)
  np.testing.assert_allclose(found['opposites']['mean'], 1.0, atol=1e-3)
  # Independent rows: about 0 on average, spread about 1/sqrt(width).
  assert abs(found['random']['mean']) < 0.03 and 0.2 < found['random']['sd'] < 0.3
  assert abs(found['synonyms']['mean']) < 0.3
  np.testing.assert_allclose(word_pairs.cosines(shifted, pairs),
                             word_pairs.cosines(table, pairs), atol=1e-3)
