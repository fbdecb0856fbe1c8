"""Transfer studies side by side: each start at its better decay setting, study by study.

python -m research.transfer_study.compare_studies --out=runs/vocab_sizes \
    --study='4,096 pieces=runs/transfer' --study='16,384 pieces=runs/vocab16k'

Each --study is LABEL=DIR, DIR a `python -m research.transfer_study --out` (or its results.json).
Writes OUT.md: per task, every start's median dev score and its seeds at the setting its study
chose, and ELECTRA's lead over random init and over MLM in points; and OUT.png: per task, a dot
per seed and a bar at the median, the studies along the x axis. What one change to a study (a
vocabulary, a network, a corpus) does to every start is then one table.
"""

import argparse
import json
import os
import statistics

from research.transfer_study import transfer_plots, transfer_report

TASKS = transfer_report.TASKS
METRICS = {'SST-2': ('accuracy',), 'MRPC': ('accuracy', 'f1')}
STARTS = ('electra', 'mlm', 'random')


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.compare_studies',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--study', action='append', required=True, metavar='LABEL=DIR',
                      help="a study's label and its --out directory (or results.json); repeat")
  parser.add_argument('--out', required=True, help='writes OUT.md and OUT.png')
  args = parser.parse_args(argv)
  for given in args.study:
    if '=' not in given or not given.split('=', 1)[0]:
      parser.error(f"--study={given}: give LABEL=DIR, e.g. --study='16,384 pieces=runs/vocab16k'")
  return args


def load(path: str) -> dict:
  file = os.path.join(path, 'results.json') if os.path.isdir(path) else path
  if not os.path.exists(file):
    raise SystemExit(f'{file} not found: --study wants a transfer study --out directory that '
                     'has written its results.json '
                     '(run python -m research.transfer_study --out=DIR)')
  with open(file) as f:
    return json.load(f)


def chosen_runs(results: dict) -> dict[str, dict[str, dict | None]]:
  """{start: {task: its fine-tuning summary at the setting its study chose, or None}}.

  A study from before both decay settings has no 'choice': its pretrained starts ran once, under
  their own name.
  """
  runs = {}
  for start in STARTS:
    by_task = {}
    for task in TASKS:
      variant = results.get('choice', {}).get(start, {}).get(task, start)
      by_task[task] = (results['finetuning'].get(variant) or {}).get(task)
      if by_task[task] is not None:
        by_task[task] = {**by_task[task], 'setting': transfer_report.label(variant)}
    runs[start] = by_task
  return runs


def lead(runs: dict, task: str, over: str) -> str:
  electra, other = runs['electra'][task], runs[over][task]
  if electra is None or other is None:
    return '–'
  # Of the medians as the table shows them, so that the column is their difference.
  return f"{round(100 * electra['score'], 1) - round(100 * other['score'], 1):+.1f}"


def markdown(studies: list[tuple[str, dict]]) -> str:
  lines = ['# Transfer studies side by side', '',
           "Dev scores x100: median (seeds), each start at the decay setting its study chose.", '']
  for task in TASKS:
    header = ['study'] + [transfer_report.LABELS[s] for s in STARTS]
    lines += [f'## {task} ({" / ".join(METRICS[task])})', '',
              '| ' + ' | '.join(header + ['ELECTRA − random init', 'ELECTRA − MLM']) + ' |',
              '|---' * (len(header) + 2) + '|']
    for name, results in studies:
      runs = chosen_runs(results)
      cells = [transfer_report.cell(runs[s][task], METRICS[task]) for s in STARTS]
      lines.append('| ' + ' | '.join([name, *cells, lead(runs, task, 'random'),
                                      lead(runs, task, 'mlm')]) + ' |')
    lines.append('')
  return '\n'.join(lines)


def plot(studies: list[tuple[str, dict]], path: str):
  plt = transfer_plots._pyplot()  # pylint: disable=protected-access  (one matplotlib setup)
  fig, axes = plt.subplots(1, len(TASKS), figsize=(6 * len(TASKS), 4))
  fig.suptitle('a dot per seed, a bar at the median; each start at its better decay setting')
  width = 0.8 / len(STARTS)
  for ax, task in zip(axes, TASKS):
    for i, start in enumerate(STARTS):
      for x, (_, results) in enumerate(studies):
        run = chosen_runs(results)[start][task]
        if run is None:
          continue
        values = [100 * s[METRICS[task][0]] for s in run['seeds'].values()]
        at = x + (i - (len(STARTS) - 1) / 2) * width
        ax.scatter([at] * len(values), values, color=f'C{i}', alpha=0.7,
                   label=transfer_report.LABELS[start] if x == 0 else None)
        ax.hlines(statistics.median(values), at - width / 2, at + width / 2, color=f'C{i}')
    ax.set_xticks(range(len(studies)), [name for name, _ in studies])
    ax.set(title=f'{task} dev {METRICS[task][0]}')
    ax.grid(axis='y', alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def main(argv=None):
  args = parse_args(argv)
  studies = [(label, load(path)) for label, path in (s.split('=', 1) for s in args.study)]
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out + '.md', 'w') as f:
    f.write(markdown(studies))
  plot(studies, args.out + '.png')
  print(markdown(studies))
  print(f'wrote {args.out}.md and {args.out}.png')


if __name__ == '__main__':
  main()
