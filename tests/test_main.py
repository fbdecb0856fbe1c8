"""The command line, run for real: training, checkpoints, resume after a kill, user errors.

Each run is `python -m electra_jax.main` in a subprocess on one CPU device, with the tiny config
shrunk further so the whole file stays around a minute or two on two cores.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, WIKITEXT, error_line, tree_digest
from electra_jax.common import run_lock

SMALL_RUN = ['--config.batch_size=16', '--config.max_seq_length=64', '--config.model.vocab_size=1000',
             '--config.warmup_steps=10', '--config.log_every=10', '--config.save_every=20',
             '--config.eval_every=0']
LOSS_KEYS = ('loss', 'mlm_loss', 'disc_loss', 'mlm_accuracy', 'sampled_accuracy', 'disc_accuracy',
             'disc_auc', 'replaced_fraction', 'learning_rate')


def command(workdir, *overrides, train_files=None):
  train_files = train_files or str(WIKITEXT / 'wiki.valid.raw')
  return [sys.executable, '-m', 'electra_jax.main', f'--config={REPO / "configs" / "tiny.py"}',
          f'--workdir={workdir}', f'--config.data.train_files={train_files}', *SMALL_RUN,
          *overrides]


def env():
  return {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}


def run(workdir, *overrides, train_files=None, check=True):
  result = subprocess.run(command(workdir, *overrides, train_files=train_files), env=env(),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
  if check and result.returncode != 0:
    raise AssertionError(f'run failed:\n{result.stderr[-3000:]}')
  return result


def metrics(workdir):
  lines = Path(workdir, 'metrics.jsonl').read_text().splitlines()
  return {m['step']: m for m in map(json.loads, lines) if 'loss' in m}


def finished_run_flags(wikitext):
  return ['--config.num_train_steps=60', '--config.eval_every=30', '--config.eval_steps=2',
          '--config.keep_checkpoints=2', '--config.stall_check_after=30',
          f'--config.data.eval_files={wikitext / "wiki.test.raw"}']


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory, wikitext):
  """An uninterrupted 60-step run, with evaluation every 30 steps, checked for a discriminator at
  chance from step 30 on; its log is kept beside it, as <workdir>.stderr."""
  workdir = tmp_path_factory.mktemp('uninterrupted')
  result = run(workdir, *finished_run_flags(wikitext))
  workdir.with_name(workdir.name + '.stderr').write_text(result.stderr)
  return workdir


def test_run_writes_checkpoints_metrics_and_events(finished_run):
  steps = sorted(p.name for p in (finished_run / 'checkpoints').iterdir())
  assert steps == ['40', '60']  # keep_checkpoints=2: step 20 was rotated out
  for name in ('config.json', 'vocab.model', 'data/train/manifest.json', 'data/eval/manifest.json'):
    assert (finished_run / name).exists(), name
  assert list(finished_run.glob('events.out.tfevents.*'))
  logged = metrics(finished_run)
  assert sorted(logged) == [10, 20, 30, 40, 50, 60]
  for m in logged.values():
    assert {*LOSS_KEYS, 'tokens_per_s'} <= set(m)
  evals = [json.loads(l) for l in (finished_run / 'metrics.jsonl').read_text().splitlines()
           if 'eval_loss' in l]
  assert [e['step'] for e in evals] == [0, 30, 60] and 'eval_disc_auc' in evals[0]
  # Learning happens: the generator's MLM accuracy and loss improve well past the first window.
  assert logged[60]['mlm_accuracy'] > logged[10]['mlm_accuracy'] + 0.02
  assert logged[60]['mlm_loss'] < logged[10]['mlm_loss'] - 0.5


def test_a_finished_run_names_its_checkpoint_and_next_steps_and_says_so_when_rerun(
    finished_run, tmp_path, wikitext):
  """A rerun logged 'resuming at step 60 of 60' and exited; neither said what comes next."""
  def next_steps(workdir):
    return (f'its checkpoint is {workdir}/checkpoints/60. Next, fine-tune it (GLUE MRPC here; '
            'other tasks in docs/finetuning.md):\n  python -m electra_jax.finetune '
            '--config=configs/finetune/glue.py --config.task=MRPC --config.data_dir=GLUE_DIR '
            f'--config.init_from={workdir} --workdir={workdir}/finetune/MRPC\nor export it to '
            f'Hugging Face transformers:\n  python -m electra_jax.export --workdir={workdir} '
            f'--out={workdir}/hf')
  log = finished_run.with_name(finished_run.name + '.stderr').read_text()
  assert (f'the run in {finished_run} is finished (step 60 of 60); '
          f'{next_steps(finished_run)}') in log
  workdir = tmp_path / 'finished'
  shutil.copytree(finished_run, workdir)
  again = run(workdir, *finished_run_flags(wikitext)).stderr  # the same command
  assert (f'the run in {workdir} is already finished: raise --config.num_train_steps to train '
          f'on (step 60 of 60); {next_steps(workdir)}') in again
  assert 'resuming at step' not in again and metrics(workdir) == metrics(finished_run)


def test_killed_run_resumes_to_identical_losses(finished_run, tmp_path):
  workdir = tmp_path / 'killed'
  process = subprocess.Popen(command(workdir, '--config.num_train_steps=60'), env=env(), cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 300
    while not (workdir / 'metrics.jsonl').exists() or max(metrics(workdir), default=0) < 30:
      assert process.poll() is None, 'the run ended before it could be killed'
      assert time.time() < deadline, 'the run did not reach step 30 in time'
      time.sleep(0.2)
    # Paused, the run still holds its workdir: the same command again is refused before it
    # writes anything (two runs there crashed each other inside Orbax at the same step).
    process.send_signal(signal.SIGSTOP)
    before = tree_digest(workdir)
    second = run(workdir, '--config.num_train_steps=60', check=False)
    assert error_line(second) == (
        f'electra_jax: error: {workdir} is in use by another pretraining run (a running process '
        'holds it); wait for that one to end or stop it, or use another directory')
    assert tree_digest(workdir) == before
  finally:
    process.send_signal(signal.SIGKILL)  # the lock goes with it: the run below resumes
    process.wait()
  killed_at = max(metrics(workdir))
  assert killed_at < 60, 'killed too late to test anything'

  run(workdir, '--config.num_train_steps=60')
  resumed, uninterrupted = metrics(workdir), metrics(finished_run)
  assert sorted(resumed) == sorted(uninterrupted)
  for step in resumed:
    for key in LOSS_KEYS:
      assert resumed[step][key] == pytest.approx(uninterrupted[step][key], rel=1e-5), (step, key)


def test_raising_num_train_steps_continues(finished_run, tmp_path):
  workdir = tmp_path / 'continued'
  os.system(f'cp -r {finished_run} {workdir}')
  # As a run saved before compilation_cache_dir existed: that field is no change.
  config = json.loads((workdir / 'config.json').read_text())
  del config['compilation_cache_dir']
  (workdir / 'config.json').write_text(json.dumps(config, indent=2))
  saved = (workdir / 'config.json').read_text()
  result = run(workdir, '--config.num_train_steps=70', '--config.learning_rate=0.0005')
  assert 'resuming at step 60 of 70' in result.stderr
  assert max(metrics(workdir)) == 70
  # The settings of steps 1-60 are not lost to the new ones, and the log names each change.
  assert (workdir / 'config.until-60.json').read_text() == saved
  assert json.loads((workdir / 'config.json').read_text())['learning_rate'] == 0.0005
  changed = next(line for line in result.stderr.splitlines() if 'changed settings' in line)
  assert 'learning_rate: 0.001 -> 0.0005; num_train_steps: 60 -> 70' in changed
  assert 'compilation_cache_dir' not in changed


def test_a_run_keeps_its_compiled_step_where_a_run_started_again_reads_it(tmp_path, wikitext):
  """By default the compiled steps go to <workdir>/compilation_cache (the suite's own cache,
  $JAX_COMPILATION_CACHE_DIR, is set aside here), and travel with the run: a copy resumed as
  after a preemption (its last checkpoint gone) reads the train step back instead of compiling
  it, and ends with the same numbers."""
  without_suite_cache = {k: v for k, v in env().items() if k != 'JAX_COMPILATION_CACHE_DIR'}

  def train(workdir):
    result = subprocess.run(command(workdir, '--config.num_train_steps=2', '--config.log_every=1',
                                    '--config.save_every=1'), env=without_suite_cache, cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr

  first, moved = tmp_path / 'first', tmp_path / 'moved'
  assert 'train step compiled in' in train(first)
  programs = lambda workdir: sorted(p.name for p in (workdir / 'compilation_cache').iterdir())
  assert len([p for p in programs(first) if p.startswith('jit_train_step-')]) == 1
  shutil.copytree(first, moved)
  shutil.rmtree(moved / 'checkpoints' / '2')
  log = train(moved)
  assert 'resuming at step 1 of 2' in log
  assert f"train step read from the compilation cache at {moved / 'compilation_cache'} in" in log
  assert programs(moved) == programs(first)  # read, not written again
  loss = lambda workdir: {k: metrics(workdir)[2][k] for k in LOSS_KEYS}
  assert loss(moved) == loss(first)


def test_the_compilation_cache_setting(monkeypatch):
  from electra_jax.training import compile_cache  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  assert compile_cache.cache_dir('', 'gs://b/run') == 'gs://b/run/compilation_cache'
  assert compile_cache.cache_dir('/cache', 'gs://b/run') == '/cache'
  assert compile_cache.cache_dir('none', 'gs://b/run') is None
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', '/suite')
  assert compile_cache.cache_dir('', 'run') == '/suite'  # the user's own setting comes first
  assert compile_cache.cache_dir('none', 'run') is None


def test_evaluations_at_chance_are_warned_about_from_stall_check_after_on(finished_run):
  """The chief checks each evaluation (training/health.py): from config.stall_check_after on
  (and once warmup is over), one whose discriminator AUC is under 0.55 logs the warning with its
  step. 30 steps of tiny leave the discriminator near chance (AUC ~0.53), as a stalled one is."""
  evals = {e['step']: e['eval_disc_auc'] for e in map(json.loads, (
      finished_run / 'metrics.jsonl').read_text().splitlines()) if 'eval_loss' in e}
  stderr = finished_run.with_name(finished_run.name + '.stderr').read_text()
  warned = [line for line in stderr.splitlines() if 'the discriminator is at chance' in line]
  expected = [step for step in sorted(evals) if step >= 30 and evals[step] < 0.55]
  assert expected, f'no evaluation at chance to warn about: {evals}'
  assert [int(line.split('at step ')[1].split(':')[0]) for line in warned] == expected
  assert '--config.model.generator_hidden_size' in warned[0]


# ---- objective=mlm: the BERT baseline through the same command --------------------------------

ELECTRA_ONLY = ('disc_loss', 'sampled_accuracy', 'disc_accuracy', 'disc_precision', 'disc_recall',
                'disc_auc', 'replaced_fraction')


@pytest.fixture(scope='module')
def mlm_run(tmp_path_factory, wikitext):
  """A 4-step MLM run with checkpoints at steps 2 and 4 and evaluation at 0, 3 and 4 (the last
  step, though no multiple of eval_every)."""
  workdir = tmp_path_factory.mktemp('mlm')
  run(workdir, '--config.objective=mlm', '--config.num_train_steps=4', '--config.log_every=2',
      '--config.save_every=2', '--config.eval_every=3', '--config.eval_steps=1',
      f'--config.data.eval_files={wikitext / "wiki.test.raw"}')
  return workdir


def test_mlm_run_logs_its_metrics_and_keeps_its_objective(mlm_run):
  assert json.loads((mlm_run / 'config.json').read_text())['objective'] == 'mlm'
  assert sorted(p.name for p in (mlm_run / 'checkpoints').iterdir()) == ['2', '4']
  logged = metrics(mlm_run)
  assert sorted(logged) == [2, 4]
  for m in logged.values():
    assert {'loss', 'mlm_loss', 'mlm_accuracy', 'learning_rate', 'tokens_per_s'} <= set(m)
    assert not set(ELECTRA_ONLY) & set(m) and m['loss'] == m['mlm_loss']
  evals = [json.loads(l) for l in (mlm_run / 'metrics.jsonl').read_text().splitlines()
           if 'eval_loss' in l]
  assert [e['step'] for e in evals] == [0, 3, 4]
  assert all('eval_mlm_accuracy' in e and 'eval_disc_auc' not in e for e in evals)

  # Continuing it as an ELECTRA run is refused before anything is touched. (Its checkpoint
  # restores onto the MLM model in the next test; resuming is the same code for every objective.)
  before = tree_digest(mlm_run)
  line = error_line(run(mlm_run, '--config.num_train_steps=8', check=False))
  assert "objective 'mlm'" in line and '--config.objective=mlm' in line
  assert tree_digest(mlm_run) == before


def test_mlm_run_fine_tunes_and_exports_like_an_electra_run(mlm_run, tmp_path):
  # pylint: disable=g-import-not-at-top  (jax in this process only for these checks)
  import jax
  import numpy as np
  import transformers
  from electra_jax.training import checkpoint, train
  from electra_jax.common import config as config_lib
  from electra_jax.training import optim
  from electra_jax.finetune import init
  from electra_jax.finetune.glue import model as glue_model
  from electra_jax.hf import exporting
  from jax.sharding import NamedSharding, PartitionSpec as P

  saved = exporting.load_run_config(str(mlm_run))
  manager = checkpoint.make_manager(str(mlm_run), saved.keep_checkpoints)
  state = checkpoint.restore_latest(manager, train.abstract_train_state(
      saved, train.make_model(saved), optim.make_optimizer(saved),
      NamedSharding(train.make_mesh(), P())))
  manager.close()
  pretrained = jax.device_get(state.params)
  assert int(state.step) == 4 and set(pretrained) == {'embeddings', 'discriminator', 'mlm_head'}

  # Fine-tuning starts from it as from an ELECTRA run: its embeddings and discriminator.
  config = config_lib.load_config_file(str(REPO / 'configs' / 'finetune' / 'glue.py'))
  config.update(task='mrpc', init_from=str(mlm_run), max_seq_length=64)
  start = init.load_start(config)
  assert start.description.endswith('(step 4)')
  params = init.initial_params(glue_model.Classifier(start.model, 2), start, 0, 64)
  assert set(params) == {'embeddings', 'discriminator', 'classifier'}
  for name in init.ENCODER:
    for ours, theirs in zip(jax.tree.leaves(params[name]), jax.tree.leaves(pretrained[name])):
      np.testing.assert_array_equal(ours, theirs)

  # It exports as one ElectraForMaskedLM at the discriminator's sizes, in DIR/mlm.
  exporting.export_run(str(mlm_run), str(tmp_path / 'hf'))
  assert sorted(p.name for p in (tmp_path / 'hf').iterdir()) == ['mlm']
  exported = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / 'hf' / 'mlm')
  assert exported.config.hidden_size == saved.model.hidden_size
  assert exported.config.intermediate_size == saved.model.intermediate_size


def sweep(*args):
  return subprocess.run([sys.executable, '-m', 'research.transfer_study.checkpoint_sweep', *args],
                        env=env(), cwd=REPO, capture_output=True, text=True, timeout=600)


def test_checkpoint_sweep_fine_tunes_each_start_once_and_reports_against_flops(mlm_run, tmp_path):
  pytest.importorskip('matplotlib')
  glue = REPO.parent / 'shared' / 'data' / 'glue'
  if not glue.is_dir():
    pytest.skip(f'real GLUE files not found at {glue}')
  out = tmp_path / 'sweep'
  small = [f'--run={mlm_run}', f'--out={out}', '--task=SST-2', f'--glue_dir={glue}',
           '--train_examples=64', '--finetune_epochs=1', '--max_seq_length=32']
  first = sweep(*small, '--steps=2', '--no-random_init')
  assert first.returncode == 0, first.stdout + first.stderr[-3000:]
  assert 'step-2: done in' in first.stdout and 'step-2-decay-1: done in' in first.stdout
  assert 'step-4' not in first.stdout and 'random' not in first.stdout
  report = json.loads((out / 'sweep.json').read_text())
  assert [c['step'] for c in report['checkpoints']] == [2] and report['random_init'] is None
  by_decay = report['checkpoints'][0]['by_decay']
  assert sorted(by_decay) == ['0.8', '1']  # the recipe's for this size, and none
  for name, decay in (('step-2', '0.8'), ('step-2-decay-1', '1')):
    result = json.loads((out / name / 'results.json').read_text())
    assert result['init'].endswith('(step 2)') and f"{result['layer_decay']:g}" == decay
    assert by_decay[decay]['median'] == result['score'] == by_decay[decay]['seeds']['0']
    assert by_decay[decay]['score_metric'] == 'SST-2 accuracy'

  # Again, over every checkpoint and random init, at one decay: step 2's run at it is skipped;
  # step 4 (as if saved since) and random init are fine-tuned.
  second = sweep(*small, '--layer_decays=1')
  assert second.returncode == 0, second.stdout + second.stderr[-3000:]
  assert 'step-2-decay-1: finished before' in second.stdout
  assert 'step-4-decay-1: done in' in second.stdout and 'random-decay-1: done in' in second.stdout
  report = json.loads((out / 'sweep.json').read_text())
  assert [c['step'] for c in report['checkpoints']] == [2, 4]
  for c in report['checkpoints']:
    assert c['flops'] == c['step'] * report['flops_per_step'] > 0 and list(c['by_decay']) == ['1']
  random = json.loads((out / 'random-decay-1' / 'results.json').read_text())
  assert random['init'].startswith('random') and random['layer_decay'] == 1.0
  assert report['random_init']['best']['median'] == random['score']
  assert [m['step'] for m in report['eval_curve']] == [0, 3, 4]
  assert all('eval_mlm_accuracy' in m for m in report['eval_curve'])
  table = (out / 'sweep.md').read_text()
  assert f"| step 4 | {4 * report['flops_per_step']:.3g} |" in table
  assert '| random init | 0 |' in table and '| decay 1 |' in table
  assert (out / 'sweep.png').stat().st_size > 0

  # A fine-tuning setting of the user's reaches every part, in its own folder beside the
  # parts without it.
  pooled = sweep(*small, '--steps=2', '--layer_decays=1', '--no-random_init',
                 '--finetune_set', 'pooling=mean')
  assert pooled.returncode == 0, pooled.stdout + pooled.stderr[-3000:]
  assert 'step-2-decay-1-pooling=mean: done in' in pooled.stdout
  assert json.loads((out / 'step-2-decay-1-pooling=mean' / 'config.json').read_text()
                    )['pooling'] == 'mean'
  assert json.loads((out / 'step-2-decay-1' / 'config.json').read_text())['pooling'] == 'cls'
  assert 'Every start fine-tuned with pooling=mean.' in (out / 'sweep.md').read_text()

  missing = sweep(*small, '--steps=3')
  assert missing.returncode != 0
  assert 'has no checkpoint of step(s) 3; it keeps 2, 4' in missing.stderr.strip().splitlines()[-1]
  no_task = sweep(*small[:3], f'--glue_dir={tmp_path}', *small[4:])
  assert no_task.returncode != 0 and no_task.stderr.strip().splitlines()[-1] == (
      f"checkpoint_sweep: error: --glue_dir={tmp_path} has no SST-2 folder; name the folder "
      "that holds GLUE's task folders (SST-2/, MRPC/, ...)")
  for setting, cause in (('layer_decay=0.5', 'the sweep sets layer_decay itself; use '
                          '--layer_decays'), ('pooling', 'give FIELD=VALUE')):
    refused = sweep(*small, '--finetune_set', setting)
    assert refused.returncode != 0 and cause in refused.stderr.strip().splitlines()[-1]

  # Another training set size into the same --out is refused before anything runs: each part
  # would find its folder holding the other recipe's run, and the report would mix the two.
  before = {p: p.read_bytes() for p in out.rglob('*') if p.is_file()}
  other = sweep(*small[:4], '--train_examples=32', *small[5:], '--steps=2', '--layer_decays=1',
                '--no-random_init')
  assert other.returncode != 0
  assert (f'--out={out} holds a sweep with other settings (train_examples: 64 there, 32 now); '
          'use another --out') in other.stderr.strip().splitlines()[-1]
  assert {p: p.read_bytes() for p in out.rglob('*') if p.is_file()} == before

  # Moved to another folder, the sweep finds its finished parts where they now are.
  moved = out.rename(tmp_path / 'moved')
  with run_lock.only_run_in(str(moved), 'checkpoint sweep'):  # as a sweep running there does
    busy = sweep(f'--out={moved}', *small[:1], *small[2:], '--layer_decays=1')
  assert busy.returncode != 0 and busy.stderr.strip().splitlines()[-1] == (
      f'checkpoint_sweep: error: {moved} is in use by another checkpoint sweep (a running '
      'process holds it); wait for that one to end or stop it, or use another directory')
  assert {p.relative_to(moved): p.read_bytes() for p in moved.rglob('*') if p.is_file()} == {
      p.relative_to(out): b for p, b in before.items()}
  again = sweep(f'--out={moved}', *small[:1], *small[2:], '--layer_decays=1')
  assert again.returncode == 0, again.stdout + again.stderr[-3000:]
  assert 'running' not in again.stdout and again.stdout.count('finished before') == 3, again.stdout

  # The pretraining run and GLUE found elsewhere (copies: the run serves other tests) are known
  # for what they are: the finished parts stay finished.
  run_copy, glue_copy = tmp_path / 'run-elsewhere', tmp_path / 'glue-elsewhere'
  shutil.copytree(mlm_run, run_copy)
  shutil.copytree(glue / 'SST-2', glue_copy / 'SST-2')
  elsewhere = [f'--run={run_copy}', f'--out={moved}', '--task=SST-2', f'--glue_dir={glue_copy}',
               *small[4:], '--layer_decays=1']
  found = sweep(*elsewhere)
  assert found.returncode == 0, found.stdout + found.stderr[-3000:]
  assert 'running' not in found.stdout and found.stdout.count('finished before') == 3, found.stdout
  assert json.loads((moved / 'sweep.json').read_text())['run'] == str(run_copy)
  # A part that had not finished names the run where it was: finetune would refuse to go on
  # with it, so it is set aside, whole, and run again.
  unfinished = moved / 'step-2-decay-1'
  (unfinished / 'results.json').unlink()
  kept = tree_digest(unfinished)
  resumed = sweep(*elsewhere, '--steps=2', '--no-random_init')
  assert resumed.returncode == 0, resumed.stdout + resumed.stderr[-3000:]
  assert (f"step-2-decay-1: {unfinished} was begun with init_from '{mlm_run}', data_dir "
          f"'{glue}'; it is now {unfinished}.moved") in resumed.stdout, resumed.stdout
  assert 'step-2-decay-1: done in' in resumed.stdout
  assert tree_digest(Path(f'{unfinished}.moved')) == kept
  assert json.loads((unfinished / 'config.json').read_text())['init_from'] == str(run_copy)
  # Another run (another seed) in another place is not the same run: refused, as before.
  other = shutil.copytree(run_copy, tmp_path / 'other-run')
  config = json.loads((other / 'config.json').read_text())
  (other / 'config.json').write_text(json.dumps({**config, 'seed': config['seed'] + 1}))
  refused = sweep(f'--run={other}', *elsewhere[1:])
  assert refused.returncode != 0
  assert f"(run: '{run_copy}' there, '{other}' now)" in refused.stderr.strip().splitlines()[-1]
  # The run continued with more steps (main keeps the config it began with) is still the run.
  original = (run_copy / 'config.json').read_text()
  config = json.loads(original)
  (run_copy / 'config.until-4.json').write_text(original)
  (run_copy / 'config.json').write_text(json.dumps({**config, 'num_train_steps': 8}))
  continued = sweep(*elsewhere)
  assert continued.returncode == 0, continued.stdout + continued.stderr[-3000:]
  assert continued.stdout.count('finished before') == 3, continued.stdout
  # Another run trained where the sweep's was (the folder emptied, another seed): refused, and
  # nothing in --out changes.
  (run_copy / 'config.until-4.json').unlink()
  (run_copy / 'config.json').write_text(json.dumps({**config, 'seed': config['seed'] + 1}))
  before = {p: p.read_bytes() for p in moved.rglob('*') if p.is_file()}
  retrained = sweep(*elsewhere)
  assert retrained.returncode != 0
  assert (f"(run: '{run_copy}' now holds another run (its config.json is not the one the sweep "
          "fine-tuned)); use another --out") in retrained.stderr.strip().splitlines()[-1]
  assert {p: p.read_bytes() for p in moved.rglob('*') if p.is_file()} == before
  # GLUE's task files changed in place: refused too.
  (glue_copy / 'SST-2' / 'dev.tsv').write_text('sentence\tlabel\n')
  (run_copy / 'config.json').write_text(original)
  regathered = sweep(*elsewhere)
  assert regathered.returncode != 0
  assert (f"(glue_dir: '{glue_copy}' now holds other SST-2 files than those the sweep "
          "fine-tuned on)") in regathered.stderr.strip().splitlines()[-1]


# ---- mistakes a user can make: one clear line, nothing already written damaged ----------------

def test_linear_probe_scores_every_checkpoint_and_random_init(mlm_run, tmp_path):
  glue = REPO.parent / 'shared' / 'data' / 'glue'
  if not glue.is_dir():
    pytest.skip(f'real GLUE files not found at {glue}')
  out = tmp_path / 'probe.json'
  result = subprocess.run(
      [sys.executable, '-m', 'research.transfer_study.linear_probe', f'--run={mlm_run}',
       '--task=SST-2', f'--data_dir={glue}', '--examples=200', '--max_seq_length=32',
       f'--out={out}'], env=env(), cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  probed = json.loads(out.read_text())['runs'][str(mlm_run)]
  assert probed['objective'] == 'mlm' and list(probed['steps']) == ['0', '2', '4']
  for step, row in probed['steps'].items():
    assert row['flops'] > 0 or step == '0'
    for kind in ('cls', 'mean', 'embeddings_mean'):
      assert 0.3 < row[kind]['accuracy'] < 1.0 and row[kind]['l2'] > 0
  assert f'{mlm_run} step      4' in result.stdout


def test_unknown_config_field(tmp_path):
  line = error_line(run(tmp_path, '--config.model.hiden_size=64', check=False))
  assert "unknown config field 'config.model.hiden_size'" in line
  assert "did you mean 'config.model.hidden_size'" in line


def test_missing_file(tmp_path):
  line = error_line(run(tmp_path / 'w', train_files=str(tmp_path / 'nope.txt'), check=False))
  assert 'nope.txt' in line and 'data.train_files' in line


def test_empty_corpus(tmp_path):
  corpus = tmp_path / 'empty.txt'
  corpus.write_text('\n  \n\n')
  line = error_line(run(tmp_path / 'w', train_files=str(corpus), check=False))
  assert 'empty.txt' in line and 'no text' in line


def test_non_utf8_corpus(tmp_path):
  corpus = tmp_path / 'latin1.txt'
  corpus.write_bytes('first line\ncaf\xe9 au lait\n'.encode('latin-1'))
  line = error_line(run(tmp_path / 'w', train_files=str(corpus), check=False))
  assert 'latin1.txt' in line and 'line 2' in line and 'UTF-8' in line


def test_workdir_of_another_model_is_refused_and_left_intact(finished_run):
  before = tree_digest(finished_run)
  line = error_line(run(finished_run, '--config.num_train_steps=80', '--config.model.hidden_size=64',
                        check=False))
  assert 'hidden_size' in line and '--workdir' in line
  assert tree_digest(finished_run) == before


def test_checkpoint_of_another_shape_is_refused_and_left_intact(finished_run, tmp_path):
  # Without the saved config.json the check falls to the checkpoint itself.
  workdir = tmp_path / 'copy'
  os.system(f'cp -r {finished_run} {workdir}')
  (workdir / 'config.json').unlink()
  before = tree_digest(workdir / 'checkpoints')
  line = error_line(run(workdir, '--config.num_train_steps=80', '--config.model.intermediate_size=256',
                        check=False))
  assert 'does not match the configured model' in line
  assert 'discriminator/layer_0/intermediate/kernel: checkpoint (128, 512), model (128, 256)' in line
  assert tree_digest(workdir / 'checkpoints') == before


def test_preemption_saves_the_current_step_and_resumes(finished_run, tmp_path):
  workdir = tmp_path / 'preempted'
  # save_every is out of reach, so the only checkpoint is the one the preemption writes.
  process = subprocess.Popen(command(workdir, '--config.num_train_steps=60',
                                     '--config.save_every=1000'),
                             env=env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
  deadline = time.time() + 300
  while not (workdir / 'metrics.jsonl').exists() or max(metrics(workdir), default=0) < 20:
    assert process.poll() is None and time.time() < deadline
    time.sleep(0.2)
  process.send_signal(signal.SIGTERM)
  _, stderr = process.communicate(timeout=120)
  assert process.returncode == 143, stderr[-2000:]  # 128 + SIGTERM: not finished, for a scheduler
  saved = [int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit()]
  assert len(saved) == 1 and 20 <= saved[0] <= 50, saved  # so window 51-60 follows the restart
  assert f'stopped by SIGTERM at step {saved[0]} of 60, its checkpoint saved' in stderr

  result = run(workdir, '--config.num_train_steps=60', '--config.save_every=1000')
  assert f'resuming at step {saved[0]} of 60' in result.stderr
  # Windows wholly after the restart match the uninterrupted run.
  resumed, uninterrupted = metrics(workdir), metrics(finished_run)
  for key in LOSS_KEYS:
    assert resumed[60][key] == pytest.approx(uninterrupted[60][key], rel=1e-5), key


def free_port():
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def two_processes(command_of, stdout):
  """Two local processes, two CPU devices each, joined at a free port: command_of(*flags)
  is process i's command given the flags that join it."""
  port = free_port()
  return [subprocess.Popen(
      command_of(f'--coordinator_address=localhost:{port}', '--num_processes=2',
                 f'--process_id={i}'),
      env={**env(), 'JAX_NUM_CPU_DEVICES': '2'}, cwd=REPO, stdout=stdout,
      stderr=subprocess.PIPE, text=True) for i in range(2)]


def test_two_processes_train_like_one_with_the_same_devices(tmp_path, wikitext):
  steps = ['--config.num_train_steps=20', '--config.log_every=5', '--config.save_every=20']
  one = tmp_path / 'one_process'
  subprocess.run(command(one, *steps), env={**env(), 'JAX_NUM_CPU_DEVICES': '4'}, cwd=REPO,
                 check=True, capture_output=True, timeout=600)
  two = tmp_path / 'two_processes'
  workers = two_processes(lambda *join: command(two, *steps, *join), stdout=subprocess.DEVNULL)
  for worker in workers:
    _, stderr = worker.communicate(timeout=600)
    assert worker.returncode == 0, stderr[-3000:]
  assert 'on 4 device(s)' in stderr
  # One metrics file, written by process 0 alone: one line per logged step, not two.
  lines = (two / 'metrics.jsonl').read_text().splitlines()
  assert [json.loads(l)['step'] for l in lines] == [5, 10, 15, 20]
  reference, distributed = metrics(one), metrics(two)
  for step in reference:
    for key in LOSS_KEYS:
      assert distributed[step][key] == pytest.approx(reference[step][key], rel=1e-5), (step, key)
  assert sorted(p.name for p in (two / 'checkpoints').iterdir()) == ['20']


SKEWED_COLLECTIVE = """
import sys, time
from absl import flags
from electra_jax import main
flags.FLAGS(['main', '--config=configs/tiny.py', '--workdir=unused', *sys.argv[1:]])
main.start_processes()
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((jax.device_count(),), ('data',))
local = jnp.ones((jax.local_device_count(),))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P('data')), local)
total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))
if jax.process_index() == 1:
  time.sleep(40)  # as if its compile had taken 40 s longer
print('sum', float(total(x)))
"""


@pytest.mark.slow
def test_processes_that_reach_the_first_step_40_s_apart_still_train():
  """start_processes leaves the CPU collectives set up, so a first collective that one process
  reaches 40 s after the other waits for it instead of failing at gloo's fixed 30 s."""
  workers = two_processes(lambda *join: [sys.executable, '-c', SKEWED_COLLECTIVE, *join],
                          stdout=subprocess.PIPE)
  for worker in workers:
    stdout, stderr = worker.communicate(timeout=300)
    assert worker.returncode == 0, stderr[-3000:]
    assert 'sum 4.0' in stdout
