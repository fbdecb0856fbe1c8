"""Fine-tunes each kept checkpoint of a pretraining run: at what FLOPs does pretraining pay?

python -m research.transfer_study.checkpoint_sweep --run=RUN --out=DIR [--task=SST-2] \
    [--steps=3000,6000] [--layer_decays=0,1] [--seeds=0] [--finetune_set pooling=mean]

RUN is an `electra_jax.main` workdir. Each checkpoint it has committed (or those --steps names),
and the same network from random initialisation (the run's model and vocabulary), is fine-tuned
with the paper's recipe (configs/finetune/glue.py, `--config.init_step`) at each layer-wise
decay of --layer_decays (0 = the recipe's, 1 = none): every start gets the same choice, as in
the transfer study, where random init keeps the better of the two. Each is one part,
DIR/<start>[-decay-<d>], --jobs at a time on their own cores (study_parts). Then
DIR/sweep.json, DIR/sweep.md and DIR/sweep.png put, against pretraining FLOPs, the run's
held-out discriminator AUC and MLM accuracy at each evaluation and each checkpoint's score per
decay and seed, beside random init's. Running it again skips finished parts (also in a DIR
moved elsewhere, and with RUN or GLUE moved: a run is known by its first config.json, GLUE by
the task's files; another run trained where RUN was is refused) and fine-tunes checkpoints
saved since, so it can follow a run that is still training. `--finetune_set FIELD=VALUE` (repeatable) gives every fine-tuning run one more setting of
configs/finetune/glue.py, e.g. `pooling=mean` or `reinit=embeddings`, and keeps its runs
beside those without (DIR/step-N-pooling=mean). An --out holds one sweep: another --run, --task,
--glue_dir, --max_seq_length, --train_examples or --finetune_epochs into it is refused before
anything runs (--seeds may change).
"""

import argparse
import glob
import hashlib
import json
import os
import sys
import time

from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.training.report import format_duration
from research.transfer_study import finetune_glue, study_parts, transfer_report

SHARED = os.path.join(os.path.dirname(finetune_glue.REPO), 'shared', 'data')
CURVES = {'eval_disc_auc': 'held-out discriminator AUC',
          'eval_mlm_accuracy': 'held-out MLM accuracy'}
# Fine-tuning fields each part's command sets from the sweep's own flags.
SWEEP_FIELDS = {'init_from': '--run', 'init_step': '--steps', 'layer_decay': '--layer_decays',
                'task': '--task', 'data_dir': '--glue_dir', 'seeds': '--seeds',
                'max_seq_length': '--max_seq_length', 'max_train_examples': '--train_examples',
                'num_epochs': '--finetune_epochs'}
# The sweep's flags that every part shares and no part's folder name holds. Another value of one
# of them in the same --out would fine-tune each start again into the folder of its earlier run
# (which finetune refuses), or report runs of two recipes as one sweep.
SHARED_SETTINGS = ('run', 'task', 'glue_dir', 'max_seq_length', 'train_examples',
                   'finetune_epochs')


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.checkpoint_sweep',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--run', required=True, help='a pretraining workdir (electra_jax.main)')
  parser.add_argument('--out', required=True, help='where the fine-tuning runs and report go')
  parser.add_argument('--task', default='SST-2', help='a GLUE task of --glue_dir')
  parser.add_argument('--steps', default='',
                      help="comma-separated checkpoint steps; '' = every one the run has")
  parser.add_argument('--layer_decays', default='0,1',
                      help="comma-separated layer-wise decays for every start; 0 = the "
                      "recipe's (0.8 for small-sized networks), 1 = none")
  parser.add_argument('--random_init', action=argparse.BooleanOptionalAction, default=True,
                      help='also fine-tune the network from random initialisation')
  parser.add_argument('--glue_dir', default=os.path.join(SHARED, 'glue'))
  parser.add_argument('--seeds', default='0', help='fine-tuning seeds')
  parser.add_argument('--max_seq_length', type=int, default=128)
  parser.add_argument('--train_examples', type=int, default=20_000,
                      help='one fixed draw (seed 0) of the training set; 0 = all of it')
  parser.add_argument('--finetune_epochs', type=float, default=0.0,
                      help="0 = the recipe's (3); the paper gives small tasks 10")
  parser.add_argument('--finetune_set', action='append', default=[], metavar='FIELD=VALUE',
                      help='one more fine-tuning config setting for every start, e.g. '
                      '--finetune_set pooling=mean; repeat for more')
  parser.add_argument('--jobs', type=int, default=1,
                      help='checkpoints fine-tuned at once, each on its own cores')
  args = parser.parse_args(argv)
  args.run, args.out = os.path.abspath(args.run), os.path.abspath(args.out)
  args.glue_dir = os.path.abspath(args.glue_dir)
  if not os.path.exists(os.path.join(args.run, 'config.json')):
    raise UsageError(f'--run={args.run} is not a pretraining workdir (no config.json); name '
                     'the --workdir that electra_jax.main trained')
  if not os.path.isdir(os.path.join(args.glue_dir, args.task)):
    raise UsageError(f'--glue_dir={args.glue_dir} has no {args.task} folder; name the folder '
                     'that holds GLUE\'s task folders (SST-2/, MRPC/, ...)')
  kept = study_parts.committed_steps(args.run)
  try:
    asked = [int(s) for s in args.steps.split(',') if s]
  except ValueError:
    raise UsageError(f'--steps={args.steps}: give checkpoint steps as integers, e.g. '
                     '--steps=3000,6000') from None
  missing = sorted(set(asked) - set(kept))
  if missing or not kept:
    raise UsageError(f'--run={args.run} has no checkpoint of step(s) '
                     f'{", ".join(map(str, missing)) or "any"}; it keeps '
                     f'{", ".join(map(str, kept)) or "none"}')
  args.steps = sorted(asked) or kept
  try:
    args.layer_decays = [float(d) for d in args.layer_decays.split(',') if d]
  except ValueError:
    raise UsageError(f'--layer_decays={args.layer_decays}: give numbers, e.g. 0,1') from None
  if not args.layer_decays or any(not 0 <= d <= 1 for d in args.layer_decays):
    raise UsageError(f'--layer_decays={args.layer_decays}: each in [0, 1] (0 = the recipe\'s, '
                     '1 = none)')
  for setting in args.finetune_set:
    field = setting.split('=', 1)[0]
    if '=' not in setting or not field:
      raise UsageError(f'--finetune_set {setting}: give FIELD=VALUE, e.g. pooling=mean')
    if field in SWEEP_FIELDS:
      raise UsageError(f'--finetune_set {setting}: the sweep sets {field} itself; use '
                       f'{SWEEP_FIELDS[field]}')
  return args


def init_flags(args, step: int | None, decay: float) -> list[str]:
  """Fine-tuning flags that start from checkpoint `step` of the run, or (None) from random
  weights of its network, at layer-wise decay `decay` (0 = the recipe's)."""
  decay_flags = [f'--config.layer_decay={decay:g}'] if decay else []
  if step is not None:
    return [f'--config.init_from={args.run}', f'--config.init_step={step}'] + decay_flags
  return finetune_glue.random_init_flags(finetune_glue.run_model(args.run),
                                         finetune_glue.run_vocab(args.run)) + decay_flags


def run_configs(run: str) -> list[str]:
  """sha256 of each config the run has had, its first first: those it kept as
  config.until-<step>.json when it resumed with other settings (more steps, say), then
  config.json. The first is the run's identity: it moves with the run, and a run continued with
  more steps is still the one whose checkpoints the sweep fine-tuned."""
  kept = glob.glob(os.path.join(glob.escape(run), 'config.until-*.json'))
  kept.sort(key=lambda path: int(path.rsplit('-', 1)[1].split('.')[0]))
  digests = []
  for path in [*kept, os.path.join(run, 'config.json')]:
    with open(path, 'rb') as f:
      digests.append(hashlib.sha256(f.read()).hexdigest())
  return digests


def task_files(args) -> dict:
  """The task's files in --glue_dir, by name and size."""
  task_dir = os.path.join(args.glue_dir, args.task)
  return {name: os.path.getsize(os.path.join(task_dir, name))
          for name in sorted(os.listdir(task_dir))}


def check_same_sweep(args, state: dict):
  """Refuses an --out that holds a sweep with other shared settings, before anything runs;
  records this sweep's settings otherwise. Seeds may change, as finetune lets them. A run or
  GLUE is known by what it holds, wherever it is: the run by its first config (run_configs), GLUE
  by the task's files. So a run or GLUE moved elsewhere is accepted, and another one put where the
  sweep's was (a run trained again with another seed) is refused."""
  now = {name: getattr(args, name) for name in SHARED_SETTINGS}
  before = state.get('settings')
  report = os.path.join(args.out, 'sweep.json')
  if before is None and os.path.exists(report):  # a sweep from before settings were recorded
    with open(report) as f:
      before = json.load(f)
  configs, files = run_configs(args.run), task_files(args)
  known = state.get('identities', {})
  same = {'run': known.get('run') in configs, 'glue_dir': known.get('glue_dir') == files}
  what = {'run': 'another run (its config.json is not the one the sweep fine-tuned)',
          'glue_dir': f'other {args.task} files than those the sweep fine-tuned on'}
  changed = []
  for name in SHARED_SETTINGS:
    if not before or name not in before:
      continue
    if before[name] != now[name] and not (name in known and same[name]):
      changed.append(f'{name}: {before[name]!r} there, {now[name]!r} now')
    elif before[name] == now[name] and name in known and not same[name]:
      changed.append(f'{name}: {now[name]!r} now holds {what[name]}')
  if changed:
    raise UsageError(f'--out={args.out} holds a sweep with other settings ({"; ".join(changed)}); '
                     'use another --out, or its settings to add to it. Nothing was changed')
  state['settings'] = now
  state['identities'] = {'run': known['run'] if same['run'] else configs[0], 'glue_dir': files}


# The fine-tuning settings that name where the run and GLUE are: a folder begun with other values
# (the run or GLUE has moved since) is refused by finetune, which would not mix two runs.
PLACES = ('init_from', 'vocab', 'data_dir')


def set_aside_if_begun_elsewhere(name: str, out: str, command: list[str]):
  """Renames an unfinished part's folder whose config names the run or GLUE where they were
  (the sweep found them the same, elsewhere), so that the part starts again; its files stay."""
  saved_path = os.path.join(out, 'config.json')
  if os.path.exists(os.path.join(out, 'results.json')) or not os.path.exists(saved_path):
    return
  with open(saved_path) as f:
    saved = json.load(f)
  flags = dict(arg[len('--config.'):].split('=', 1) for arg in command
               if arg.startswith('--config.') and '=' in arg)
  moved = [f'{field} {saved.get(field)!r}' for field in PLACES
           if field in flags and saved.get(field) != flags[field]]
  if moved:
    study_parts.set_aside(name, out, f'was begun with {", ".join(moved)}', 'moved')


def part_name(args, step: int | None, decay: float) -> str:
  """The part's folder: its start, its decay and the user's settings, so that a sweep with other
  --finetune_set values keeps its runs beside this one's."""
  name = 'random' if step is None else f'step-{step}'
  if decay:
    name += f'-decay-{decay:g}'
  return ''.join([name, *(f"-{s.replace('/', '_')}" for s in args.finetune_set)])


def fine_tune(args, state: dict, step: int | None, decay: float,
              cores: set[int] | None = None):
  name = part_name(args, step, decay)
  out = os.path.join(args.out, name)
  command = finetune_glue.fine_tune_command(
      args.task, out, init_flags(args, step, decay), glue_dir=args.glue_dir,
      seeds=args.seeds, max_seq_length=args.max_seq_length, train_examples=args.train_examples)
  if args.finetune_epochs:
    command.append(f'--config.num_epochs={args.finetune_epochs}')
  command += [f'--config.{setting}' for setting in args.finetune_set]
  # Every folder by role: a sweep moved to another folder, run from another checkout or venv, or
  # given its run or GLUE in another place (check_same_sweep found them the same) finds its
  # finished parts.
  roots = {'$OUT': args.out, '$REPO': finetune_glue.REPO, '$RUN': args.run,
           '$GLUE': args.glue_dir}
  if os.path.exists(os.path.join(out, 'results.json')) and \
      study_parts.same_command(state.get(name, {}).get('command'), command, roots):
    study_parts.skip(state, name)
    return
  with study_parts.STATE_LOCK:
    state.pop(name, None)  # a run with other settings: its time is not this one's
  set_aside_if_begun_elsewhere(name, out, command)
  start = 'random init' if step is None else f'step {step:,}'
  decay_text = f'{decay:g}' if decay else "the recipe's"
  study_parts.run_part(args.out, state, name, command,
                       f'{args.task} from {start}, layer decay {decay_text}, seeds {args.seeds}',
                       cores, roots=roots)


def scores(path: str) -> dict:
  """The score metric's median and per-seed values of one fine-tuning workdir's results.json."""
  result = finetune_glue.read_results(path)
  metric = result['score_metric'].split()[1]
  per_seed = {seed: s[metric] for seed, s in transfer_report.per_seed_scores(result).items()}
  return {'score_metric': result['score_metric'], 'median': result['score'], 'seeds': per_seed,
          'layer_decay': result['layer_decay']}


def finished(args, step: int | None) -> dict[str, dict]:
  """{layer decay: scores} of the start's fine-tuning runs that have finished."""
  done = {}
  for decay in args.layer_decays:
    out = os.path.join(args.out, part_name(args, step, decay))
    if os.path.exists(os.path.join(out, 'results.json')):
      run = scores(out)
      done[f"{run['layer_decay']:g}"] = run
  return done


def best(by_decay: dict[str, dict]) -> dict | None:
  """The decay with the better median (the first listed on a tie), as random init gets."""
  return max(by_decay.values(), key=lambda run: run['median']) if by_decay else None


def summarize(args) -> dict:
  """The run's held-out curves and every fine-tuned start's scores, against FLOPs."""
  per_step = transfer_report.flops_per_step(args.run)
  evals = {}  # by step: a resumed run logs the steps since its checkpoint again, keep the last
  for line in transfer_report.read_metrics(args.run):
    if any(key in line for key in CURVES):
      evals[line['step']] = {'step': line['step'], 'flops': line['step'] * per_step,
                             **{key: line[key] for key in CURVES if key in line}}
  checkpoints = [{'step': step, 'flops': step * per_step, 'by_decay': finished(args, step)}
                 for step in args.steps]
  random = finished(args, None) if args.random_init else {}
  return {'run': args.run, 'task': args.task, 'seeds': args.seeds,
          'train_examples': args.train_examples, 'max_seq_length': args.max_seq_length,
          'finetune_set': args.finetune_set, 'flops_per_step': per_step,
          'eval_curve': [evals[s] for s in sorted(evals)],
          'checkpoints': [c for c in checkpoints if c['by_decay']],
          'random_init': {'by_decay': random, 'best': best(random)} if random else None}


def score_cell(run: dict | None) -> str:
  if run is None:
    return '–'
  return (f"{100 * run['median']:.1f} ("
          f"{', '.join(f'{100 * v:.1f}' for v in run['seeds'].values())})")


def markdown(summary: dict) -> str:
  evals = {m['step']: m for m in summary['eval_curve']}
  decays = sorted({d for c in summary['checkpoints'] for d in c['by_decay']} |
                  set((summary['random_init'] or {}).get('by_decay', {})), key=float)
  metric = next((run['score_metric'] for c in summary['checkpoints']
                 for run in c['by_decay'].values()), '')
  lines = [f"# {summary['task']} from each checkpoint of {summary['run']}", '',
           f"{metric} x100: the median of seeds {summary['seeds']}, then each seed, at each "
           'layer-wise decay.'
           + (f" Every start fine-tuned with {', '.join(summary['finetune_set'])}."
              if summary['finetune_set'] else ''), '',
           '| start | FLOPs | held-out AUC / MLM acc | '
           + ' | '.join(f'decay {d}' for d in decays) + ' |',
           '|---|---|---|' + '---|' * len(decays)]
  if summary['random_init']:
    by_decay = summary['random_init']['by_decay']
    lines.append('| random init | 0 | – | '
                 + ' | '.join(score_cell(by_decay.get(d)) for d in decays) + ' |')
  for c in summary['checkpoints']:
    m = evals.get(c['step'], {})
    held_out = ' / '.join(f'{m[k]:.3f}' if k in m else '–' for k in CURVES)
    lines.append(f"| step {c['step']:,} | {c['flops']:.3g} | {held_out} | "
                 + ' | '.join(score_cell(c['by_decay'].get(d)) for d in decays) + ' |')
  return '\n'.join(lines) + '\n'


def plot(summary: dict, path: str):
  import matplotlib  # pylint: disable=g-import-not-at-top  (benchmark-only dependency)
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 3, figsize=(14, 4))
  for ax, (key, title) in zip(axes, CURVES.items()):
    curve = [m for m in summary['eval_curve'] if key in m]
    ax.plot([m['flops'] for m in curve], [m[key] for m in curve], marker='o', markersize=3)
    ax.set(title=title, xlabel='pretraining FLOPs')
  ax = axes[2]
  decays = sorted({d for c in summary['checkpoints'] for d in c['by_decay']}, key=float)
  for i, decay in enumerate(decays):
    color = f'C{i}'
    runs = [(c['flops'], c['by_decay'][decay]) for c in summary['checkpoints']
            if decay in c['by_decay']]
    for flops_done, run in runs:
      values = [100 * v for v in run['seeds'].values()]
      ax.scatter([flops_done] * len(values), values, color=color, alpha=0.6, s=12)
    ax.plot([f for f, _ in runs], [100 * run['median'] for _, run in runs], color=color,
            marker='o', label=f'from the checkpoint, layer decay {decay}')
    random = (summary['random_init'] or {}).get('by_decay', {}).get(decay)
    if random:
      ax.axhline(100 * random['median'], color=color, linestyle='--',
                 label=f'random init, layer decay {decay}')
  ax.set(title=f"{summary['task']} dev, fine-tuned (median; dots: seeds)",
         xlabel='pretraining FLOPs')
  ax.legend(fontsize=7)
  for ax in axes:
    ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def write_report(args) -> list[str]:
  summary = summarize(args)
  names = ['sweep.json', 'sweep.md', 'sweep.png']
  with open(os.path.join(args.out, names[0]), 'w') as f:
    json.dump(summary, f, indent=2)
    f.write('\n')
  with open(os.path.join(args.out, names[1]), 'w') as f:
    f.write(markdown(summary))
  plot(summary, os.path.join(args.out, names[2]))
  return [os.path.join(args.out, n) for n in names]


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  with run_lock.only_run_in(args.out, 'checkpoint sweep'):
    study_parts.stop_parts_on_sigterm()
    state = study_parts.load_state(args.out)
    check_same_sweep(args, state)
    started = time.perf_counter()
    starts = [None, *args.steps] if args.random_init else args.steps
    parts = {part_name(args, step, decay): (
        (lambda cores, step=step, decay=decay: fine_tune(args, state, step, decay, cores)), ())
             for step in starts for decay in args.layer_decays}
    try:
      study_parts.run_all(parts, args.jobs)
    finally:
      study_parts.save_state(args.out, state)
    written = write_report(args)
  print(f'report: {", ".join(written)} '
        f'({format_duration(time.perf_counter() - started)})', flush=True)


if __name__ == '__main__':
  try:
    main()
  except UsageError as e:
    sys.exit(f'checkpoint_sweep: error: {e}')
