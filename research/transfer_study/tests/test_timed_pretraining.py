"""timed_pretraining.py: step rates read from main's own log lines, only where the runs overlapped;
and (slow) a toy budgeted run that leaves a study the transfer study fine-tunes."""

import json
import re
import subprocess
import sys

import pytest

from conftest import REPO, SHARED_DATA
from electra_jax.training import report
from research.transfer_study import timed_pretraining
from research.transfer_study.tests.test_transfer_study import CORPUS, GLUE, STUDY, toy_corpus

TIMED = ['-m', 'research.transfer_study.timed_pretraining']  # run from REPO


def log_line(clock: str, step: int, total: int = 10**7) -> str:
  """A training line as main logs it through absl: time stamp, then report.human_line."""
  metrics = {'loss': 1.0, 'learning_rate': 1e-3, 'tokens_per_s': 1000.0}
  return (f'I1126 {clock} 140148111317888 report.py:81] '
          f'{report.human_line(step, total, metrics, 1.0)}\n')


def write_log(path, points):
  path.write_text('I1126 10:00:00.000000 1 cli.py:1] starting\n' +
                  ''.join(log_line(clock, step) for clock, step in points) +
                  'W1126 10:09:00.000000 1 x.py:1] step 5/9 | not a training line\n')
  return str(path)


def test_log_lines_give_time_of_day_and_step(tmp_path):
  timed = timed_pretraining
  path = write_log(tmp_path / 'a.log', [('10:00:30.500000', 100), ('11:02:03.250000', 200)])
  assert timed.logged_steps(path) == [(36030.5, 100), (39723.25, 200)]
  late = write_log(tmp_path / 'b.log', [('23:59:59.500000', 100), ('00:00:00.500000', 200)])
  assert timed.logged_steps(late) == [(86399.5, 100), (86400.5, 200)]  # past midnight


def test_rates_count_only_the_span_in_which_both_runs_stepped(tmp_path):
  """The faster-compiling run steps alone at first; its lone steps must not count."""
  timed = timed_pretraining
  # Run a logs from 10:00:10, alone at 100 steps/s until b starts at 10:00:20, then 50 steps/s.
  a = timed.logged_steps(write_log(tmp_path / 'a.log', [
      ('10:00:10.000000', 100), ('10:00:20.000000', 1100), ('10:00:30.000000', 1600),
      ('10:00:40.000000', 2100)]))
  b = timed.logged_steps(write_log(tmp_path / 'b.log', [
      ('10:00:20.000000', 100), ('10:00:30.000000', 400), ('10:00:40.000000', 700),
      ('10:00:50.000000', 1000)]))
  assert timed.shared_span({'a': a, 'b': b}) == (36020.0, 36040.0)
  rates = timed.rates_side_by_side({'a': a, 'b': b}, 'logs', 100)
  assert rates['a']['steps_per_s'] == pytest.approx(50.0)
  assert rates['a']['steps_per_s_whole_log'] == pytest.approx(2000 / 30)
  assert rates['b']['steps_per_s'] == pytest.approx(30.0)
  assert rates['a']['overlap_s'] == rates['b']['overlap_s'] == 20.0
  assert rates['a']['steps_first_logged'] == 100

  # No overlap at all (b starts after a ends): each gets half of its lone rate.
  late = [(t + 60, s) for t, s in b]
  rates = timed.rates_side_by_side({'a': a, 'b': late}, 'logs', 100)
  assert rates['a']['steps_per_s'] == pytest.approx(2000 / 30 / 2)
  assert rates['b']['steps_per_s'] == pytest.approx(30.0 / 2)
  assert rates['a']['overlap_s'] < 0

  with pytest.raises(timed.UsageError, match='a probe run logged fewer than two steps'):
    timed.rates_side_by_side({'a': a, 'b': b[:1]}, 'logs', 100)


def test_bad_arguments_are_one_clear_error(tmp_path):
  timed = timed_pretraining
  for args, message in (
      ([f'--data={tmp_path}', '--seconds=0'], '--seconds=0.0: give the wall-clock budget'),
      ([f'--data={tmp_path}', '--seconds=60', '--objectives=electra,bert'],
       '--objectives=electra,bert: list each at most once, from all_tokens_mlm, electra, '
       'electra_15, mlm, replace_mlm')):
    with pytest.raises(timed.UsageError, match=re.escape(message)):
      timed.parse_args([f'--out={tmp_path}/out', *args])
  # From the command line: one line naming the cause and the fix, and nothing written.
  result = subprocess.run([sys.executable, *TIMED, f'--out={tmp_path}/out',
                           f'--data={tmp_path}', '--seconds=60'],
                          capture_output=True, text=True, cwd=REPO)
  assert result.returncode != 0 and 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      f'timed_pretraining: error: {tmp_path} holds no prepared corpus; make one with '
      'python -m electra_jax.prepare --out=DIR (docs/data.md)'), result.stderr
  assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_a_budgeted_pair_of_runs_is_a_study_that_fine_tunes(tmp_path):
  """Prepare a toy corpus, pretrain ELECTRA and MLM at once within a budget, then fine-tune the
  result with the study's --parts=finetune (about three minutes on two cores)."""
  pytest.importorskip('matplotlib')
  if not CORPUS.is_dir() or not GLUE.is_dir():
    pytest.skip(f'real data not found in {SHARED_DATA}')
  corpus, out = toy_corpus(tmp_path / 'corpus'), tmp_path / 'study'
  files = lambda folder: ','.join(str(p) for p in sorted((corpus / folder).glob('*.txt')))
  config = ['--config=configs/mini.py', '--config.model.num_layers=1']
  subprocess.run([sys.executable, '-m', 'electra_jax.prepare', f'--out={out}/data', *config,
                  f"--config.data.train_files={files('enwiki')},{files('gutenberg')}",
                  f"--config.data.eval_files={files('enwiki')}"], check=True, cwd=REPO,
                 capture_output=True)
  sets = ['--set=model.num_layers=1', '--set=batch_size=8', '--set=eval_steps=1']
  result = subprocess.run(
      [sys.executable, *TIMED, f'--out={out}', f'--data={out}/data', '--seconds=150',
       '--probe_log_every=2', '--probe_overlap=3', '--step_multiple=10', *sets],
      capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stdout + result.stderr
  plan = json.loads((out / 'timed_plan.json').read_text())
  steps = plan['steps']
  assert steps >= 10 and steps % 10 == 0 and plan['runs_seconds'] > 0
  for objective in ('electra', 'mlm'):
    assert plan['probe'][objective]['steps_per_s'] > 0
    assert plan['probe'][objective]['overlap_s'] >= 3
  config = json.loads((out / 'electra' / 'config.json').read_text())
  assert config['num_train_steps'] == steps and config['save_every'] == steps // 4
  # Four saves spread over the run, and the last step's (the same one when 4 divides the steps).
  saved = sorted({*range(steps // 4, steps + 1, steps // 4), steps})[-5:]
  assert sorted(int(p.name) for p in (out / 'electra' / 'checkpoints').iterdir()) == saved
  assert config['warmup_steps'] == round(steps * 0.05)
  mlm_steps = plan['plan']['mlm']['steps']
  assert json.loads((out / 'mlm' / 'config.json').read_text())['num_train_steps'] == mlm_steps

  study = [sys.executable, *STUDY, f'--out={out}',
           '--parts=finetune', f'--pretrain_steps={steps}', f'--glue_dir={GLUE}',
           *(f'--set={s}' for s in plan['set']), '--seeds=0', '--sst2_examples=32',
           '--mrpc_examples=32', '--finetune_epochs=1', '--max_seq_length=32',
           '--no-random_init', '--no-both_decays', '--jobs=2']
  result = subprocess.run(study, capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stdout + result.stderr
  results = json.loads((out / 'results.json').read_text())
  assert results['pretraining']['electra']['steps'] == steps, results['pretraining']
