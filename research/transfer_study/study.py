"""Does pretraining pay off? ELECTRA against BERT-style MLM at equal pretraining FLOPs and
against random initialisation, fine-tuned on SST-2 and MRPC, in one command.

python -m research.transfer_study --out=runs/transfer [--config=configs/mini.py]

Parts (--parts picks some; each is skipped when DIR shows it finished with the same command,
so running the command again resumes where it stopped, also in a DIR moved elsewhere: the
commands are compared with their folders named by role, see roots()):
  pretrain  the corpus (--corpus: each subfolder's *.txt files, e.g. gutenberg/ and enwiki/,
            --held_out files of each kept for evaluation) prepared once into DIR/data by
            electra_jax.prepare (which detects each file's format); then
            electra_jax.main on it twice: ELECTRA for the config's steps (DIR/electra), and
            config.objective=mlm (DIR/mlm) for as many steps as cost the same model FLOPs
            (electra_jax/training/flops.py). main resumes an interrupted run from its checkpoint.
  finetune  electra_jax.finetune with the paper's recipe on SST-2 (a fixed random subset) and
            MRPC, for every seed, from each pretrained encoder and from random initialisation,
            each with the recipe's layer-wise decay (DIR/finetune/<start>-<task>) and with none
            (<start>_no_decay-<task>); each start's score is its better setting.
            --no-both_decays fine-tunes the pretrained encoders at the recipe's decay only.
--objectives picks what is pretrained (electra,mlm by default; the paper's Table 5 ablations
electra_15, replace_mlm and all_tokens_mlm too), each at the FLOPs of ELECTRA's run;
--no-random_init leaves out the random-init starts. --beside=DIR puts the objectives of the study
in DIR (run with the same settings, checked before anything runs) into this one's comparison
with the paper's Table 5.
--jobs runs that many parts at once (by default one per core on a CPU host, one at a time on a GPU
or TPU, which one process holds whole), each pinned to its own share of the CPU cores: the
pretraining runs first, and each fine-tuning run (the longest first) as soon as a share is free
and its encoder has finished pretraining, so a core that one pretraining run leaves is not idle
while another still runs. Whatever has finished is then summarised in DIR/results.json,
DIR/results.md and two plots (see transfer_report.py and transfer_plots.py). Each part's output
goes to DIR/logs/<part>.log; the console gets a line as each part starts and one with its wall
time as it ends. DIR/state.json keeps each finished part's command and wall time, and the
study's own wall time (the sum of the invocations that ran something), which with --jobs > 1 is
less than the parts' sum.
"""

import argparse
import os
import sys
import time

from absl import flags
import ml_collections
from ml_collections import config_flags

from electra_jax.common import config as config_lib, run_lock
from electra_jax.common.errors import UsageError
from electra_jax.data import store
from electra_jax.training import flops
from research.transfer_study import finetune_glue, study_corpus, study_parts, transfer_report

REPO = finetune_glue.REPO
SHARED = os.path.join(os.path.dirname(REPO), 'shared', 'data')
TASKS, DECAYS = transfer_report.TASKS, transfer_report.DECAYS


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', required=True, help='directory of the whole study')
  parser.add_argument('--config', default=os.path.join(REPO, 'configs', 'mini.py'),
                      help='pretraining config file, the same for both objectives')
  parser.add_argument('--set', action='append', default=[], metavar='FIELD=VALUE',
                      help='a pretraining config override for both runs (and the data), e.g. '
                      '--set learning_rate=5e-4; repeat for more')
  parser.add_argument('--pretrain_steps', type=int, default=0,
                      help="ELECTRA's pretraining steps; 0 = the config's num_train_steps")
  parser.add_argument('--corpus', default=os.path.join(SHARED, 'pretraining-text'),
                      help='folder whose subfolders hold the text, one source each (*.txt in any '
                      'format the reader detects: Project Gutenberg books, WikiExtractor output, '
                      'one sentence per line), passed as they are')
  parser.add_argument('--held_out', type=int, default=2,
                      help='files of each folder (drawn with seed 0) kept out of training as '
                      'evaluation text')
  parser.add_argument('--glue_dir', default=os.path.join(SHARED, 'glue'),
                      help='folder holding SST-2/ and MRPC/')
  parser.add_argument('--seeds', default='0,1,2', help='fine-tuning seeds')
  parser.add_argument('--max_seq_length', type=int, default=128, help='for fine-tuning')
  parser.add_argument('--sst2_examples', type=int, default=20_000,
                      help='SST-2 training examples, one fixed draw (seed 0) for every start')
  parser.add_argument('--mrpc_examples', type=int, default=0,
                      help='MRPC training examples; 0 = all (a smaller number is for tests)')
  parser.add_argument('--finetune_epochs', type=float, default=0.0,
                      help="0 = the recipe's (3); less is for tests")
  parser.add_argument('--jobs', type=int, default=0,
                      help='parts run at once, each on its own cores; 0 = one per CPU core '
                      '(at most 8) on a CPU host, 1 where JAX finds a GPU or TPU')
  parser.add_argument('--objectives', default='electra,mlm',
                      help='comma-separated config.objective values to pretrain, each at the '
                      "FLOPs of ELECTRA's run, and fine-tune; add electra_15, replace_mlm or "
                      "all_tokens_mlm for the paper's Table 5")
  parser.add_argument('--random_init', action=argparse.BooleanOptionalAction, default=True,
                      help='also fine-tune from random initialisation (--no-random_init to skip, '
                      'e.g. when another --out has those runs)')
  parser.add_argument('--both_decays', action=argparse.BooleanOptionalAction, default=True,
                      help="fine-tune the pretrained encoders with the recipe's layer-wise decay "
                      'and with none, and keep the better, as random init always is '
                      "(--no-both_decays: the recipe's only, ~35 minutes less at the defaults)")
  parser.add_argument('--beside', default='',
                      help="another study's --out, run with the same settings (e.g. the "
                      "ELECTRA and MLM study beside the ablations'): its objectives join this "
                      "study's comparison with the paper's Table 5")
  parser.add_argument('--parts', default='pretrain,finetune',
                      help='comma-separated: pretrain, finetune (the report is always written)')
  args = parser.parse_args(argv)
  # Absolute: the parts run in the repository, and their records name these folders by role.
  args.out, args.corpus, args.glue_dir = map(os.path.abspath, (args.out, args.corpus,
                                                              args.glue_dir))
  args.parts = [p for p in args.parts.split(',') if p]
  if not args.jobs:
    args.jobs = study_parts.default_jobs(study_parts.jax_backend(), len(study_parts.usable_cores()))
  unknown = set(args.parts) - {'pretrain', 'finetune'}
  if unknown:
    raise UsageError(f"--parts={','.join(args.parts)}: unknown {', '.join(sorted(unknown))}; "
                     'use pretrain, finetune or both')
  args.objectives = objectives_listed(args.objectives)
  return args


def objectives_listed(flag: str) -> list[str]:
  """--objectives as a list: pretraining objectives, each named at most once."""
  objectives = [o for o in flag.split(',') if o]
  known = transfer_report.LABELS.keys() - {'random'}
  if not objectives or set(objectives) - known or len(set(objectives)) != len(objectives):
    raise UsageError(f"--objectives={','.join(objectives)}: list each at most once, from "
                     f"{', '.join(sorted(known))}")
  return objectives


def starts(args) -> list[str]:
  """The fine-tuning runs, a name per start and decay setting: each pretrained objective's, then
  random init's."""
  runs = transfer_report.fine_tuned_variants(vars(args), args.objectives)
  return [v for variants in runs.values() for v in variants]


# ---------------------------------------------------------------- the plan


def resolve_config(config_flags_list: list[str]) -> ml_collections.ConfigDict:
  """The config main will run with these flags, parsed exactly as main parses them."""
  argv = ['transfer_study', *config_flags_list]
  config_lib.check_overrides(argv, config_flags_list[0].split('=', 1)[1])
  values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', None, 'pretraining config', flag_values=values,
                                  lock_config=True, sys_argv=argv)
  values(argv)
  return config_lib.resolve(values.config)  # as train_and_evaluate resolves it


def roots(args) -> dict[str, str]:
  """The folders a part's command names by role in its record (study_parts.by_role): the study's
  own, the repository, the corpus and GLUE. What a part computes is compared, not where: a study
  carried to another machine resumes there, and a corpus is compared by its files' names, as
  --beside compares studies."""
  return {'$OUT': args.out, '$REPO': REPO, '$CORPUS': args.corpus, '$GLUE': args.glue_dir}


def config_file_flags(args) -> list[str]:
  """The pretraining config file and the user's overrides: what the data and both runs share."""
  return [f'--config={os.path.abspath(args.config)}', *(f'--config.{s}' for s in args.set)]


def pretrain_flags(args, data_dir: str, steps: int | None, objective: str) -> list[str]:
  """main's config flags for one objective; the ELECTRA run leaves config.objective alone."""
  config = [*config_file_flags(args), f'--config.data.prepared_dir={data_dir}']
  if steps is not None:
    config.append(f'--config.num_train_steps={steps}')
  if objective != 'electra':
    config.append(f'--config.objective={objective}')
  return config


def plan_pretraining(args, data_dir: str) -> dict[str, dict]:
  """Per objective: its config flags, steps and model FLOPs per step, at the total FLOPs of
  ELECTRA's run (planned, and so kept the same, whether or not ELECTRA is in --objectives)."""
  electra = resolve_config(pretrain_flags(args, data_dir, None, 'electra'))
  if 'objective' not in electra:
    raise UsageError(f"{args.config} has no field 'objective': the MLM baseline needs an "
                     'electra_jax whose config has config.objective (electra or mlm)')
  steps = args.pretrain_steps or electra.num_train_steps
  plan = {}
  for objective in ['electra'] + [o for o in args.objectives if o != 'electra']:
    per_step = flops.train_step_flops(resolve_config(
        pretrain_flags(args, data_dir, steps, objective)))
    if objective != 'electra':
      steps = round(plan['electra']['steps'] * plan['electra']['flops_per_step'] / per_step)
    plan[objective] = {'flags': pretrain_flags(args, data_dir, steps, objective),
                       'steps': steps, 'flops_per_step': per_step}
  plan['model'] = electra.model.to_dict()
  plan['objectives'] = args.objectives
  return plan


# ---------------------------------------------------------------- the parts


def prepare_data(args, state: dict, data_dir: str):
  train, evaluation = study_corpus.held_out_split(args.corpus, args.held_out)
  command = [sys.executable, '-m', 'electra_jax.prepare', f'--out={data_dir}',
             *config_file_flags(args),
             f'--config.data.train_files={",".join(train)}',
             f'--config.data.eval_files={",".join(evaluation)}']
  finished = all(os.path.exists(os.path.join(data_dir, split, store.MANIFEST))
                 for split in ('train', 'eval'))
  if finished and study_parts.same_command(state.get('data', {}).get('command'), command,
                                           roots(args)):
    study_parts.skip(state, 'data')
  else:
    study_parts.run_part(args.out, state, 'data', command,
                         f'{len(train)} training and {len(evaluation)} evaluation files',
                         roots=roots(args))
  state['data']['held_out'] = evaluation
  state['data']['train_files'] = len(train)


def changed_flags(before: list[str], now: list[str]) -> list[str]:
  """Arguments that differ, other than the step count (raising it continues a run)."""
  keep = lambda args: {a for a in args if not a.startswith('--config.num_train_steps=')}
  return sorted(keep(before) ^ keep(now))


def pretrain(args, state: dict, objective: str, run: dict, cores: set[int] | None = None):
  name, workdir = f'pretrain_{objective}', os.path.join(args.out, objective)
  command = [sys.executable, '-m', 'electra_jax.main', f'--workdir={workdir}', *run['flags']]
  recorded = state.get(name, {}).get('command')
  steps = study_parts.committed_steps(workdir)
  changed = recorded and changed_flags(study_parts.by_role(recorded, roots(args)),
                                       study_parts.by_role(command, roots(args)))
  if steps and changed:
    raise UsageError(f'{workdir} was pretrained with other settings (changed: '
                     f'{" ".join(changed)}); use another --out, or delete {workdir} to '
                     'pretrain it again')
  if steps and steps[-1] > run['steps']:
    raise UsageError(f'{workdir} has a checkpoint at step {steps[-1]}, past the {run["steps"]} '
                     'steps asked for; use another --out')
  if steps and steps[-1] == run['steps'] and recorded:
    check_flops(workdir, run)
    study_parts.skip(state, name, f', {run["steps"]:,} steps')
    return
  if steps and name not in state:
    # Steps trained before this study first ran the part (by hand, or in another directory):
    # no timer of the study's covers them, so the report must not pass its wall time off as theirs.
    state[name] = {'seconds': 0.0, 'attempts': 0, 'untimed_steps': steps[-1]}
  resuming = f' from step {steps[-1]}' if steps else ''

  def unfinished():  # main ends well when preempted too, having saved where it stopped
    last = study_parts.committed_steps(workdir)[-1:]
    if last != [run['steps']]:
      return (f'main stopped at step {last[0] if last else 0}, before the planned '
              f'{run["steps"]:,} (preempted?); run the study again to resume from there')

  study_parts.run_part(args.out, state, name, command,
           f'{objective} for {run["steps"]:,} steps{resuming}, '
           f'{run["steps"] * run["flops_per_step"]:.3g} FLOPs', cores, unfinished, roots(args))
  check_flops(workdir, run)


def check_flops(workdir: str, run: dict):
  """The run's FLOPs, from the config main saved, must be the ones its steps were planned with."""
  ran = transfer_report.flops_per_step(workdir)
  if ran != run['flops_per_step']:
    sys.exit(f'{workdir} ran at {ran:.4g} FLOPs per step, not the planned '
             f"{run['flops_per_step']:.4g}: its config.json differs from the plan's config")


def start_flags(args, plan: dict, variant: str) -> tuple[list[str], int | None]:
  """(fine-tuning flags, the pretrained step it starts from, None for random init)."""
  start, setting = transfer_report.split_variant(variant)
  decay = [f'--config.layer_decay={DECAYS[setting]}'] if DECAYS[setting] else []
  if start in plan['objectives']:
    workdir = os.path.join(args.out, start)
    steps = study_parts.committed_steps(workdir)
    if not steps or steps[-1] != plan[start]['steps']:
      raise UsageError(f'{workdir} has not finished pretraining ({plan[start]["steps"]} steps); '
                       'run the study with --parts=pretrain first')
    return [f'--config.init_from={workdir}', *decay], steps[-1]
  data_dir = os.path.join(args.out, 'data')
  if not os.path.exists(os.path.join(data_dir, 'train', store.MANIFEST)):
    raise UsageError(f'{data_dir} holds no prepared corpus, whose vocabulary random init '
                     'takes; run the study with --parts=pretrain first')
  vocab = finetune_glue.run_vocab(data_dir)
  return finetune_glue.random_init_flags(plan['model'], vocab) + decay, None


def fine_tune(args, state: dict, plan: dict, start: str, task: str,
              cores: set[int] | None = None):
  name, out = f'finetune_{start}_{task}', os.path.join(args.out, 'finetune', f'{start}-{task}')
  init_flags, step = start_flags(args, plan, start)
  examples = {'SST-2': args.sst2_examples, 'MRPC': args.mrpc_examples}[task]
  command = finetune_glue.fine_tune_command(
      task, out, init_flags, glue_dir=args.glue_dir, seeds=args.seeds,
      max_seq_length=args.max_seq_length, train_examples=examples)
  if args.finetune_epochs:
    command.append(f'--config.num_epochs={args.finetune_epochs}')
  record = state.get(name, {})
  if (os.path.exists(os.path.join(out, 'results.json'))
      and study_parts.same_command(record.get('command'), command, roots(args))
      and record.get('pretrained_step') == step):
    study_parts.skip(state, name)
    return
  with study_parts.STATE_LOCK:
    before = state.pop(name, {})  # a stale run's time is not this run's
    # Recorded from the start, so that an interrupted attempt says what it began from and where.
    state[name] = {'seconds': 0.0, 'pretrained_step': step, 'ran_in': args.out}
  if os.path.isdir(out):
    set_aside_if_not_resumable(name, out, before, step, args.out,
                               transfer_report.split_variant(start)[0])
  study_parts.run_part(args.out, state, name, command,
                       f'{task} from {start}, seeds {args.seeds}', cores, roots=roots(args))


def set_aside_if_not_resumable(name: str, out: str, before: dict, step: int | None,
                               study_dir: str, encoder: str):
  """Renames an earlier attempt's fine-tuning folder out of the way of this one where finetune
  must not continue it: begun from another step of its encoder (which has trained on since; its
  seeds' checkpoints would pass for the new step's), or in the study's earlier place (its config
  names the files there, and finetune refuses it). Its scores are kept."""
  if before.get('pretrained_step', step) != step:
    why, suffix = (f'was fine-tuned from step {before["pretrained_step"]:,} of {encoder}, which '
                   f'has trained on to step {step:,}'), f'from-step-{before["pretrained_step"]}'
  elif before.get('ran_in', study_dir) != study_dir:
    why, suffix = f'was begun where the study was before, {before["ran_in"]}', 'moved'
  else:
    return
  study_parts.set_aside(name, out, why, suffix)


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  # A second study in the same --out would run every part again beside the first one.
  with run_lock.only_run_in(args.out, 'transfer study'):
    study_parts.stop_parts_on_sigterm()
    state = study_parts.load_state(args.out)
    started = time.perf_counter()
    try:
      plan = run_study(args, state)
    finally:  # the study's wall time counts invocations that ran a part, an interrupted one too
      if study_parts.RAN_A_PART.is_set():
        study = state.setdefault('study', {'seconds': 0.0})
        study['seconds'] = round(study['seconds'] + time.perf_counter() - started, 1)
      study_parts.save_state(args.out, state)
    written = transfer_report.write_report(args.out, plan, state, vars(args))
  print(f'report: {", ".join(written)}', flush=True)


def run_study(args, state: dict) -> dict:
  """Runs the parts asked for that have not finished; returns the pretraining plan."""
  data_dir = os.path.join(args.out, 'data')
  plan = plan_pretraining(args, data_dir)
  print('plan: ' + ', '.join(
      f"{transfer_report.LABELS[o]} {plan[o]['steps']:,} steps x "
      f"{plan[o]['flops_per_step']:.3g} FLOPs" for o in args.objectives), flush=True)
  if args.beside:  # before anything runs: a study whose scores could not be compared is wasted
    transfer_report.read_beside(
        args.beside, vars(args), plan['electra']['steps'] * plan['electra']['flops_per_step'],
        study_corpus.held_out_split(args.corpus, args.held_out)[1])
  parts = {}
  if 'pretrain' in args.parts:
    prepare_data(args, state, data_dir)
    for o in args.objectives:
      parts[f'pretrain_{o}'] = (lambda cores, o=o: pretrain(args, state, o, plan[o], cores)), ()
  if 'finetune' in args.parts:  # SST-2 first: its runs are the longest
    for t in TASKS:
      for s in starts(args):
        pretrained = f'pretrain_{transfer_report.split_variant(s)[0]}'
        needs = (pretrained,) if pretrained in parts else ()
        parts[f'finetune_{s}_{t}'] = (
            lambda cores, s=s, t=t: fine_tune(args, state, plan, s, t, cores)), needs
  study_parts.run_all(parts, args.jobs)
  return plan


def command_line():
  """main(), a usage error ending it with one line: `python -m research.transfer_study`."""
  try:
    main()
  except UsageError as e:
    sys.exit(f'transfer_study: error: {e}')


if __name__ == '__main__':
  command_line()
