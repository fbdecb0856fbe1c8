"""The transfer study's pretraining, sized to a wall-clock budget on the machine at hand.

python -m research.transfer_study.timed_pretraining --out=DIR --data=PREPARED_DIR --seconds=S \
    [--config=configs/mini.py] [--set FIELD=VALUE ...] [--objectives=electra,mlm]

For a borrowed accelerator with minutes to spare: it first runs every objective at once, each
in its own process on its own share of the cores as the real runs will, until all of them have
stepped side by side for --probe_overlap seconds; it reads each one's step rate over that span
from the time stamps of its log, and then pretrains them at once for as many steps as
fit in what is left of --seconds, ELECTRA's count rounded down to --step_multiple and every
other objective at ELECTRA's FLOPs (the transfer study's plan, `study.plan_pretraining`).
The warmup is --warmup_fraction of the steps; evaluation and checkpoints are spread evenly
(--evals, --saves). DIR is then a transfer study's --out with its pretraining done (DIR/electra,
DIR/mlm, DIR/state.json, DIR/timed_plan.json): put the prepared corpus at DIR/data and run
`python -m research.transfer_study --out=DIR --parts=finetune` with the same --config, --set and
--pretrain_steps (timed_plan.json has them) to fine-tune it, on this machine or another.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types

from electra_jax.common.errors import UsageError
from electra_jax.data import store
from research.transfer_study import study, study_parts


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.timed_pretraining',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', required=True, help='the study directory to pretrain into')
  parser.add_argument('--data', required=True, help='a prepared corpus (electra_jax.prepare)')
  parser.add_argument('--seconds', type=float, required=True,
                      help='wall-clock budget for the probe and the runs, compiling included')
  parser.add_argument('--config', default=os.path.join(study.REPO, 'configs', 'mini.py'))
  parser.add_argument('--set', action='append', default=[], metavar='FIELD=VALUE')
  parser.add_argument('--objectives', default='electra,mlm')
  parser.add_argument('--probe_log_every', type=int, default=100,
                      help="steps between the probe's log lines, its clock")
  parser.add_argument('--probe_overlap', type=float, default=15,
                      help='seconds for which every run must step side by side in the probe')
  parser.add_argument('--probe_limit', type=float, default=180,
                      help='seconds after which the probe stops regardless')
  parser.add_argument('--step_multiple', type=int, default=500)
  parser.add_argument('--warmup_fraction', type=float, default=0.05)
  parser.add_argument('--evals', type=int, default=20, help='evaluations over the run')
  parser.add_argument('--saves', type=int, default=4, help='checkpoints over the run')
  parser.add_argument('--margin', type=float, default=0.85,
                      help='share of the time left that the runs are planned to take')
  args = parser.parse_args(argv)
  args.objectives = study.objectives_listed(args.objectives)
  if args.seconds <= 0:
    raise UsageError(f'--seconds={args.seconds}: give the wall-clock budget in seconds (> 0)')
  if not os.path.exists(os.path.join(args.data, 'train', store.MANIFEST)):
    raise UsageError(f'{args.data} holds no prepared corpus; make one with '
                     'python -m electra_jax.prepare --out=DIR (docs/data.md)')
  return args


def study_args(args, steps: int, extra: list[str]):
  """The namespace study.py's planning and pretraining read."""
  return types.SimpleNamespace(out=args.out, config=args.config, set=[*args.set, *extra],
                               pretrain_steps=steps, objectives=args.objectives)


LOG_LINE = re.compile(r'^I\d{4} (\d\d):(\d\d):(\d\d\.\d+) .*\] step (\d+)/\d+ \|')


def logged_steps(log_path: str) -> list[tuple[float, int]]:
  """(seconds of the day, step) of every training log line main wrote."""
  points, day = [], 0.0
  with open(log_path, errors='replace') as f:
    for line in f:
      if match := LOG_LINE.match(line):
        hours, minutes, seconds, step = match.groups()
        clock = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        if points and clock + day < points[-1][0]:
          day += 86400.0  # past midnight
        points.append((clock + day, int(step)))
  return points


def rate_within(points: list[tuple[float, int]], start: float, end: float) -> float | None:
  """Steps per second between the first and last log line inside [start, end]."""
  inside = [(t, s) for t, s in points if start <= t <= end]
  if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
    return None
  return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def probe(args, data_dir: str, shares: list[set[int]]) -> dict[str, dict]:
  """Every objective at once, briefly: {objective: steps/s while all of them ran}.

  The programs finish compiling at different times, so a rate over a whole log would count
  steps taken alone on the accelerator; only the span in which every run was stepping (from the
  last first log line to the first last one) is measured.
  """
  plan = study.plan_pretraining(
      study_args(args, 10**7, ['eval_every=0', f'log_every={args.probe_log_every}',
                               f'save_every={10**8}']), data_dir)
  processes, started, now = {}, time.perf_counter(), datetime.datetime.now()
  start_of_day = now.hour * 3600 + now.minute * 60 + now.second + now.microsecond / 1e6
  for objective, cores in zip(args.objectives, shares):
    workdir = os.path.join(args.out, 'probe', objective)
    shutil.rmtree(workdir, ignore_errors=True)
    command = [sys.executable, '-m', 'electra_jax.main', f'--workdir={workdir}',
               *plan[objective]['flags']]
    with open(os.path.join(args.out, 'logs', f'probe_{objective}.log'), 'w') as log:
      processes[objective] = subprocess.Popen(
          command, cwd=study.REPO, stdout=log, stderr=subprocess.STDOUT,
          env=study_parts.child_env(args.out),
          preexec_fn=lambda c=cores: os.sched_setaffinity(0, c))
  # Until every run has logged for --probe_overlap seconds side by side (or --probe_limit).
  logs = {o: os.path.join(args.out, 'logs', f'probe_{o}.log') for o in processes}
  while True:
    time.sleep(1)
    for objective, process in processes.items():
      if process.poll() is not None:
        sys.exit(f'probe of {objective} ended (exit {process.returncode}); see {logs[objective]}')
    points = {o: logged_steps(path) for o, path in logs.items()}
    if all(points.values()) and span_seconds(shared_span(points)) >= args.probe_overlap:
      break
    if time.perf_counter() - started > args.probe_limit:
      break
  for process in processes.values():
    process.kill()
    process.wait()
  probe_seconds = round(time.perf_counter() - started, 1)
  rates = rates_side_by_side(points, f'{args.out}/logs', args.probe_log_every)
  for objective, rate in rates.items():
    rate['probe_seconds'] = probe_seconds
    # starting, loading and compiling, up to the first log line
    rate['startup_s'] = round((points[objective][0][0] - start_of_day) % 86400, 1)
  return rates


def shared_span(points: dict[str, list[tuple[float, int]]]) -> tuple[float, float]:
  """From the last run's first log line to the first run's last: when all of them stepped."""
  return (max(p[0][0] for p in points.values()), min(p[-1][0] for p in points.values()))


def span_seconds(span: tuple[float, float]) -> float:
  return span[1] - span[0]


def rates_side_by_side(points: dict[str, list[tuple[float, int]]], logs: str,
                       log_every: int) -> dict[str, dict]:
  """{objective: its steps/s over the shared span}, from each run's (time, step) log points.

  With too little overlap to measure, a run is assumed to get an even share of the device.
  """
  if not all(len(p) >= 2 for p in points.values()):
    raise UsageError(f'a probe run logged fewer than two steps (see {logs}); give it more '
                     f'--probe_limit or a smaller --probe_log_every than {log_every}')
  span = shared_span(points)
  rates = {}
  for objective, logged in points.items():
    alone = rate_within(logged, logged[0][0], logged[-1][0])
    rate = rate_within(logged, *span)
    rates[objective] = {'steps_per_s': rate if rate is not None else alone / len(points),
                        'steps_per_s_whole_log': alone,
                        'overlap_s': round(span_seconds(span), 1),
                        'steps_first_logged': logged[0][1]}
  return rates


def main(argv=None):
  args = parse_args(argv)
  args.out = os.path.abspath(args.out)
  deadline = time.perf_counter() + args.seconds
  os.makedirs(os.path.join(args.out, 'logs'), exist_ok=True)
  data_dir = os.path.abspath(args.data)
  cores = study_parts.usable_cores()
  shares = [set(cores[i::len(args.objectives)]) for i in range(len(args.objectives))]

  study_parts.stop_parts_on_sigterm()
  rates = probe(args, data_dir, shares)
  unit = study.plan_pretraining(study_args(args, 1000, []), data_dir)
  # Starting and compiling again, evaluation's program too: half as much again as the probe's.
  overhead = 1.5 * max(r['startup_s'] for r in rates.values())
  left = (deadline - time.perf_counter() - overhead) * args.margin
  # ELECTRA steps per second of the slowest objective, each at ELECTRA's FLOPs.
  electra_rate = min(rates[o]['steps_per_s'] * unit[o]['steps'] / 1000 for o in args.objectives)
  steps = int(left * electra_rate) // args.step_multiple * args.step_multiple
  if steps < args.step_multiple:
    raise UsageError(f'{left:.0f} s left after the probe: too little for {args.step_multiple} '
                     f'steps at {electra_rate:.1f} ELECTRA steps/s; give more --seconds or a '
                     'smaller --step_multiple')
  extra = [f'warmup_steps={round(steps * args.warmup_fraction)}',
           f'eval_every={steps // args.evals}', f'save_every={steps // args.saves}',
           f'keep_checkpoints={args.saves + 1}', f'log_every={max(steps // 200, 1)}']
  sargs = study_args(args, steps, extra)
  plan = study.plan_pretraining(sargs, data_dir)
  record = {'steps': steps, 'set': sargs.set, 'config': args.config, 'probe': rates,
            'compile_overhead_s': round(overhead, 1), 'planned_seconds': round(left, 1),
            'plan': {o: {k: plan[o][k] for k in ('steps', 'flops_per_step')}
                     for o in args.objectives}}
  with open(os.path.join(args.out, 'timed_plan.json'), 'w') as f:
    json.dump(record, f, indent=2)
  print(json.dumps(record), flush=True)

  state = study_parts.load_state(args.out)
  started = time.perf_counter()
  parts = {f'pretrain_{o}': ((lambda share, o=o: study.pretrain(
      sargs, state, o, plan[o], share)), ()) for o in args.objectives}
  study_parts.run_all(parts, len(args.objectives))
  record['runs_seconds'] = round(time.perf_counter() - started, 1)
  with open(os.path.join(args.out, 'timed_plan.json'), 'w') as f:
    json.dump(record, f, indent=2)
  print(json.dumps({'runs_seconds': record['runs_seconds']}), flush=True)


if __name__ == '__main__':
  try:
    main()
  except UsageError as e:
    sys.exit(f'timed_pretraining: error: {e}')
