"""Whole-word masking and Fast-ELECTRA's frozen generator against ELECTRA, at equal total FLOPs,
fine-tuned on MRPC and CoNLL-2000 chunking (issue 71's measurement), in one command.

python -m research.transfer_study.variants --out=runs/variants [--steps=7500]

Pretraining, on the study's corpus and vocabulary (DIR/data, prepared as study.py prepares it),
each at the FLOPs of `--steps` steps of the config's ELECTRA (flops.train_step_flops):
  electra     config.masking='token', the config as it is;
  whole_word  config.masking='whole_word';
  generator   objective 'mlm' on a network of the config's generator's shape, for `--steps`
              steps: the frozen generator's own pretraining, counted in Fast-ELECTRA's FLOPs;
  fast        config.generator_init=DIR/generator (embedding_sharing 'none', which it needs),
              temperature_start=--fast_temperature_start annealed linearly to the config's
              temperature, for as many steps as the FLOPs left after the generator's pay for
              (its steps count the generator's forward pass only);
  modern      model.architecture='modern' (issue 78's measurement): the config's width, depth,
              heads and training recipe on ModernBERT's design, with its proportions (a GeGLU
              1.5x as wide as the layer; a generator as wide and half as deep, GDES sharing),
              for as many steps as ELECTRA's FLOPs pay for.
--starts picks which of these (and random init) run; each run another needs comes along.
Fine-tuning, every seed, from each discriminator and from random init: MRPC with the GLUE recipe
(its layer-wise decay) and chunking with the chunking recipe at length 128 and no layer decay,
the setting that counted for each task in the study. Each part is skipped when it has finished
with the same command, so running the command again resumes. DIR/results.json and
DIR/results.md hold the table: every seed, each run's FLOPs, held-out AUC and wall time.
"""

import argparse
import json
import os
import statistics
import sys

from electra_jax.common import config as config_lib
from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.training import flops
from electra_jax.training.report import format_duration
from research.transfer_study import finetune_glue, study, study_parts, transfer_report

REPO = finetune_glue.REPO
CHUNK_CONFIG = os.path.join(REPO, 'configs', 'finetune', 'chunk.py')
STARTS = ('electra', 'whole_word', 'fast', 'modern', 'random')
LABELS = {'electra': 'ELECTRA (token masking)', 'whole_word': 'ELECTRA, whole-word masking',
          'fast': 'Fast-ELECTRA (frozen MLM generator)', 'modern': 'ELECTRA, modern encoder',
          'random': 'random init'}
# The pretraining runs each start needs: ELECTRA's always (the budget, random init's shape).
NEEDS = {'electra': ('electra',), 'whole_word': ('electra', 'whole_word'),
         'fast': ('electra', 'generator', 'fast'), 'modern': ('electra', 'modern'),
         'random': ('electra',)}
TASKS = ('MRPC', 'chunk')
DECAY = {'MRPC': 0.0, 'chunk': 1.0}  # 0: the recipe's layer-wise decay; 1: none


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.variants',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', required=True)
  parser.add_argument('--config', default=os.path.join(REPO, 'configs', 'mini.py'))
  parser.add_argument('--steps', type=int, default=7500, help="ELECTRA's pretraining steps")
  parser.add_argument('--fast_temperature_start', type=float, default=2.0,
                      help="Fast-ELECTRA's temperature at step 0, annealed to the config's")
  parser.add_argument('--corpus', default=os.path.join(study.SHARED, 'pretraining-text'))
  parser.add_argument('--held_out', type=int, default=2)
  parser.add_argument('--glue_dir', default=os.path.join(study.SHARED, 'glue'))
  parser.add_argument('--conll_dir', default=os.path.join(study.SHARED, 'conll2000'))
  parser.add_argument('--seeds', default='0,1,2')
  parser.add_argument('--max_seq_length', type=int, default=128, help='for fine-tuning')
  parser.add_argument('--finetune_epochs', type=float, default=0.0, help="0 = the recipes' (3)")
  parser.add_argument('--max_train_examples', type=int, default=0,
                      help='> 0: the first N MRPC pairs and chunking sentences (tests)')
  parser.add_argument('--jobs', type=int, default=0, help='parts at once; 0 = one per core')
  parser.add_argument('--starts', default='electra,whole_word,fast,random',
                      help=f"comma-separated, from {', '.join(STARTS)}")
  args = parser.parse_args(argv)
  asked = [s for s in args.starts.split(',') if s]
  if not asked or set(asked) - set(STARTS) or len(set(asked)) != len(asked):
    raise UsageError(f"--starts={args.starts}: name some of {', '.join(STARTS)}, each once")
  args.starts = [s for s in STARTS if s in asked]
  args.out, args.corpus, args.glue_dir, args.conll_dir = map(
      os.path.abspath, (args.out, args.corpus, args.glue_dir, args.conll_dir))
  args.set = []  # what study.prepare_data and study.pretrain read
  if not args.jobs:
    args.jobs = study_parts.default_jobs(study_parts.jax_backend(), len(study_parts.usable_cores()))
  return args


def roots(args) -> dict[str, str]:
  return {**study.roots(args), '$CONLL': args.conll_dir}


def plan_pretraining(args, data_dir: str) -> dict[str, dict]:
  """Per run: its flags, steps and FLOPs per step; every run's total FLOPs is ELECTRA's."""
  base = [f'--config={os.path.abspath(args.config)}', f'--config.data.prepared_dir={data_dir}']
  electra = study.resolve_config(base)
  width = config_lib.generator_width(electra.model)  # the MLM network is the generator's shape
  modern = electra.model.hidden_size
  flags = {
      'electra': base + ['--config.masking=token'],
      'whole_word': base + ['--config.masking=whole_word'],
      'generator': base + ['--config.objective=mlm', f'--config.model.hidden_size={width}',
                           f'--config.model.num_heads={max(1, width // 64)}',
                           f'--config.model.intermediate_size={4 * width}'],
      'fast': base + [f'--config.generator_init={os.path.join(args.out, "generator")}',
                      '--config.embedding_sharing=none',
                      f'--config.temperature_start={args.fast_temperature_start}'],
      'modern': base + ['--config.model.architecture=modern',
                        f'--config.model.embedding_size={modern}',
                        f'--config.model.intermediate_size={3 * modern // 2}',
                        '--config.model.generator_hidden_size=1.0',
                        '--config.model.generator_layers=0.5', '--config.embedding_sharing=gdes'],
  }
  runs = sorted({run for start in args.starts for run in NEEDS[start]}, key=list(flags).index)
  per_step = {name: flops.train_step_flops(study.resolve_config(flags[name])) for name in runs}
  budget = args.steps * per_step['electra']
  steps = {'electra': args.steps, 'whole_word': args.steps, 'generator': args.steps}
  if 'fast' in runs:
    steps['fast'] = round((budget - steps['generator'] * per_step['generator']) / per_step['fast'])
  if 'modern' in runs:
    steps['modern'] = round(budget / per_step['modern'])
  return {name: {'flags': flags[name] + [f'--config.num_train_steps={steps[name]}'],
                 'steps': steps[name], 'flops_per_step': per_step[name]} for name in runs}


def finetune_command(args, start: str, task: str, out: str) -> list[str]:
  if start == 'random':
    data_dir = os.path.join(args.out, 'data')
    init = finetune_glue.random_init_flags(finetune_glue.run_model(os.path.join(args.out,
                                                                                'electra')),
                                           finetune_glue.run_vocab(data_dir))
  else:
    init = [f'--config.init_from={os.path.join(args.out, start)}']
  if DECAY[task]:
    init.append(f'--config.layer_decay={DECAY[task]}')
  if task == 'MRPC':
    command = finetune_glue.fine_tune_command(
        task, out, init, glue_dir=args.glue_dir, seeds=args.seeds,
        max_seq_length=args.max_seq_length, train_examples=args.max_train_examples)
  else:
    command = [sys.executable, '-m', 'electra_jax.finetune', f'--config={CHUNK_CONFIG}',
               f'--config.data_dir={args.conll_dir}', f'--workdir={out}',
               f'--config.seeds={args.seeds}', *init,
               f'--config.max_seq_length={args.max_seq_length}']
    if args.max_train_examples:
      command.append(f'--config.max_train_sentences={args.max_train_examples}')
  if args.finetune_epochs:
    command.append(f'--config.num_epochs={args.finetune_epochs}')
  return command


def fine_tune(args, state: dict, start: str, task: str, cores=None):
  name, out = f'finetune_{start}_{task}', os.path.join(args.out, 'finetune', f'{start}-{task}')
  command = finetune_command(args, start, task, out)
  if (os.path.exists(os.path.join(out, 'results.json'))
      and study_parts.same_command(state.get(name, {}).get('command'), command, roots(args))):
    study_parts.skip(state, name)
    return
  study_parts.run_part(args.out, state, name, command, f'{task} from {start}, seeds {args.seeds}',
                       cores, roots=roots(args))


def run(args, state: dict) -> dict:
  data_dir = os.path.join(args.out, 'data')
  plan = plan_pretraining(args, data_dir)
  print('plan: ' + ', '.join(f"{name} {run['steps']:,} steps x {run['flops_per_step']:.3g} FLOPs"
                             for name, run in plan.items()), flush=True)
  study.prepare_data(args, state, data_dir)
  pretrain = lambda name: (lambda cores: study.pretrain(args, state, name, plan[name], cores))
  # The generator first: Fast-ELECTRA waits for it while the others pretrain.
  order = sorted(plan, key=('generator', 'electra', 'whole_word', 'fast', 'modern').index)
  parts = {f'pretrain_{name}': (pretrain(name), ('pretrain_generator',) * (name == 'fast'))
           for name in order}
  for task in TASKS:
    for start in args.starts:
      needs = ('pretrain_electra',) if start == 'random' else (f'pretrain_{start}',)
      parts[f'finetune_{start}_{task}'] = (
          lambda cores, s=start, t=task: fine_tune(args, state, s, t, cores), needs)
  study_parts.run_all(parts, args.jobs)
  return plan


def summarise(args, plan: dict, state: dict) -> dict:
  """Every run's FLOPs, AUC and wall time, and every fine-tuning seed, from what is in DIR."""
  runs = {name: transfer_report.pretraining_summary(args.out, name, state) for name in plan}
  total = {name: (s or {}).get('flops', 0) for name, s in runs.items()}
  if 'fast' in total:
    total['fast'] = total['fast'] + total['generator']  # its generator's pretraining counts
  scores = {start: {task: transfer_report.finetuning_summary(args.out, start, task, state)
                    for task in TASKS} for start in args.starts}
  return {'plan': plan, 'pretraining': runs, 'total_flops': total, 'finetuning': scores,
          'settings': {k: getattr(args, k) for k in ('steps', 'fast_temperature_start', 'seeds',
                                                     'max_seq_length', 'finetune_epochs',
                                                     'max_train_examples', 'starts')}}


def markdown(summary: dict) -> str:
  lines = ['| start | total FLOPs | steps | held-out AUC | pretraining wall | MRPC acc seeds '
           '(median) | MRPC F1 | chunking F1 seeds (median) |', '|---|---|---|---|---|---|---|---|']
  for start in summary['finetuning']:
    run = summary['pretraining'].get(start)
    auc = ((run or {}).get('final_eval') or {}).get('eval_disc_auc')
    wall = (run or {}).get('seconds', 0) + (
        summary['pretraining'].get('generator') or {}).get('seconds', 0) * (start == 'fast')
    cells = [LABELS[start]]
    cells += ([f"{summary['total_flops'][start]:.3g}", f"{run['steps']:,}",
               f'{auc:.3f}' if auc is not None else '-', format_duration(wall)]
              if run else ['-'] * 4)
    # GLUE's metrics are fractions; the tagger's F1 is already in percent.
    for task, metric, scale in (('MRPC', 'accuracy', 100), ('chunk', 'f1', 1)):
      result = summary['finetuning'][start][task]
      if not result:
        cells += ['-', '-'] if task == 'MRPC' else ['-']
        continue
      values = [scale * s[metric] for s in result['seeds'].values()]
      cells.append(', '.join(f'{v:.2f}' for v in values) + f' ({statistics.median(values):.2f})')
      if task == 'MRPC':
        cells.append(f"{100 * result['median']['f1']:.2f}")
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines) + '\n'


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  with run_lock.only_run_in(args.out, 'variants study'):
    study_parts.stop_parts_on_sigterm()
    state = study_parts.load_state(args.out)
    try:
      plan = run(args, state)
    finally:
      study_parts.save_state(args.out, state)
    summary = summarise(args, plan, state)
  with open(os.path.join(args.out, 'results.json'), 'w') as f:
    json.dump(summary, f, indent=2)
  table = markdown(summary)
  with open(os.path.join(args.out, 'results.md'), 'w') as f:
    f.write(table)
  print(table, flush=True)


if __name__ == '__main__':
  try:
    main()
  except UsageError as e:
    sys.exit(f'variants: error: {e}')
