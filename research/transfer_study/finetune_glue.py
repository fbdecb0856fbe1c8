"""Does pretraining help? Fine-tunes a pretraining run and the same architecture from random init
on SST-2 and MRPC with the same budget and seeds, and prints both scores side by side.

python -m research.transfer_study.finetune_glue --pretrained=runs/tiny \
    --glue_dir=../shared/data/glue --out=runs/glue-check [--seeds=0,1,2] \
    [--sst2_examples=4000] [--max_seq_length=64]

The random-init runs take the pretraining run's model section and vocabulary, so the only
difference is where the encoder's weights start. Every other setting is the recipe's default
for the model's size (see configs/finetune/glue.py), except the flags printed with each command.
The transfer study (study.py) builds on the functions here.
"""

import argparse
import json
import os
import subprocess
import sys

from research.transfer_study import REPO

GLUE_CONFIG = os.path.join(REPO, 'configs', 'finetune', 'glue.py')


def run_vocab(workdir: str) -> str:
  for name in ('vocab.model', 'vocab.txt'):
    if os.path.exists(os.path.join(workdir, name)):
      return os.path.join(workdir, name)
  sys.exit(f'{workdir} holds no vocab.model or vocab.txt: is it a pretraining run?')


def run_model(workdir: str) -> dict:
  with open(os.path.join(workdir, 'config.json')) as f:
    return json.load(f)['model']


def random_init_flags(model: dict, vocab: str) -> list[str]:
  """Fine-tuning flags for random weights of `model`'s encoder (a pretraining model section).

  Every encoder field is passed, dropout included, so the architecture is the pretrained one's;
  the generator's fields do not concern fine-tuning.
  """
  return ['--config.init_from=', f'--config.vocab={vocab}'] + [
      f'--config.model.{k}={v}' for k, v in model.items() if not k.startswith('generator')]


def fine_tune_command(task: str, out: str, init_flags: list[str], *, glue_dir: str, seeds: str,
                      max_seq_length: int, train_examples: int = 0) -> list[str]:
  """`python -m electra_jax.finetune` on one task; train_examples > 0 draws that many (seed 0)."""
  command = [sys.executable, '-m', 'electra_jax.finetune', f'--config={GLUE_CONFIG}',
             f'--config.task={task}', f'--config.data_dir={glue_dir}', f'--workdir={out}',
             f'--config.seeds={seeds}', '--config.predict_test=False', *init_flags,
             f'--config.max_seq_length={max_seq_length}']
  if train_examples:
    command.append(f'--config.max_train_examples={train_examples}')
  return command


def read_results(out: str) -> dict:
  with open(os.path.join(out, 'results.json')) as f:
    return json.load(f)


def fine_tune(task: str, out: str, init_flags: list[str], args) -> dict:
  command = fine_tune_command(task, out, init_flags, glue_dir=args.glue_dir, seeds=args.seeds,
                              max_seq_length=args.max_seq_length,
                              train_examples=args.sst2_examples if task == 'SST-2' else 0)
  print('$ ' + ' '.join(command[1:]), flush=True)
  subprocess.run(command, check=True, cwd=REPO)
  return read_results(out)


def main():
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.finetune_glue',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--pretrained', required=True, help='pretraining run workdir')
  parser.add_argument('--glue_dir', required=True, help='folder holding SST-2/ and MRPC/')
  parser.add_argument('--out', required=True)
  parser.add_argument('--seeds', default='0,1,2')
  parser.add_argument('--sst2_examples', type=int, default=4000,
                      help='SST-2 training examples drawn (seed 0) from its 67k, for CPU budgets')
  parser.add_argument('--max_seq_length', type=int, default=128,
                      help='64 keeps a CPU run short: it truncates few SST-2 sentences and some '
                      'MRPC pairs (longest-first)')
  parser.add_argument('--tasks', default='SST-2,MRPC')
  args = parser.parse_args()
  random_flags = random_init_flags(run_model(args.pretrained), run_vocab(args.pretrained))
  rows = []
  for task in args.tasks.split(','):
    for label, flags in (('pretrained', [f'--config.init_from={args.pretrained}']),
                         ('random', random_flags)):
      result = fine_tune(task, os.path.join(args.out, f'{task}-{label}'), flags, args)
      rows.append((task, label, result))
  print('\n| task | init | score (median) | per seed | all medians | steps x batch | examples |')
  print('|---|---|---|---|---|---|---|')
  for task, label, result in rows:
    split, metric = result['score_metric'].split()
    seeds = ', '.join(f'{s}: {100 * v[split][metric]:.1f}' for s, v in result['seeds'].items())
    medians = ', '.join(f'{k} {100 * v:.1f}' for k, v in result['median'][split].items())
    budget = result['budget']
    print(f"| {task} | {label} | {metric} {100 * result['score']:.1f} | {seeds} | {medians} | "
          f"{budget['steps']} x {budget['batch_size']} | {budget['train_examples']} "
          f"({budget['train_pairs_with_swaps']} with swaps), seq {budget['max_seq_length']} |")
  for task in dict.fromkeys(task for task, _, _ in rows):
    scores = {label: result['score'] for t, label, result in rows if t == task}
    verdict = 'beats' if scores['pretrained'] > scores['random'] else 'does NOT beat'
    print(f'{task}: pretrained {100 * scores["pretrained"]:.1f} {verdict} random init '
          f'{100 * scores["random"]:.1f}')


if __name__ == '__main__':
  main()
