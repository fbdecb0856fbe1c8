"""Which words a pretrained encoder's embedding table puts together: opposites, near-synonyms, any.

python -m research.transfer_study.word_pairs --run=DIR [--run=DIR2 ...] [--out=pairs.json]

For each pretraining run (its latest checkpoint, or --step) and for the same network at random
initialisation (fine-tuning's random-init start, seed 0), the cosine similarity between the word
embeddings of English word pairs that the run's vocabulary keeps whole: opposites (good/bad,
best/worst, ...), near-synonyms (big/large, begin/start, ...), and random pairs of pieces for
the spread. The table's mean is removed first, so a direction every word shares does not count
as similarity.

Why: a task can only gain from pretraining what the embeddings and layers hold for it. Learned
from which words fill the same slots, a table puts "good" next to "bad" as readily as next to
"fine": that serves a paraphrase task (MRPC), where similar words mean similar sentences, and not
a sentiment task (SST-2), where fine-tuning must first pull the opposites apart.
"""

import argparse
import json

import numpy as np

from electra_jax.finetune import init
from electra_jax.finetune.glue import model as glue_model

OPPOSITES = [('good', 'bad'), ('best', 'worst'), ('love', 'hate'), ('happy', 'sad'),
             ('beautiful', 'ugly'), ('better', 'worse'), ('strong', 'weak'), ('rich', 'poor'),
             ('true', 'false'), ('right', 'wrong'), ('success', 'failure'), ('kind', 'cruel'),
             ('hope', 'fear'), ('easy', 'hard'), ('fine', 'terrible'), ('pleasant', 'unpleasant'),
             ('wise', 'foolish'), ('interesting', 'dull')]
SYNONYMS = [('good', 'fine'), ('bad', 'evil'), ('happy', 'glad'), ('beautiful', 'lovely'),
            ('love', 'like'), ('big', 'large'), ('small', 'little'), ('quick', 'fast'),
            ('begin', 'start'), ('said', 'told'), ('house', 'home'), ('woman', 'lady'),
            ('terrible', 'dreadful'), ('strange', 'curious'), ('often', 'frequently'),
            ('hard', 'difficult')]
RANDOM_PAIRS = 2000
RANDOM_SEED = 0


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.word_pairs',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--run', action='append', required=True, help='a pretraining workdir')
  parser.add_argument('--step', type=int, default=0, help='checkpoint step; 0 = the latest')
  parser.add_argument('--out', default='', help='write every similarity here as JSON')
  return parser.parse_args(argv)


def whole_words(pairs, vocab) -> list[tuple[str, str, int, int]]:
  """The pairs whose two words are each one piece of `vocab` (as a word after a space), not
  [UNK]."""
  def piece(word):
    ids = vocab.encode([' ' + word])[0]
    return ids[0] if len(ids) == 1 and ids[0] != vocab.unk_id else None
  kept = [(a, b, piece(a), piece(b)) for a, b in pairs]
  return [(a, b, i, j) for a, b, i, j in kept if i is not None and j is not None]


def cosines(table: np.ndarray, pairs) -> np.ndarray:
  centred = table - table.mean(axis=0)
  unit = centred / np.linalg.norm(centred, axis=1, keepdims=True)
  return np.array([unit[i] @ unit[j] for *_, i, j in pairs])


def similarities(table: np.ndarray, vocab) -> dict:
  rng = np.random.default_rng(RANDOM_SEED)
  ordinary = np.arange(vocab.size // 20, vocab.size)  # past the specials and the bytes
  randoms = [(None, None, *rng.choice(ordinary, 2, replace=False)) for _ in range(RANDOM_PAIRS)]
  spread = cosines(table, randoms)
  result = {'random': {'mean': float(spread.mean()), 'sd': float(spread.std())}}
  for name, pairs in (('opposites', OPPOSITES), ('synonyms', SYNONYMS)):
    kept = whole_words(pairs, vocab)
    values = cosines(table, kept)
    result[name] = {'mean': float(values.mean()),
                    'pairs': {f'{a}/{b}': round(float(v), 3) for (a, b, *_), v in zip(kept, values)}}
  return result


def word_table(start: init.Start) -> np.ndarray:
  params = init.initial_params(glue_model.Classifier(start.model, num_outputs=1), start,
                               RANDOM_SEED, 8)
  return np.asarray(params['embeddings']['word_embeddings']['embedding'])


def main(argv=None):
  args = parse_args(argv)
  results = {}
  for run_dir in args.run:
    pretrained = init.from_run(run_dir, args.step or None)
    random = init.Start(pretrained.model, pretrained.vocab, None, 'random initialisation')
    for name, start in ((run_dir, pretrained), (f'{run_dir} at random init', random)):
      found = similarities(word_table(start), start.vocab)
      results[name] = {'start': start.description, **found}
      print(f'{name}: opposites {found["opposites"]["mean"]:+.3f}, synonyms '
            f'{found["synonyms"]["mean"]:+.3f}, random pairs {found["random"]["mean"]:+.3f} '
            f'(sd {found["random"]["sd"]:.3f})')
      print('  ' + ', '.join(f'{k} {v:+.2f}' for k, v in found['opposites']['pairs'].items()))
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(results, f, indent=1)


if __name__ == '__main__':
  main()
