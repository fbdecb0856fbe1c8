"""What a fine-tuning run leaves in DIR: results.json and GLUE submission files (other task
families' outputs: write_seeds).

results.json holds every seed's dev metrics, their per-metric medians (the paper reports the
median over seeds), the task's score (the first metric of its first dev split: Matthews
correlation for CoLA, Spearman for STS-B, accuracy for the others), and the training budget.

Submission files are in GLUE's format, `index<TAB>prediction` under that header, one per test
split: <TASK>.tsv (MNLI-m.tsv and MNLI-mm.tsv for MNLI), label names for classification (0/1
where GLUE's files use numbers), the score for STS-B. DIR/<TASK>.tsv comes from the seed whose
score is the median (the lower of the two middle ones for an even count); every seed's files are
in DIR/seed_<seed>/.
"""

import json
import os

import numpy as np

from electra_jax.finetune.glue.data import Examples
from electra_jax.finetune.glue.tasks import Task

RESULTS = 'results.json'


def format_scores(scores: dict[str, dict[str, float]]) -> str:
  return '; '.join(f'{split} ' + ', '.join(f'{k} {v:.4f}' for k, v in values.items())
                   for split, values in scores.items())


def task_score(task: Task, scores: dict[str, dict[str, float]]) -> float:
  return scores[task.dev[0].name][task.metrics[0]]


def median_seed(task: Task, per_seed: dict[int, dict]) -> int:
  return median_of({seed: task_score(task, scores) for seed, scores in per_seed.items()})


def median_of(scores: dict[int, float]) -> int:
  """The seed whose score is the median (the lower of the two middle ones for an even count)."""
  ranked = sorted(scores, key=lambda seed: (scores[seed], seed))
  return ranked[(len(ranked) - 1) // 2]


def medians(per_seed: dict[int, dict]) -> dict[str, dict[str, float]]:
  first = next(iter(per_seed.values()))
  return {split: {metric: float(np.median([s[split][metric] for s in per_seed.values()]))
                  for metric in values} for split, values in first.items()}


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


def write_json(path: str, value) -> None:
  with open(path + '.tmp', 'w') as f:
    json.dump(value, f, indent=2)
    f.write('\n')
  os.replace(path + '.tmp', path)


def write_text(path: str, text: str) -> None:
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(path + '.tmp', path)


def write_seeds(workdir: str, config, description: str, budget: dict, score: tuple[str, str],
                per_seed: dict[int, dict], files: dict[int, dict[str, object]],
                **extra) -> dict:
  """results.json of a task family other than GLUE: each seed's scores, the medians and the
  score `score` = (split, metric); each seed's `files` (name -> text, or a JSON value) in
  DIR/seed_<seed>/, and the median seed's also in DIR."""
  split, metric = score
  scores = {seed: values[split][metric] for seed, values in per_seed.items()}
  chosen = median_of(scores)
  for seed, named in files.items():
    os.makedirs(os.path.join(workdir, f'seed_{seed}'), exist_ok=True)
    for name, value in named.items():
      write = write_text if isinstance(value, str) else write_json
      write(os.path.join(workdir, f'seed_{seed}', name), value)
      if seed == chosen:
        write(os.path.join(workdir, name), value)
  summary = {
      'task': config.task, 'init_from': config.init_from, 'init': description,
      'size': config.size, 'score_metric': f'{split} {metric}',
      'score': float(np.median(list(scores.values()))), 'median': medians(per_seed),
      'seeds': {str(seed): values for seed, values in per_seed.items()},
      'files_seed': chosen, 'files': sorted(files[chosen]), 'budget': budget,
      'learning_rate': config.learning_rate, 'layer_decay': config.layer_decay, **extra}
  write_json(os.path.join(workdir, RESULTS), summary)
  return summary
