"""benchmarks/accelerator_run.py --smoke end to end on the real shared data: pack, run, outputs.

The GPU run itself cannot run here; this runs the same path (pack, unpack and check, prepare,
compile pass, benchmarks and a peer, pretraining, fine-tuning, export) at tiny sizes on the CPU.
"""

import json
from pathlib import Path
import re
import subprocess
import sys
import time

import pytest

from conftest import REPO, SHARED_DATA

SCRIPT = REPO / 'benchmarks' / 'accelerator_run.py'
MiB = 1 << 20


@pytest.fixture(scope='module')
def smoke(tmp_path_factory):
  """(pack folder, results folder, seconds): one smoke pack and run, shared by the tests."""
  for needed in ('pretraining-text', 'pretraining-text-extra', 'glue'):
    if not (SHARED_DATA / needed).is_dir():
      pytest.skip(f'real data not found at {SHARED_DATA / needed} (../shared beside the checkout)')
  root = tmp_path_factory.mktemp('accelerator_run')
  pack, out = root / 'pack', root / 'out'
  start = time.monotonic()
  subprocess.run([sys.executable, str(SCRIPT), 'pack', '--smoke', f'--out={pack}',
                  f'--data={SHARED_DATA}'], cwd=REPO, check=True, timeout=600)
  subprocess.run([sys.executable, str(SCRIPT), '--smoke', f'--pack={pack}', f'--out={out}',
                  f'--work={root / "work"}'], cwd=REPO, check=True, timeout=900)
  return pack, out, time.monotonic() - start


def test_results_fit_what_comes_back(smoke):
  _, out, _ = smoke
  files = sorted(p for p in out.rglob('*') if p.is_file())
  names = {p.name for p in files}
  assert {'summary.json', 'metrics.jsonl', 'plots.png', 'run.log',
          'discriminator-bf16.tar.00'} <= names
  # The device returns at most 8 files of 16 MiB, named in letters, digits, '.', '_', '-'.
  assert len(files) <= 8
  assert all(p.stat().st_size < 16 * MiB for p in files)
  assert all(re.fullmatch(r'[A-Za-z0-9._-]+', p.name) for p in files)
  assert all(p.parent == out for p in files)
  assert (out / 'plots.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_summary_has_every_figure(smoke):
  _, out, _ = smoke
  summary = json.loads((out / 'summary.json').read_text())
  assert summary['smoke'] is True and summary['errors'] == []
  assert all(phase['status'] == 'ok' for phase in summary['phases'].values()), summary['phases']
  assert {'setup', 'warm_compile', 'speed', 'pretrain', 'finetune', 'export'} <= set(
      summary['phases'])
  bench = summary['benchmarks']
  for key in ('small/fused', 'base/fused', 'small/transformers'):
    assert {'tokens_per_s', 'mfu', 'median_step_s', 'peak_memory_bytes'} <= set(bench[key]), key
  assert bench['small/transformers']['framework'].startswith('transformers')
  assert summary['ratios']['small/fused']['tokens_per_s_ratio'] > 0

  pretraining = summary['pretraining']
  assert pretraining['steps'] == pretraining['planned_steps'] > 0
  assert pretraining['tokens'] > 0 and pretraining['flops'] > 0 and pretraining['train_s'] > 0
  assert 0 <= pretraining['final_eval']['disc_auc'] <= 1
  assert 0 <= pretraining['final_eval']['mlm_accuracy'] <= 1
  assert pretraining['eval_curve'][0]['step'] == 0

  for task in ('SST-2', 'MRPC'):
    assert 0 <= summary['finetuning'][task]['score'] <= 1, task
  export = summary['export']
  assert export['parts'] == ['discriminator-bf16.tar.00']
  assert export['check']['same_decision'] > 0.9
  assert export['check']['max_abs_logit_diff'] < 0.5


def test_metrics_hold_the_held_out_figures(smoke):
  _, out, _ = smoke
  lines = [json.loads(line) for line in (out / 'metrics.jsonl').read_text().splitlines()]
  evals = [line for line in lines if 'eval_disc_auc' in line]
  assert evals and all('eval_mlm_accuracy' in line for line in evals)
  assert any('loss' in line and 'tokens_per_s' in line for line in lines)


def test_export_parts_make_a_transformers_directory(smoke, tmp_path):
  _, out, _ = smoke
  tar = tmp_path / 'discriminator.tar'
  tar.write_bytes(b''.join(p.read_bytes() for p in sorted(out.glob('discriminator-bf16.tar.*'))))
  subprocess.run(['tar', 'xf', str(tar), '-C', str(tmp_path)], check=True)
  folder = tmp_path / 'discriminator-bf16'
  assert json.loads((folder / 'config.json').read_text())['architectures'] == [
      'ElectraForPreTraining']
  header_size = int.from_bytes((folder / 'model.safetensors').read_bytes()[:8], 'little')
  header = json.loads((folder / 'model.safetensors').read_bytes()[8:8 + header_size])
  assert {v['dtype'] for k, v in header.items() if k != '__metadata__'} == {'BF16'}


def test_pack_stays_under_the_travel_limit(smoke):
  pack, _, seconds = smoke
  manifest = json.loads((pack / 'pack.json').read_text())
  size = sum(p.stat().st_size for p in pack.rglob('*') if p.is_file())
  budget = manifest['budget']
  assert size <= budget['pack_budget_bytes']
  assert size + budget['checkout_bytes'] < 64 * MiB
  assert manifest['counts']['train_files'] == 3 and manifest['counts']['eval_files'] == 1
  # Every packed file is recorded with its hash, so the run can check what it unpacks.
  assert all(len(m['sha256']) == 64 for e in manifest['text'] for m in e['members'])
  print(f'smoke pack and run: {seconds:.0f} s')
