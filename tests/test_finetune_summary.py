"""Fine-tuning's rough edges: `python -m electra_jax.finetune_summary` prints every task's
scores in percent (GLUE's metrics are fractions, SQuAD's and chunking's percentages already), and
a fine-tuning --workdir that is a pretraining run or a cloud URI is refused before anything is
written."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from electra_jax.common import config as config_lib
from electra_jax.common.errors import UsageError
from electra_jax.finetune import loop


def results(task, metric, values, split='dev'):
  return {'task': task, 'init_from': 'runs/tiny', 'init': 'run', 'size': 'small',
          'score_metric': f'{split} {metric}', 'score': values[metric],
          'median': {split: values}, 'seeds': {'0': {split: values}}, 'files_seed': 0,
          'files': [], 'budget': {'steps': 51, 'batch_size': 32}}


def test_each_task_is_shown_in_percent_once(tmp_path):
  runs = {'squad': results('squad_v1', 'f1', {'exact_match': 3.0370, 'f1': 7.8829}),
          'chunk': results('chunk', 'f1', {'f1': 54.384}, 'eval'),
          'mrpc': results('MRPC', 'accuracy', {'accuracy': 0.591, 'f1': 0.7}, 'MRPC')}
  runs['mrpc']['majority_class'] = {'MRPC': {'accuracy': 0.684, 'f1': 0.812}}
  for name, result in runs.items():
    (tmp_path / name).mkdir()
    (tmp_path / name / 'results.json').write_text(json.dumps(result))
  shown = subprocess.run([sys.executable, '-m', 'electra_jax.finetune_summary',
                          *(str(tmp_path / n) for n in runs)], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
  assert 'dev exact_match 3.0, f1 7.9' in shown and '0: 7.9' in shown
  assert 'eval f1 54.4' in shown and '0: 54.4' in shown
  # The majority class's scores beside the median: MRPC 59.1 is below them.
  assert 'MRPC accuracy 59.1, f1 70.0 (majority class 68.4, 81.2)' in shown
  assert '| runs/tiny |  |  | 59.1/70.0 |' in shown  # the GLUE table's MRPC cell
  assert '303.7' not in shown and '5438.4' not in shown


@pytest.mark.parametrize('same_as_init_from', [True, False])
def test_fine_tuning_into_a_pretraining_run_is_refused_and_its_config_kept(tmp_path,
                                                                          same_as_init_from):
  run = tmp_path / 'runs' / 'tiny'
  (run / 'checkpoints').mkdir(parents=True)
  config_lib.save_config(config_lib.default_config(), str(run))
  kept = (run / 'config.json').read_text()
  config = config_lib.load_config_file(str(REPO / 'configs' / 'finetune' / 'glue.py'))
  config.update(task='STS-B', init_from=str(run) if same_as_init_from else '')
  which = 'is the pretraining run --config.init_from names' if same_as_init_from else \
      "is a pretraining run's directory"
  with pytest.raises(UsageError, match=f"{which}; fine-tune into a directory of its own, e.g. "
                     f"--workdir={run}/finetune/STS-B"):
    loop.prepare_workdir(config, str(run))
  assert (run / 'config.json').read_text() == kept
  assert sorted(p.name for p in run.iterdir()) == ['checkpoints', 'config.json']


def test_a_cloud_workdir_is_refused_in_one_line_and_creates_nothing(tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'electra_jax.finetune',
       f'--config={REPO / "configs" / "finetune" / "glue.py"}', '--config.task=MRPC',
       '--workdir=gs://my-bucket/mrpc'], cwd=tmp_path, capture_output=True, text=True,
      env={**os.environ, 'PYTHONPATH': str(REPO)}, timeout=300)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      "electra_jax: error: --workdir='gs://my-bucket/mrpc' is not a local path; fine-tuning "
      'writes to local disk: pass a local --workdir, then copy it (gcloud storage cp -r DIR '
      'gs://...)']
  assert not list(tmp_path.iterdir())


SLOW_PREDICTION = '''
import sys, time
from electra_jax.common import interrupts
with interrupts.catching():
  interrupts.stops_at_once(True)  # as fine-tuning's loop leaves it once a seed has trained
  print('predicting', flush=True)
  time.sleep(120)
print('finished', flush=True)
'''


def test_sigterm_while_predicting_exits_143_within_seconds(tmp_path):
  process = subprocess.Popen([sys.executable, '-c', SLOW_PREDICTION], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert process.stdout.readline() == 'predicting\n'
  sent = time.monotonic()
  process.send_signal(signal.SIGTERM)
  out, err = process.communicate(timeout=60)
  assert process.returncode == 143 and time.monotonic() - sent < 10
  assert 'finished' not in out
  assert err.strip() == ('electra_jax: stopped at once by SIGTERM: what was trained is saved; run '
                         'the same command again to finish')
