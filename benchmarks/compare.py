"""electra_jax against the transformers peer, same sizes and data shapes, in one command.

python benchmarks/compare.py --size=small --batch_size=16 --max_seq_length=128 --steps=20

Runs `python -m electra_jax.benchmark` and `benchmarks/hf_peer.py` (eager and torch.compile) one
after the other, never at the same time, so they do not share the cores. With --rounds=R the
pair runs R times, alternating, which spreads a noisy machine's slow spells over both sides.
Prints every JSON record as it arrives, then one `ratio` line per peer mode: electra_jax's
tokens/s over the peer's, from the median over rounds of each side's median step time.
"""

import argparse
import json
from pathlib import Path
import statistics
import subprocess
import sys

REPO = Path(__file__).resolve().parents[1]


def ours_command(args, dtype: str) -> list[str]:
  command = [sys.executable, '-m', 'electra_jax.benchmark', f'--config={args.config_path}',
             f'--config.batch_size={args.batch_size}',
             f'--config.max_seq_length={args.max_seq_length}', f'--config.dtype={dtype}',
             f'--steps={args.steps}', f'--warmup={args.warmup}', f'--config.attention={args.attention}']
  if args.attention_dropout_rate is not None:
    command.append(f'--config.model.attention_dropout_rate={args.attention_dropout_rate}')
  return command


def peer_command(args, dtype: str) -> list[str]:
  command = [sys.executable, str(REPO / 'benchmarks' / 'hf_peer.py'),
             f'--config={args.config_path}', f'--batch_size={args.batch_size}',
             f'--max_seq_length={args.max_seq_length}', f'--dtype={dtype}',
             f'--steps={args.steps}', f'--warmup={args.warmup}', f'--modes={args.modes}']
  if args.attention_dropout_rate is not None:
    command.append(f'--attention_dropout_rate={args.attention_dropout_rate}')
  return command


def run_records(command: list[str]) -> list[dict]:
  """The JSON lines a benchmark prints (echoed as they come); its other output passes through."""
  process = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, text=True, check=False)
  records = []
  for line in process.stdout.splitlines():
    if line.startswith('{'):
      records.append(json.loads(line))
      print(line, flush=True)
  if process.returncode != 0:
    records.append({'command': ' '.join(command), 'error': f'exit status {process.returncode}'})
    print(json.dumps(records[-1]), flush=True)
  return records


def default_dtype() -> str:
  """float32 without a GPU (CPUs here have no fast bfloat16 matmul), else bfloat16."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    return 'float32'
  return 'bfloat16' if torch.cuda.is_available() else 'float32'


def ratio_lines(records: list[dict]) -> list[dict]:
  """electra_jax tokens/s over each peer mode's, from medians over the rounds."""
  step_times = {}
  for record in records:
    if 'median_step_s' in record:
      step_times.setdefault(record['framework'], []).append(record['median_step_s'])
  ours = [name for name in step_times if name.startswith('electra_jax')]
  if not ours:
    return []
  our_time = statistics.median(step_times[ours[0]])
  return [{'ratio': f'{ours[0]} / {name}',
           'tokens_per_s_ratio': statistics.median(times) / our_time,
           'our_median_step_s': our_time, 'peer_median_step_s': statistics.median(times)}
          for name, times in step_times.items() if name != ours[0]]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--size', default='small', help='configs/<size>.py')
  parser.add_argument('--config', help='a config file instead of --size')
  parser.add_argument('--batch_size', type=int, default=16)
  parser.add_argument('--max_seq_length', type=int, default=128)
  parser.add_argument('--dtype', choices=('float32', 'bfloat16'),
                      help='default: float32 on a CPU, bfloat16 on a GPU')
  parser.add_argument('--attention_dropout_rate', type=float,
                      help='for both sides; 0 lets electra_jax use its fused attention')
  parser.add_argument('--attention', default='auto', help='electra_jax --config.attention')
  parser.add_argument('--modes', default='eager,compile', help='peer modes')
  parser.add_argument('--steps', type=int, default=20)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--rounds', type=int, default=1)
  args = parser.parse_args()
  args.config_path = args.config or f'configs/{args.size}.py'
  dtype = args.dtype or default_dtype()

  records = []
  for _ in range(args.rounds):
    records += run_records(ours_command(args, dtype))
    records += run_records(peer_command(args, dtype))
  for line in ratio_lines(records):
    print(json.dumps(line), flush=True)


if __name__ == '__main__':
  main()
