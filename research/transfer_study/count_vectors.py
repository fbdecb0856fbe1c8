"""Word vectors counted from a prepared corpus: what the text itself says about words.

python -m research.transfer_study.count_vectors --data=DIR/data --out=OUT [--dim=64] [--window=5] \
    [--fractions=0.015625,0.0625,0.25,1] [--run=RUN ...] [--task=SST-2 --examples=8000]

In the training split of a prepared corpus (`python -m electra_jax.prepare`'s --out, or the
transfer study's DIR/data), every two pieces at most --window positions apart in one example are
counted; the counts become positive pointwise mutual information (context counts raised to the
power 0.75), and a truncated SVD of that matrix gives each piece a --dim-wide vector. This is
the classic count model of distributional meaning: no training, every co-occurrence of the
corpus seen at once.

Why: when a pretrained word table holds nothing a task can use, the question is whether the
text did not hold it, or pretraining did not find it. The script answers with two numbers:
  * probes: a logistic regression (linear_probe.py's) on the mean of a table's rows
    over each sentence's pieces, fitted on --examples training sentences of a GLUE task and
    scored on dev. Tables probed: the bag of pieces itself (one row per piece, the most a
    word-level reader can get from these labels), a random table, the count table from each
    --fractions share of the corpus (how the signal grows with text), and each --run's
    pretrained word table (the discriminator's view), all on the corpus's vocabulary;
  * fine-tuning: OUT/table.npy, the full corpus's count table at the word table's initial scale
    (rows centred, RMS 0.02; zero rows for the special pieces and for pieces never counted), is
    what `python -m research.transfer_study.word_table --table=OUT/table.npy` puts in place of
    the drawn word table, and OUT/shuffled_table.npy the same rows dealt to other pieces (same
    scale and spectrum, no word knowledge): the control.
Prints each probe and writes OUT/probes.json.
"""

import argparse
import json
import os

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from electra_jax.common.errors import UsageError
from electra_jax.data import store, vocab as vocab_lib
from electra_jax.finetune import init
from electra_jax.finetune.glue import features
from research.transfer_study import REPO, linear_probe

TABLE_RMS = 0.02   # the word table's initial scale (model init's normal(0.02))
CONTEXT_POWER = 0.75  # smooths the context distribution, so rare contexts do not dominate PMI
CHUNK = 4096       # examples gathered at a time
PROBE_LENGTH = 128  # the task's sentences are cut to this many pieces, as linear_probe.py's
# The counts and the PPMI matrix are sparse (most pairs of pieces never meet within a window) and
# only the top --dim singular vectors are computed (ARPACK), so 16,384 and 32,768 pieces take
# minutes where a dense [V, V] matrix and its full SVD would take gigabytes and hours.


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.count_vectors',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--data', required=True,
                      help='a prepared data directory (its train/ split and vocabulary)')
  parser.add_argument('--out', required=True, help='directory for the tables and probes.json')
  parser.add_argument('--dim', type=int, default=64, help='width of the count vectors')
  parser.add_argument('--window', type=int, default=5, help='positions counted on each side')
  parser.add_argument('--fractions', default='0.015625,0.0625,0.25,1',
                      help='shares of the training examples (a fixed draw) to count, each '
                      'probed; the whole corpus (1) is always among them')
  parser.add_argument('--run', action='append', default=[],
                      help='a pretraining workdir on the same vocabulary whose word table is '
                      'probed as well (repeat for several)')
  parser.add_argument('--task', default='SST-2', help='a binary GLUE task to probe with')
  parser.add_argument('--data_dir', default=os.path.join(os.path.dirname(REPO), 'shared',
                                                         'data', 'glue'))
  parser.add_argument('--examples', type=int, default=8000,
                      help='training examples the probes are fitted on (a fixed draw)')
  return parser.parse_args(argv)


def special_ids(vocab) -> list[int]:
  return [vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id]


def cooccurrence(ids: np.ndarray, vocab_size: int, window: int,
                 skipped: list[int]) -> scipy.sparse.csr_array:
  """[V, V] sparse int64: how often pieces i and j stand at most `window` positions apart in one
  row of `ids` ([N, L]), both ways round; pairs with a `skipped` piece (specials, padding) are
  not counted."""
  counted = np.ones(vocab_size, bool)
  counted[skipped] = False
  ids = np.asarray(ids, np.int64)
  counts = scipy.sparse.csr_array((vocab_size, vocab_size), dtype=np.int64)
  for offset in range(1, window + 1):
    left, right = ids[:, :-offset].ravel(), ids[:, offset:].ravel()
    keep = counted[left] & counted[right]
    # COO to CSR sums the duplicate (left, right) entries: the pair's count at this offset.
    pairs = scipy.sparse.coo_array((np.ones(int(keep.sum()), np.int64),
                                    (left[keep], right[keep])),
                                   shape=(vocab_size, vocab_size)).tocsr()
    counts = counts + pairs + pairs.T  # right-then-left is the transpose
  return counts.tocsr()


def ppmi(counts) -> scipy.sparse.csr_array:
  """Positive PMI of a [V, V] count matrix (dense or sparse), contexts smoothed by
  CONTEXT_POWER, as a sparse float64 matrix: stored only where a pair was counted and its PMI
  is positive."""
  counts = scipy.sparse.coo_array(counts, dtype=np.float64)
  counts.sum_duplicates()
  counts.eliminate_zeros()
  words = np.asarray(counts.sum(1)).ravel()
  contexts = np.asarray(counts.sum(0)).ravel() ** CONTEXT_POWER
  pmi = np.log(counts.data * contexts.sum() / (words[counts.row] * contexts[counts.col]))
  keep = pmi > 0
  return scipy.sparse.coo_array((pmi[keep], (counts.row[keep], counts.col[keep])),
                                shape=counts.shape).tocsr()


def count_table(counts, dim: int) -> np.ndarray:
  """[V, dim] float32: U sqrt(S) of the PPMI matrix's top `dim` singular triples, the counted
  pieces' rows centred and scaled to TABLE_RMS; rows of pieces never counted are zero.

  A singular vector's sign is arbitrary (solvers differ); each column is turned so that its
  entry of largest magnitude is positive, so the table does not depend on the solver's choice.
  """
  matrix = ppmi(counts)
  u, s, _ = scipy.sparse.linalg.svds(matrix, k=dim, random_state=0)
  order = np.argsort(s)[::-1]  # svds returns them in ascending order
  table = u[:, order] * np.sqrt(s[order])
  largest = np.abs(table).argmax(0)
  table *= np.sign(table[largest, np.arange(dim)])
  counted = np.asarray(counts.sum(1)).ravel() > 0
  rows = table[counted] - table[counted].mean(0)
  out = np.zeros_like(table)
  out[counted] = rows * (TABLE_RMS / rows.std())
  return out.astype(np.float32)


def shuffled(table: np.ndarray, seed: int = 0) -> np.ndarray:
  """`table` with its nonzero rows dealt to the other nonzero rows' pieces at random."""
  rows = np.flatnonzero(np.any(table != 0, axis=1))
  out = table.copy()
  out[rows] = table[np.random.default_rng(seed).permutation(rows)]
  return out


def bags(ids: np.ndarray, vocab_size: int, skipped: list[int]) -> np.ndarray:
  """[N, V] float32: each row's share of each piece, specials and padding left out."""
  out = np.zeros((len(ids), vocab_size), np.float32)
  for row, pieces in enumerate(np.asarray(ids)):
    pieces = pieces[~np.isin(pieces, skipped)]
    np.add.at(out[row], pieces, 1.0 / max(len(pieces), 1))
  return out


def training_ids(data_dir: str) -> np.ndarray:
  split = store.open_store(os.path.join(data_dir, 'train'))
  chunks = [np.arange(start, min(start + CHUNK, len(split)))
            for start in range(0, len(split), CHUNK)]
  return np.concatenate([split.gather(chunk)['input_ids'] for chunk in chunks])


def load_corpus_vocab(data_dir: str):
  for name in ('vocab.model', 'vocab.txt'):
    if os.path.exists(os.path.join(data_dir, name)):
      return vocab_lib.load_vocab(os.path.join(data_dir, name))
  raise UsageError(f"'{data_dir}' holds no vocab.model or vocab.txt: pass a prepared data "
                   'directory (python -m electra_jax.prepare --out=DIR)')


def run_table(path: str, vocab) -> np.ndarray:
  start = init.from_run(path)
  if vocab_lib.vocab_fingerprint(start.vocab) != vocab_lib.vocab_fingerprint(vocab):
    raise UsageError(f'--run={path} was trained on another vocabulary than --data\'s; probe '
                     'runs that trained on this prepared corpus')
  return np.asarray(start.params['embeddings']['word_embeddings']['embedding'], np.float32)


def parse_fractions(text: str) -> list[float]:
  """--fractions as sorted shares, the whole corpus always among them (it makes table.npy)."""
  try:
    fractions = {float(f) for f in text.split(',') if f.strip()}
  except ValueError as e:
    raise UsageError(f'--fractions={text!r}: give comma-separated numbers in (0, 1]') from e
  if any(not 0 < f <= 1 for f in fractions):
    raise UsageError(f'--fractions={text!r}: each share must be in (0, 1]')
  return sorted(fractions | {1.0})


def main(argv=None):
  args = parse_args(argv)
  fractions = parse_fractions(args.fractions)
  vocab = load_corpus_vocab(args.data)
  if not 0 < args.dim < vocab.size:
    raise UsageError(f'--dim={args.dim}: the count vectors need a width in [1, {vocab.size}) '
                     '(the vocabulary\'s size); the word table\'s embedding_size is the usual one')
  skipped = special_ids(vocab)
  train_examples, dev_examples = linear_probe.probe_examples(args.task, args.data_dir,
                                                             args.examples)
  bag = lambda examples: bags(features.encode(examples, vocab, PROBE_LENGTH)['input_ids'],
                              vocab.size, skipped)
  train_bags, dev_bags = bag(train_examples), bag(dev_examples)
  os.makedirs(args.out, exist_ok=True)
  results = {'data': args.data, 'task': args.task, 'examples': args.examples, 'dim': args.dim,
             'window': args.window, 'probes': {}}

  def probe(name, table, **facts):  # table None: the bags themselves (one feature a piece)
    mean_rows = (lambda bags: bags) if table is None else (lambda bags: bags @ table)
    accuracy, strength = linear_probe.probe_accuracy(
        mean_rows(train_bags), train_examples.labels, mean_rows(dev_bags), dev_examples.labels)
    results['probes'][name] = {'accuracy': accuracy, 'l2': strength, **facts}
    print(f'{name}: dev accuracy {accuracy:.4f} (L2 {strength:g})', flush=True)
    with open(os.path.join(args.out, 'probes.json'), 'w') as f:
      json.dump(results, f, indent=1)

  probe('pieces', None)
  probe('random', np.random.default_rng(0).normal(0, TABLE_RMS, (vocab.size, args.dim)))
  for path in args.run:
    probe(f'run {path}', run_table(path, vocab))
  ids = training_ids(args.data)
  order = np.random.default_rng(0).permutation(len(ids))
  for fraction in fractions:
    part = ids[order[:max(1, round(len(ids) * fraction))]]
    table = count_table(cooccurrence(part, vocab.size, args.window, skipped), args.dim)
    tokens = int((~np.isin(part, skipped)).sum())
    probe(f'count {fraction:g}', table, tokens=tokens)
    if fraction == 1:
      np.save(os.path.join(args.out, 'table.npy'), table)
      np.save(os.path.join(args.out, 'shuffled_table.npy'), shuffled(table))


if __name__ == '__main__':
  main()
