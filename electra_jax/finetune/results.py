"""What a fine-tuning run leaves in DIR: results.json, and each seed's output files.

results.json holds every seed's dev metrics, their per-metric medians (the paper reports the
median over seeds), the task's score and the training budget. GLUE's submission files are
glue/results.py's; the other families' outputs are write_seeds'.
"""

import json
import os

import numpy as np

RESULTS = 'results.json'


def format_scores(scores: dict[str, dict[str, float]]) -> str:
  return '; '.join(f'{split} ' + ', '.join(f'{k} {v:.4f}' for k, v in values.items())
                   for split, values in scores.items())


def median_of(scores: dict[int, float]) -> int:
  """The seed whose score is the median (the lower of the two middle ones for an even count)."""
  ranked = sorted(scores, key=lambda seed: (scores[seed], seed))
  return ranked[(len(ranked) - 1) // 2]


def medians(per_seed: dict[int, dict]) -> dict[str, dict[str, float]]:
  first = next(iter(per_seed.values()))
  return {split: {metric: float(np.median([s[split][metric] for s in per_seed.values()]))
                  for metric in values} for split, values in first.items()}


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
