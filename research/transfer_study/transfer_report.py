"""The transfer study's report: DIR/results.json, DIR/results.md and two plots, from what is in DIR.

Reads each pretraining workdir (config.json, checkpoints, metrics.jsonl) and each fine-tuning
run's results.json; a part that has not finished shows as missing. Scores are fractions in
results.json and x100 in results.md. Every start (each pretrained objective, and random
initialisation) is fine-tuned with the recipe's layer-wise decay and without; per task, the
setting with the better median is that start's score, and both are reported.
"""

import json
import os

import ml_collections

from electra_jax.common.errors import UsageError
from electra_jax.training import flops
from electra_jax.training.report import format_duration
from research.transfer_study import transfer_plots

TASKS = ('SST-2', 'MRPC')
# The layer-wise decay settings a start is fine-tuned with, by the suffix of the run's name: the
# recipe's (0 = the recipe's value for the size) and none. The decay is a prior that suits some
# starts and not others (it cost the small pretrained encoder up to 2.6 points on SST-2 and helped
# random init; docs/transfer_study.md), so each start gets both and keeps the better.
DECAYS = {'': 0.0, '_no_decay': 1.0}
SETTING_NAMES = {'': 'recipe decay', '_no_decay': 'no decay'}
LABELS = {'electra': 'ELECTRA', 'mlm': 'MLM', 'electra_15': 'ELECTRA 15%',
          'replace_mlm': 'Replace MLM', 'all_tokens_mlm': 'All-Tokens MLM',
          'random': 'random init'}
# The paper's Table 5: GLUE dev score of each objective at the same compute (BERT = 'mlm').
PAPER_TABLE5 = {'electra': 85.0, 'all_tokens_mlm': 84.3, 'replace_mlm': 82.4,
                'electra_15': 82.4, 'mlm': 82.2}
MARGIN = 0.02  # ELECTRA's median must beat random init's by 2 points
# What two studies must share for their scores to sit side by side (--beside): the same
# pretraining and fine-tuning settings (the pretraining FLOPs and the held-out files are
# compared separately, so the config file and corpus may live at other paths).
SHARED_SETTINGS = ('set', 'held_out', 'seeds', 'max_seq_length', 'sst2_examples',
                   'mrpc_examples', 'finetune_epochs', 'both_decays')
# What a study written before a setting existed ran with.
SETTING_BEFORE = {'both_decays': False}


def variants(start: str) -> list[str]:
  """The fine-tuning runs of one start, a name per decay setting: 'electra', 'electra_no_decay'."""
  return [start + suffix for suffix in DECAYS]


def split_variant(variant: str) -> tuple[str, str]:
  """('electra', '_no_decay') for 'electra_no_decay'; (start, '') for the recipe's setting."""
  for suffix in DECAYS:
    if suffix and variant.endswith(suffix):
      return variant[:-len(suffix)], suffix
  return variant, ''


def label(variant: str) -> str:
  start, suffix = split_variant(variant)
  return f'{LABELS[start]}, {SETTING_NAMES[suffix]}'


def corpus_relative(paths: list[str]) -> list[str]:
  """gutenberg/x.txt for .../pretraining-text/gutenberg/x.txt: a file as the corpus names it."""
  return sorted(os.path.join(*os.path.normpath(p).split(os.sep)[-2:]) for p in paths)


def read_beside(path: str, settings: dict, planned_flops: float, held_out: list[str]) -> dict:
  """The results.json of the study in `path`, checked to have run with `settings`, the same
  held-out files and each objective at `planned_flops` (to within one of its steps)."""
  file = os.path.join(path, 'results.json')
  if not os.path.exists(file):
    raise UsageError(f'--beside={path}: no results.json there; give the --out of a study that '
                     'has run')
  with open(file) as f:
    other = json.load(f)
  theirs = lambda k: other['settings'].get(k, SETTING_BEFORE.get(k))
  differ = [f'{k} {theirs(k)!r} (here {settings[k]!r})' for k in SHARED_SETTINGS
            if theirs(k) != settings[k]]
  if other['held_out_files'] and corpus_relative(other['held_out_files']) != corpus_relative(
      held_out):
    differ.append('the held-out files')
  differ += [f'{LABELS[o]} pretrained at {run["steps"] * run["flops_per_step"]:.4g} FLOPs '
             f'(here {planned_flops:.4g})' for o, run in other['plan'].items()
             if abs(run['steps'] * run['flops_per_step'] - planned_flops) > run['flops_per_step']]
  if differ:
    raise UsageError(f'--beside={path} ran with other settings: {"; ".join(differ)}. Its scores '
                     'cannot sit beside this study\'s')
  return other


def flops_per_step(workdir: str) -> int:
  """Model FLOPs of one training step of the run in `workdir`, from the config it ran with."""
  with open(os.path.join(workdir, 'config.json')) as f:
    return flops.train_step_flops(ml_collections.ConfigDict(json.load(f)))


def read_metrics(workdir: str) -> list[dict]:
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def pretraining_summary(out: str, objective: str, state: dict) -> dict | None:
  record = state.get(f'pretrain_{objective}', {})
  workdir = os.path.join(out, objective)
  if 'command' not in record:
    return None
  per_step = flops_per_step(workdir)
  lines = read_metrics(workdir)
  evals = [m for m in lines if any(k.startswith('eval_') for k in m)]
  trains = [m for m in lines if not any(k.startswith('eval_') for k in m)]
  steps = max(m['step'] for m in lines) if lines else 0
  return {
      'workdir': workdir, 'steps': steps, 'flops_per_step': per_step, 'flops': steps * per_step,
      'final_eval': evals[-1] if evals else None, 'final_train': trains[-1] if trains else None,
      'eval_curve': [{**m, 'flops': m['step'] * per_step} for m in evals],
      'seconds': record['seconds'],
  }


def per_seed_scores(result: dict) -> dict[str, dict[str, float]]:
  """{seed: {metric: value}} on the task's scored dev split."""
  split = result['score_metric'].split()[0]
  return {seed: scores[split] for seed, scores in result['seeds'].items()}


def finetuning_summary(out: str, start: str, task: str, state: dict) -> dict | None:
  record = state.get(f'finetune_{start}_{task}', {})
  path = os.path.join(out, 'finetune', f'{start}-{task}', 'results.json')
  if 'command' not in record or not os.path.exists(path):
    return None
  with open(path) as f:
    result = json.load(f)
  split = result['score_metric'].split()[0]
  return {'score_metric': result['score_metric'], 'score': result['score'],
          'median': result['median'][split], 'seeds': per_seed_scores(result),
          'layer_decay': result['layer_decay'], 'learning_rate': result['learning_rate'],
          'budget': result['budget'], 'seconds': record['seconds']}


def task_scores(run: dict) -> list[float]:
  metric = run['score_metric'].split()[1]
  return [scores[metric] for scores in run['seeds'].values()]


def best_setting(by_variant: dict[str, dict | None]) -> str | None:
  """Of one start's fine-tuning runs on a task, the one with the better median (the first
  given, the recipe's, on a tie); None if none has run."""
  done = [v for v, summary in by_variant.items() if summary]
  return max(done, key=lambda v: by_variant[v]['score']) if done else None


def best_of(finetuning: dict, choice: dict, start: str, task: str) -> dict | None:
  """The summary of `start`'s chosen setting on `task` (None if it has not run)."""
  chosen = choice.get(start, {}).get(task)
  return finetuning[chosen][task] if chosen else None


def acceptance_checks(electra: dict | None, mlm: dict | None, random: dict | None) -> list[dict]:
  """The study's three checks on one task's fine-tuning summaries (None = not run)."""
  def check(name, ready, passed, detail):
    return {'check': name, 'passed': bool(passed) if ready else None,
            'detail': detail if ready else 'not run'}
  both = electra is not None and random is not None
  checks = [
      check('ELECTRA median >= random init median + 2', both,
            both and electra['score'] >= random['score'] + MARGIN - 1e-9,
            both and f"{100 * electra['score']:.1f} vs {100 * random['score']:.1f} + 2"),
      check('ELECTRA worst seed > random init best seed', both,
            both and min(task_scores(electra)) > max(task_scores(random)),
            both and f'{100 * min(task_scores(electra)):.1f} vs '
            f'{100 * max(task_scores(random)):.1f}')]
  ready = electra is not None and mlm is not None
  checks.append(check('ELECTRA median >= MLM median', ready,
                      ready and electra['score'] >= mlm['score'],
                      ready and f"{100 * electra['score']:.1f} vs {100 * mlm['score']:.1f}"))
  return checks


def fine_tuned_variants(args: dict, objectives: list[str]) -> dict[str, list[str]]:
  """{start: its fine-tuning runs}: both decay settings for random init, and for the pretrained
  objectives unless both_decays is off (then only the recipe's, as studies before it ran)."""
  both = args.get('both_decays', SETTING_BEFORE['both_decays'])
  runs = {o: variants(o) if both else [o] for o in objectives}
  if args['random_init']:
    runs['random'] = variants('random')
  return runs


def summarize(out: str, plan: dict, state: dict, args: dict) -> dict:
  objectives = plan['objectives']
  by_start = fine_tuned_variants(args, objectives)
  finetuning = {v: {task: finetuning_summary(out, v, task, state) for task in TASKS}
                for runs in by_start.values() for v in runs}
  choice = {start: {task: best_setting({v: finetuning[v][task] for v in runs})
                    for task in TASKS} for start, runs in by_start.items()}
  checks = {task: acceptance_checks(*(best_of(finetuning, choice, s, task)
                                      for s in ('electra', 'mlm', 'random')))
            for task in TASKS}
  pretraining = {o: pretraining_summary(out, o, state) for o in objectives}
  runs = [{'start': start, 'task': task, 'seed': int(seed), 'scores': scores}
          for start, by_task in finetuning.items() for task, summary in by_task.items()
          if summary for seed, scores in summary['seeds'].items()]
  wall = {name: record['seconds'] for name, record in state.items() if 'seconds' in record}
  wall['pretrain'] = sum(v for k, v in wall.items() if k.startswith('pretrain_'))
  wall['finetune'] = sum(v for k, v in wall.items() if k.startswith('finetune_'))
  parts = wall.get('data', 0.0) + wall['pretrain'] + wall['finetune']
  wall['total'] = wall.pop('study', parts)  # elapsed; less than the parts' sum with --jobs > 1
  # A part stopped and resumed has its attempts' wall times summed: say so where it happened.
  attempts = {name: record['attempts'] for name, record in state.items()
              if name != 'study' and record.get('attempts', 1) > 1}
  untimed = {name: record['untimed_steps'] for name, record in state.items()
             if record.get('untimed_steps')}
  beside = None
  if args.get('beside'):  # checked by the study before it ran anything
    with open(os.path.join(args['beside'], 'results.json')) as f:
      other = json.load(f)
    # A study from before both_decays has no 'choice': its pretrained starts ran once.
    mine = lambda o, t: other.get('choice', {}).get(o, {}).get(t, o)
    beside = {'dir': args['beside'], 'best': {
        o: {t: other['finetuning'][mine(o, t)][t] for t in TASKS}
        for o in other['plan'] if o not in objectives}}
  return {
      'settings': {k: args[k] for k in ('config', 'set', 'corpus', 'held_out', 'glue_dir',
                                        'seeds', 'max_seq_length', 'sst2_examples',
                                        'mrpc_examples', 'finetune_epochs', 'objectives',
                                        'random_init', 'both_decays', 'beside')},
      'beside': beside,
      'held_out_files': state.get('data', {}).get('held_out'),
      'plan': {o: {k: plan[o][k] for k in ('steps', 'flops_per_step')} for o in objectives},
      'pretraining': pretraining, 'finetuning': finetuning, 'runs': runs,
      'choice': choice, 'checks': checks, 'wall_seconds': wall, 'attempts': attempts,
      'untimed_steps': untimed,
  }


# ---------------------------------------------------------------- results.md


def cell(run: dict | None, metrics: tuple[str, ...]) -> str:
  if run is None:
    return 'not run'
  median = ' / '.join(f"{100 * run['median'][m]:.1f}" for m in metrics)
  seeds = ', '.join('/'.join(f'{100 * s[m]:.1f}' for m in metrics) for s in run['seeds'].values())
  return f'{median} ({seeds})'


def wall_with_attempts(wall: dict, attempts: dict, part: str) -> str:
  """A part's wall time, with its number of attempts where it ran more than once."""
  shown = format_duration(wall.get(part, 0))
  return f'{shown} ({attempts[part]} attempts)' if part in attempts else shown


def pretraining_wall(wall: dict, attempts: dict, untimed: dict, part: str, steps: int) -> str:
  """The study's wall time of a pretraining part, saying which steps it does not cover: those
  trained before the study first ran the part, which no timer of the study's saw."""
  if part not in untimed:
    return wall_with_attempts(wall, attempts, part)
  if untimed[part] >= steps:
    return 'not timed (trained before the study ran it)'
  return (f'{wall_with_attempts(wall, attempts, part)} for its last {steps - untimed[part]:,} '
          f'steps (the first {untimed[part]:,} trained before the study ran it)')


def pretraining_cells(summary: dict | None, wall: dict, attempts: dict, untimed: dict,
                      objective: str) -> list[str]:
  if summary is None:
    return ['not run'] * 3
  return [f"{summary['steps']:,}", f"{summary['flops']:.3g}",
          pretraining_wall(wall, attempts, untimed, f'pretrain_{objective}', summary['steps'])]


def markdown(results: dict) -> str:
  ft, pt, wall = results['finetuning'], results['pretraining'], results['wall_seconds']
  attempts = results.get('attempts', {})  # absent from a report written before they were kept
  untimed = results.get('untimed_steps', {})
  metrics = {'SST-2': ('accuracy',), 'MRPC': ('accuracy', 'f1')}
  finetune_wall = lambda *runs: format_duration(sum(
      wall.get(f'finetune_{run}_{task}', 0) for run in runs for task in TASKS))
  choice = results['choice']
  rows = []
  for start, by_task in choice.items():
    runs = [v for v in ft if split_variant(v)[0] == start]
    pretrained = (pretraining_cells(pt[start], wall, attempts, untimed, start) if start in pt
                  else ['0', '0', ''])
    if len(runs) == 1:
      rows.append([LABELS[start]] + [cell(ft[start][t], metrics[t]) for t in TASKS]
                  + pretrained + [finetune_wall(start)])
      continue
    rows.append([f'{LABELS[start]} (better setting by median)'] + [
        f"{cell(ft[by_task[t]][t], metrics[t])} [{SETTING_NAMES[split_variant(by_task[t])[1]]}]"
        if by_task[t] else 'not run' for t in TASKS] + pretrained
        + [finetune_wall(*runs)])
    for v in runs:
      rows.append([f'· {label(v)}'] + [cell(ft[v][t], metrics[t]) for t in TASKS]
                  + ['', '', '', ''])
  s = results['settings']
  lines = [
      '# Transfer study: does pretraining pay off?', '',
      f"Pretraining config `{s['config']}`{' with ' + ', '.join(s['set']) if s['set'] else ''}; "
      f"corpus `{s['corpus']}`, held out for evaluation: "
      f"{', '.join(os.path.basename(p) for p in results['held_out_files'] or [])}. "
      f"Fine-tuning: seeds {s['seeds']}, max_seq_length {s['max_seq_length']}, SST-2 "
      f"{s['sst2_examples']:,} training examples, MRPC {s['mrpc_examples'] or 'all'}"
      f"{', ' + str(s['finetune_epochs']) + ' epochs' if s['finetune_epochs'] else ''}. "
      'Dev-set scores x100: median (per seed).', '',
      '| start | SST-2 acc | MRPC acc / F1 | pretraining steps | pretraining FLOPs '
      '| pretraining wall | fine-tuning wall |',
      '|---|---|---|---|---|---|---|',
      *('| ' + ' | '.join(row) + ' |' for row in rows), '',
      '## Acceptance checks', '', '| check | ' + ' | '.join(TASKS) + ' |',
      '|---|' + '---|' * len(TASKS)]
  for i, first in enumerate(results['checks'][TASKS[0]]):
    verdicts = []
    for task in TASKS:
      c = results['checks'][task][i]
      verdict = {True: 'pass', False: 'FAIL', None: 'n/a'}[c['passed']]
      verdicts.append(f"{verdict} ({c['detail']})")
    lines.append(f"| {first['check']} | " + ' | '.join(verdicts) + ' |')
  best = {o: {t: best_of(ft, choice, o, t) for t in TASKS} for o in results['plan']}
  lines += table5(best, list(results['plan']), results['beside'])
  lines += ['', '## Final pretraining evaluation (held-out text)', '']
  for objective in results['plan']:
    final = (pt[objective] or {}).get('final_eval')
    shown = f"step {final['step']:,}: " + ', '.join(
        f'{k[5:]} {v:.4f}' for k, v in final.items() if k.startswith('eval_')) \
        if final else 'not run'
    lines.append(f'- {LABELS[objective]}, {shown}')
  lines += ['', f"Wall time of the parts (each on its share of the cores): data "
            f"{format_duration(wall.get('data', 0))}, pretraining "
            f"{format_duration(wall['pretrain'])}, fine-tuning "
            f"{format_duration(wall['finetune'])}. The whole study: "
            f"{format_duration(wall['total'])}."
            + (' Parts run more than once (stopped and resumed), their wall times summed: '
               + ', '.join(f'{p} ({n} attempts)' for p, n in sorted(attempts.items())) + '.'
               if attempts else '')
            + (' Pretraining steps run before the study ran the part, which its wall times do '
               'not cover: ' + ', '.join(f'{p} ({n:,})' for p, n in sorted(untimed.items()))
               + '.' if untimed else ''), '',
            '![pretraining curves](pretraining_curves.png)', '',
            '![fine-tuning scores](finetune_scores.png)', '']
  return '\n'.join(lines)


def ranks(scores: dict[str, float]) -> dict[str, int]:
  """1 for the highest score; equal scores share a rank."""
  return {k: 1 + sum(other > v for other in scores.values()) for k, v in scores.items()}


def table5(best: dict, objectives: list[str], beside: dict | None = None) -> list[str]:
  """The objectives in the paper's Table 5, this study's and those of the study `beside` it,
  ranked by median dev score next to the paper's ranking; nothing unless one of the paper's
  ablations was run. `best` holds each objective's fine-tuning summary per task (at its better
  decay setting), None where it has not run."""
  ft = best
  if beside:
    ft = {**beside['best'], **ft}
    objectives = [*objectives, *beside['best']]
  compared = [o for o in objectives if o in PAPER_TABLE5]
  if not set(compared) - {'electra', 'mlm'}:
    return []
  by_task = {t: {o: ft[o][t]['score'] for o in compared if ft[o][t]} for t in TASKS}
  paper = ranks({o: PAPER_TABLE5[o] for o in compared})
  ours = {t: ranks(scores) for t, scores in by_task.items()}
  mark = lambda o: ' †' if beside and o in beside['best'] else ''
  lines = ['', "## Against the paper's Table 5", '',
           'The paper compares these objectives at the same compute on GLUE dev (its Table 5). '
           'Rank 1 is the best; equal scores share a rank.', '',
           '| objective | paper: GLUE (rank) | ' + ' | '.join(
               f'{t} median (rank)' for t in TASKS) + ' |', '|---|---|' + '---|' * len(TASKS)]
  for o in sorted(compared, key=lambda o: -PAPER_TABLE5[o]):
    cells = [f'{100 * by_task[t][o]:.1f} ({ours[t][o]})' if o in by_task[t] else 'not run'
             for t in TASKS]
    lines.append(f'| {LABELS[o]}{mark(o)} | {PAPER_TABLE5[o]} ({paper[o]}) | '
                 + ' | '.join(cells) + ' |')
  if beside and any(mark(o) for o in compared):
    lines += ['', f"† from the study in `{beside['dir']}`, run with the same settings, data and "
              'pretraining FLOPs.']
  return lines


def write_report(out: str, plan: dict, state: dict, args: dict) -> list[str]:
  """Writes results.json, results.md and the plots into `out`; returns their names."""
  results = summarize(out, plan, state, args)
  names = ['results.json', 'results.md', 'pretraining_curves.png', 'finetune_scores.png']
  with open(os.path.join(out, names[0]), 'w') as f:
    json.dump(results, f, indent=2)
    f.write('\n')
  with open(os.path.join(out, names[1]), 'w') as f:
    f.write(markdown(results))
  objectives = results['settings']['objectives']
  transfer_plots.plot_pretraining(results['pretraining'], {o: LABELS[o] for o in objectives},
                                  os.path.join(out, names[2]))
  transfer_plots.plot_finetuning(results['finetuning'],
                                 {s: label(s) for s in results['finetuning']},
                                 os.path.join(out, names[3]))
  return names
