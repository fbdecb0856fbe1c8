"""Command line: the GLUE table of several fine-tuning runs, side by side.

python -m electra_jax.finetune_summary DIR [DIR ...]

Each DIR is one `python -m electra_jax.finetune` run (its results.json). Runs are grouped into
rows by where they started (init_from); columns are the GLUE tasks in the paper's order, each
cell the median over seeds of the task's score in percent (MRPC and QQP: accuracy, then F1). `GLUE`
is the mean over the paper's eight tasks (WNLI and MNLI-mm left out, as the paper does), shown
only for a row that has all eight. A second table lists every run's metrics and seeds.
"""

import json
import os
import sys

from electra_jax.common import cli
from electra_jax.finetune.glue.tasks import TASKS as GLUE_TASKS

USAGE = 'python -m electra_jax.finetune_summary DIR [DIR ...]'
COLUMNS = ('CoLA', 'SST-2', 'MRPC', 'STS-B', 'QQP', 'MNLI-m', 'MNLI-mm', 'QNLI', 'RTE', 'WNLI')
GLUE_SCORE = ('CoLA', 'SST-2', 'MRPC', 'STS-B', 'QQP', 'MNLI-m', 'QNLI', 'RTE')
SECOND_METRIC = {'MRPC': 'f1', 'QQP': 'f1'}


def load(directory: str) -> dict:
  path = os.path.join(directory, 'results.json')
  if not os.path.isfile(path):
    cli.fail(f"'{directory}' holds no results.json; pass directories written by "
             'python -m electra_jax.finetune')
  with open(path) as f:
    return json.load(f)


def percent(task: str) -> float:
  """What turns `task`'s metrics into percent: GLUE's are fractions, SQuAD's and chunking's
  percentages already."""
  return 100.0 if task in GLUE_TASKS else 1.0


def cells(result: dict) -> dict[str, tuple[float, ...]]:
  """Column -> (score, second metric) in percent of one run (MNLI fills two columns)."""
  second, scale = SECOND_METRIC.get(result['task']), percent(result['task'])
  return {split: tuple(scale * values[m] for m in (next(iter(values)), second) if m)
          for split, values in result['median'].items()}


def glue_table(results: list[dict]) -> list[str]:
  rows: dict[str, dict] = {}
  for result in results:
    rows.setdefault(result['init_from'] or 'random init', {}).update(cells(result))
  lines = ['| init_from | ' + ' | '.join(COLUMNS) + ' | GLUE |',
           '|---' * (len(COLUMNS) + 2) + '|']
  for name, row in rows.items():
    texts = ['/'.join(f'{s:.1f}' for s in row[c]) if c in row else '' for c in COLUMNS]
    complete = all(c in row for c in GLUE_SCORE)
    glue = f'{sum(row[c][0] for c in GLUE_SCORE) / len(GLUE_SCORE):.1f}' if complete else ''
    lines.append(f'| {name} | ' + ' | '.join(texts) + f' | {glue} |')
  return lines


def majority_text(result: dict, split: str) -> str:
  """' (majority class 68.4, 81.2)' after a GLUE split's scores: the floor they must clear."""
  majority = result['majority_class'] if 'majority_class' in result else None
  if not majority:  # STS-B, SQuAD, chunking, or a run from before it was recorded
    return ''
  scale = percent(result['task'])
  return ' (majority class ' + ', '.join(f'{scale * v:.1f}' for v in majority[split].values()) + ')'


def run_table(directories: list[str], results: list[dict]) -> list[str]:
  lines = ['| run | task | init_from | seeds | median | per seed (score) | steps x batch |',
           '|---|---|---|---|---|---|---|']
  for directory, result in zip(directories, results):
    split, metric = result['score_metric'].split()
    scale = percent(result['task'])
    median = '; '.join(f'{s} ' + ', '.join(f'{k} {scale * v:.1f}' for k, v in values.items()
                                           if k != 'total')
                       + majority_text(result, s) for s, values in result['median'].items())
    seeds = ', '.join(f'{seed}: {scale * scores[split][metric]:.1f}'
                      for seed, scores in result['seeds'].items())
    budget = result['budget']
    lines.append(f"| {directory} | {result['task']} | {result['init_from'] or 'random init'} | "
                 f"{len(result['seeds'])} | {median} | {seeds} | "
                 f"{budget['steps']} x {budget['batch_size']} |")
  return lines


def main(argv: list[str]) -> None:
  directories = argv[1:]
  if not directories or any(d.startswith('-') for d in directories):
    cli.fail(f'pass fine-tuning run directories\nusage: {USAGE}')
  results = [load(d) for d in directories]
  print('\n'.join(glue_table(results) + [''] + run_table(directories, results)))


if __name__ == '__main__':
  main(sys.argv)
