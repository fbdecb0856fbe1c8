"""count_vectors.py: its counts against a loop over every pair, its PPMI against the
formula in float64, its table's shape of meaning on a planted corpus, and the command end to end
on real text (the table it writes is what word_table.py reads: test_word_table)."""

import json

import numpy as np
import pytest

from conftest import SHARED_DATA, load_config, real_file
from research.transfer_study import count_vectors, word_table

SPECIALS = [0, 1, 2, 3, 4]


def test_cooccurrence_counts_every_pair_within_the_window_once_each_way():
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 12, (7, 9))
  counts = count_vectors.cooccurrence(ids, 12, 3, SPECIALS)
  expected = np.zeros((12, 12), np.int64)
  for row in ids:
    for i in range(len(row)):
      for j in range(len(row)):
        if i != j and abs(i - j) <= 3 and row[i] >= 5 and row[j] >= 5:
          expected[row[i], row[j]] += 1
  np.testing.assert_array_equal(counts.toarray(), expected)
  assert counts[:5].sum() == 0 and counts[:, :5].sum() == 0


def test_ppmi_is_the_smoothed_formula_in_float64():
  counts = np.array([[0, 4, 1], [4, 2, 0], [1, 0, 6]])
  words, contexts = counts.sum(1), counts.sum(0) ** 0.75
  expected = np.zeros((3, 3))
  for i in range(3):
    for j in range(3):
      if counts[i, j]:
        pmi = np.log(counts[i, j] / words[i] / (contexts[j] / contexts.sum()))
        expected[i, j] = max(pmi, 0.0)
  np.testing.assert_allclose(count_vectors.ppmi(counts).toarray(), expected, rtol=1e-12)
  assert (count_vectors.ppmi(counts).data > 0).all()  # only positive values are stored


def test_count_table_is_the_dense_svd_of_the_ppmi_matrix():
  """The sparse top-k SVD against numpy's full SVD of the dense PPMI matrix in float64, on a
  corpus with a Zipf-like spread of pieces: the same table once each column's sign is fixed."""
  rng = np.random.default_rng(2)
  ids = np.minimum(rng.zipf(1.3, (300, 24)) + 4, 199)
  counts = count_vectors.cooccurrence(ids, 200, 3, SPECIALS)
  table = count_vectors.count_table(counts, 8)
  u, s, _ = np.linalg.svd(count_vectors.ppmi(counts).toarray())
  dense = u[:, :8] * np.sqrt(s[:8])
  dense *= np.sign(dense[np.abs(dense).argmax(0), np.arange(8)])
  counted = counts.toarray().sum(1) > 0
  rows = dense[counted] - dense[counted].mean(0)
  np.testing.assert_allclose(table[counted], rows * (count_vectors.TABLE_RMS / rows.std()),
                             rtol=1e-4, atol=1e-7)
  assert not table[~counted].any() and (~counted).sum() > 5


def test_count_table_puts_pieces_of_the_same_contexts_together():
  """Two planted topics: pieces 5-12 only ever stand beside each other, 13-20 likewise; the
  table groups them, leaves the specials and never-seen pieces (21-23) at zero, and sits at
  the word table's initial scale."""
  rng = np.random.default_rng(1)
  rows = [rng.integers(5, 13, 16) for _ in range(200)] + [rng.integers(13, 21, 16)
                                                          for _ in range(200)]
  rows = np.stack([np.concatenate([[2], r, [3, 0, 0]]) for r in rows])
  table = count_vectors.count_table(count_vectors.cooccurrence(rows, 24, 2, SPECIALS), 4)
  assert table.shape == (24, 4) and table.dtype == np.float32
  assert not table[:5].any() and not table[21:].any()
  counted = table[5:21]
  np.testing.assert_allclose(counted.mean(0), 0, atol=1e-8)
  np.testing.assert_allclose(counted.std(), count_vectors.TABLE_RMS, rtol=1e-5)
  unit = counted / np.linalg.norm(counted, axis=1, keepdims=True)
  cosine = unit @ unit.T
  same = np.equal.outer(np.arange(16) < 8, np.arange(16) < 8)
  assert cosine[same].mean() > 0.7 and cosine[~same].max() < 0
  shuffled = count_vectors.shuffled(table)
  assert not shuffled[:5].any() and not shuffled[21:].any()
  assert sorted(map(tuple, shuffled[5:21])) == sorted(map(tuple, counted))
  assert not np.array_equal(shuffled, table)


def test_the_command_probes_and_writes_a_table_fine_tuning_reads(tmp_path, wikitext):
  # pylint: disable=g-import-not-at-top
  from electra_jax.data import preparation
  real_file(SHARED_DATA / 'glue' / 'SST-2' / 'dev.tsv')
  config = load_config('tiny')
  config.max_seq_length = 32
  config.model.vocab_size = 1000
  config.data.update(train_files=str(wikitext / 'wiki.valid.raw'),
                     eval_files=str(wikitext / 'wiki.test.raw'), prepare_workers=1)
  preparation.prepare_dataset(config, str(tmp_path / 'data'))
  out = tmp_path / 'out'
  count_vectors.main([f'--data={tmp_path / "data"}', f'--out={out}', '--dim=16',
                      '--fractions=0.5,1', '--examples=400',
                      f'--data_dir={SHARED_DATA / "glue"}'])
  probes = json.loads((out / 'probes.json').read_text())['probes']
  assert list(probes) == ['pieces', 'random', 'count 0.5', 'count 1']
  assert all(0 <= p['accuracy'] <= 1 for p in probes.values())
  assert probes['count 0.5']['tokens'] < probes['count 1']['tokens']
  table = np.load(out / 'table.npy')
  assert table.shape == (1000, 16) and not table[:5].any()
  model = config.model.copy_and_resolve_references()
  model.embedding_size = 16
  np.testing.assert_array_equal(word_table.load_table(str(out / 'table.npy'), model), table)
  with pytest.raises(count_vectors.UsageError, match=r'--dim=1000: .* in \[1, 1000\)'):
    count_vectors.main([f'--data={tmp_path / "data"}', f'--out={out}', '--dim=1000'])
  with pytest.raises(count_vectors.UsageError, match='holds no vocab.model or vocab.txt'):
    count_vectors.main([f'--data={tmp_path}', f'--out={out}'])


def test_fractions_are_shares_and_always_include_the_whole_corpus():
  assert count_vectors.parse_fractions('0.25,0.0625') == [0.0625, 0.25, 1.0]
  assert count_vectors.parse_fractions('1') == [1.0]
  for bad in ('0,0.5', '1.5', 'half'):
    with pytest.raises(count_vectors.UsageError, match='--fractions'):
      count_vectors.parse_fractions(bad)
