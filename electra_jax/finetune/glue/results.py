"""What a GLUE run leaves in DIR: results.json and submission files.

results.json (finetune/results.py) gets GLUE's score: the first metric of its first dev split,
Matthews correlation for CoLA, Spearman for STS-B, accuracy for the others.

Submission files are in GLUE's format, `index<TAB>prediction` under that header, one per test
split: <TASK>.tsv (MNLI-m.tsv and MNLI-mm.tsv for MNLI), label names for classification (0/1
where GLUE's files use numbers), the score for STS-B. DIR/<TASK>.tsv comes from the seed whose
score is the median (the lower of the two middle ones for an even count); every seed's files are
in DIR/seed_<seed>/.
"""

import os

import numpy as np

from electra_jax.finetune.glue.data import Examples
from electra_jax.finetune.glue.tasks import Task
from electra_jax.finetune.results import RESULTS, median_of, medians, write_json


def task_score(task: Task, scores: dict[str, dict[str, float]]) -> float:
  return scores[task.dev[0].name][task.metrics[0]]


def median_seed(task: Task, per_seed: dict[int, dict]) -> int:
  return median_of({seed: task_score(task, scores) for seed, scores in per_seed.items()})


def write_submission(path: str, task: Task, examples: Examples, predictions: np.ndarray):
  lines = ['index\tprediction']
  for index, prediction in zip(examples.index, predictions):
    value = f'{float(prediction):.3f}' if task.is_regression else task.labels[int(prediction)]
    lines.append(f'{index}\t{value}')
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines) + '\n')


def write(workdir: str, task: Task, config, description: str, budget: dict,
          per_seed: dict[int, dict], predictions: dict[int, dict[str, np.ndarray]],
          test: dict[str, Examples]) -> dict:
  chosen = median_seed(task, per_seed)
  for seed, by_split in predictions.items():
    seed_dir = os.path.join(workdir, f'seed_{seed}')
    os.makedirs(seed_dir, exist_ok=True)
    for name, values in by_split.items():
      write_submission(os.path.join(seed_dir, f'{name}.tsv'), task, test[name], values)
      if seed == chosen:
        write_submission(os.path.join(workdir, f'{name}.tsv'), task, test[name], values)
  summary = {
      'task': task.name,
      'init_from': config.init_from,
      'init': description,
      'size': config.size,
      'score_metric': f'{task.dev[0].name} {task.metrics[0]}',
      'score': float(np.median([task_score(task, s) for s in per_seed.values()])),
      'median': medians(per_seed),
      'seeds': {str(seed): scores for seed, scores in per_seed.items()},
      'submission_seed': chosen if predictions.get(chosen) else None,
      'submission_files': sorted(f'{name}.tsv' for name in test),
      'budget': budget,
      'learning_rate': config.learning_rate,
      'layer_decay': config.layer_decay,
  }
  write_json(os.path.join(workdir, RESULTS), summary)
  return summary
