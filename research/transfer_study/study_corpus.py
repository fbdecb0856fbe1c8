"""Which files of a corpus folder a study trains on and which it holds out for evaluation.

A corpus is a folder whose subfolders each hold one source's .txt files (../shared's
pretraining-text has gutenberg/ and enwiki/); electra_jax.prepare detects each file's format.
Every source gives `held_out` files, drawn with seed 0, to evaluation, so each is evaluated and
none is left out of training, and the same corpus always gives the same split.
"""

import glob
import os
import random

from electra_jax.common.errors import UsageError


def corpus_folders(corpus: str) -> list[str]:
  """The sources of a corpus: its subfolders that hold .txt files, in name order."""
  if not os.path.isdir(corpus):
    raise UsageError(f'--corpus={corpus} is not a folder; pass a folder whose subfolders hold '
                     'the .txt files, one source each (e.g. gutenberg/ and enwiki/)')
  folders = sorted(name for name in os.listdir(corpus)
                   if glob.glob(os.path.join(corpus, name, '*.txt')))
  if not folders:
    raise UsageError(f'--corpus={corpus} has no subfolder holding .txt files; the study reads '
                     'each subfolder as one source (e.g. gutenberg/*.txt and enwiki/*.txt), '
                     'in any format the reader detects')
  return folders


def held_out_split(corpus: str, held_out: int) -> tuple[list[str], list[str]]:
  """(training files, evaluation files): `held_out` files of each source folder drawn with seed
  0, so every source is evaluated and none is left out of training."""
  train, evaluation = [], []
  for folder in corpus_folders(corpus):
    files = sorted(glob.glob(os.path.join(corpus, folder, '*.txt')))
    if len(files) <= held_out:
      raise UsageError(f'{os.path.join(corpus, folder)} holds {len(files)} .txt files; the study '
                       f'needs more than --held_out={held_out} of each source folder (split the '
                       'text into more files, or lower --held_out)')
    chosen = set(random.Random(0).sample(files, held_out))
    evaluation += sorted(chosen)
    train += [f for f in files if f not in chosen]
  return train, evaluation
