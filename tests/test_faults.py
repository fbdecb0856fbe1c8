"""Faults injected for real into `python -m electra_jax.main`: SIGKILLs at random moments, many of
them while Orbax is writing a checkpoint, Ctrl-C and SIGTERM, and damaged checkpoints; and a
fine-tuning run (`python -m electra_jax.finetune`) killed mid-seed.

A killed run restarted with the same command must end exactly where an uninterrupted one does:
the same metrics.jsonl record for every step (every float equal, each step logged once, so no
batch was repeated or skipped: the batch of step s is a pure function of (seed, s)) and the same
final train state, bit for bit.

Runs are tiny (a 2-layer ELECTRA of width 32 on a WordPiece vocabulary of 31 words) and share a
persistent compilation cache (kept between test sessions: JAX keys its entries by the program,
the JAX version and the compiler options), so a restart costs its Python start-up rather than a
compilation.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from conftest import JAX_CACHE, REPO, error_line, tree_digest
from test_finetune import TINY, glue_folder, sentences, write_vocab

TMP_MARK = '.orbax-checkpoint-tmp'  # how Orbax names a checkpoint it has not committed yet


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  root = tmp_path_factory.mktemp('faults')
  write_vocab(root / 'vocab.txt')
  rng = np.random.default_rng(0)
  for split, docs in (('train', 80), ('eval', 8)):
    (root / f'{split}.txt').write_text(
        '\n\n'.join('\n'.join(sentences(rng, 6)) for _ in range(docs)))
  return root


def command(corpus, workdir, steps, *overrides):
  return [sys.executable, '-m', 'electra_jax.main', f'--config={REPO / "configs" / "tiny.py"}',
          f'--workdir={workdir}', f'--config.num_train_steps={steps}',
          f'--config.data.train_files={corpus / "train.txt"}',
          f'--config.data.eval_files={corpus / "eval.txt"}',
          f'--config.data.vocab_model={corpus / "vocab.txt"}', '--config.data.prepare_workers=1',
          f'--config.model.vocab_size={len((corpus / "vocab.txt").read_text().split())}',
          '--config.model.embedding_size=16',
          '--config.model.hidden_size=32', '--config.model.num_heads=2',
          '--config.model.intermediate_size=64', '--config.model.max_position_embeddings=64',
          '--config.model.generator_hidden_size=16', '--config.batch_size=8',
          '--config.max_seq_length=32', '--config.warmup_steps=4', '--config.log_every=1',
          '--config.save_every=2', '--config.keep_checkpoints=3', '--config.eval_every=4',
          '--config.eval_steps=1', *overrides]


def env():
  return {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1',
          'JAX_COMPILATION_CACHE_DIR': str(JAX_CACHE), 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0',
          'JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES': '-1'}


def run(corpus, workdir, steps, *overrides, check=True):
  result = subprocess.run(command(corpus, workdir, steps, *overrides), env=env(),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
  if check and result.returncode != 0:
    raise AssertionError(f'run failed:\n{result.stderr[-3000:]}')
  return result


def records(workdir):
  """metrics.jsonl as (train records, eval records), tokens_per_s (a timing) left out."""
  lines = [json.loads(line) for line in Path(workdir, 'metrics.jsonl').read_text().splitlines()]
  for line in lines:
    line.pop('tokens_per_s', None)
  return [l for l in lines if 'loss' in l], [l for l in lines if 'eval_loss' in l]


def final_state(workdir, step):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  with ocp.StandardCheckpointer() as checkpointer:
    state = checkpointer.restore(Path(workdir, 'checkpoints', str(step), 'default').absolute())
  import jax  # pylint: disable=g-import-not-at-top
  return {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


def max_abs_difference(a, b):
  """The largest |a - b| over every leaf of two states; raises unless they are bitwise equal."""
  assert a.keys() == b.keys()
  worst = 0.0
  for name in a:
    assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
    if a[name].tobytes() != b[name].tobytes():
      worst = max(worst, float(np.max(np.abs(a[name].astype(np.float64) - b[name]))))
      raise AssertionError(f'{name} differs (max abs difference {worst})')
  return worst


def uncommitted(workdir):
  """{name: (inode, ctime)} of the checkpoint directories Orbax is writing (or was, when killed).

  A restart's save of the same step replaces the leftover directory of that name: a new inode,
  or at least a new ctime (an inode number may be reused at once)."""
  folder = Path(workdir, 'checkpoints')
  if not folder.is_dir():
    return {}
  found = {}
  for entry in os.scandir(folder):
    if TMP_MARK in entry.name:
      try:
        found[entry.name] = (entry.inode(), entry.stat().st_ctime_ns)
      except FileNotFoundError:  # committed (renamed) meanwhile
        pass
  return found


def logged_steps(workdir):
  try:
    return [json.loads(line)['step'] for line in
            Path(workdir, 'metrics.jsonl').read_text().splitlines() if '"loss"' in line]
  except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or being written
    return []


def kill_once(process, workdir, kind, rng, steps):
  """SIGKILLs `process` at a moment of `kind`; returns whether a checkpoint write was cut.

  'write': as soon as a checkpoint directory appears that Orbax has not committed yet.
  'step': a random 0-0.3 s after a random step not yet logged was logged.
  'start': a random 0.5-6 s after the start: in Python's start-up, preparation, compilation...
  """
  before = uncommitted(workdir)
  done = max(logged_steps(workdir), default=0)
  target = int(rng.integers(done + 1, steps)) if done + 1 < steps else steps
  started = time.time()
  while process.poll() is None:
    assert time.time() - started < 300, 'the run made no progress in 300 s'
    if kind == 'write':
      now = uncommitted(workdir)
      if any(before.get(name) != inode for name, inode in now.items()):
        break
      time.sleep(0.001)
    elif kind == 'step':
      if max(logged_steps(workdir), default=0) >= target:
        time.sleep(rng.uniform(0, 0.3))
        break
      time.sleep(0.02)
    else:
      time.sleep(rng.uniform(0.5, 6))
      break
  process.send_signal(signal.SIGKILL)
  process.wait()
  after = uncommitted(workdir)
  return any(before.get(name) != inode for name, inode in after.items())


def run_with_kills(corpus, workdir, steps, plan, seed):
  """Starts the run once per kind in `plan` and kills it (kill_once), then runs it to the end.

  Returns (kills, of which during a checkpoint write); a run that ends before its kill lands
  counts as no kill, and a 'write' kill that came too late is tried again (up to 3 times).
  """
  rng = np.random.default_rng(seed)
  kills = during_writes = 0
  for kind in plan:
    for _ in range(3 if kind == 'write' else 1):  # a write may commit before the kill lands
      process = subprocess.Popen(command(corpus, workdir, steps), env=env(),
                                 cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
      cut = kill_once(process, workdir, kind, rng, steps)
      if process.returncode == -signal.SIGKILL:
        kills, during_writes = kills + 1, during_writes + cut
      if cut or process.returncode != -signal.SIGKILL:
        break
  run(corpus, workdir, steps)
  return kills, during_writes


def killed_once_and_resumed(corpus, tmp_path, seed, *flags):
  """Runs `flags` uninterrupted, and again killed once mid-step and restarted to the end;
  returns (the killed run's workdir, the uninterrupted one's)."""
  reference = tmp_path / 'uninterrupted'
  run(corpus, reference, STEPS, *flags)
  workdir = tmp_path / 'killed'
  process = subprocess.Popen(command(corpus, workdir, STEPS, *flags), env=env(), cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  kill_once(process, workdir, 'step', np.random.default_rng(seed), STEPS)
  assert process.returncode == -signal.SIGKILL
  assert 0 < max(logged_steps(workdir), default=0) < STEPS
  run(corpus, workdir, STEPS, *flags)
  return workdir, reference


def check_same_as_uninterrupted(workdir, reference, steps):
  train, evals = records(workdir)
  assert [r['step'] for r in train] == list(range(1, steps + 1))  # each step once, in order
  assert [r['step'] for r in evals] == list(range(0, steps + 1, 4))
  assert (train, evals) == records(reference)  # every float, bit for bit
  return max_abs_difference(final_state(workdir, steps), final_state(reference, steps))


STEPS = 12


@pytest.fixture(scope='module')
def uninterrupted(corpus, tmp_path_factory):
  workdir = tmp_path_factory.mktemp('uninterrupted')
  run(corpus, workdir, STEPS)
  return workdir


def test_kills_at_any_moment_even_mid_checkpoint_resume_exactly(corpus, uninterrupted, tmp_path):
  workdir = tmp_path / 'killed'
  kills, during_writes = run_with_kills(corpus, workdir, STEPS, ['write', 'step'], 0)
  assert kills >= 2 and during_writes >= 1, (kills, during_writes)
  assert check_same_as_uninterrupted(workdir, uninterrupted, STEPS) == 0.0


# Both draw words the same way (masking.select_words); whole_word's run is kept for -m slow.
@pytest.mark.parametrize('selection', [pytest.param('whole_word', marks=pytest.mark.slow), 'span'])
def test_a_word_masking_run_killed_mid_run_resumes_exactly(tmp_path, selection):
  """config.masking draws its words inside the step from the step's key: a kill and a restart
  change nothing. Here a third of the words take a '##s' or '##ed' ending, so words have one to
  three pieces."""
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  vocab = corpus / 'vocab.txt'
  write_vocab(vocab)
  vocab.write_text(vocab.read_text() + '##s\n##ed\n')
  rng = np.random.default_rng(0)
  for split, docs in (('train', 80), ('eval', 8)):
    lines = [' '.join(w + rng.choice(['', '', '', '', 's', 'ed']) for w in line[:-1].split())
             + '.' for line in sentences(rng, 6 * docs)]
    (corpus / f'{split}.txt').write_text('\n\n'.join('\n'.join(lines[i:i + 6])
                                                     for i in range(0, len(lines), 6)))
  workdir, reference = killed_once_and_resumed(corpus, tmp_path, 2,
                                               f'--config.masking={selection}')
  assert json.loads((workdir / 'config.json').read_text())['masking'] == selection
  assert check_same_as_uninterrupted(workdir, reference, STEPS) == 0.0


def test_a_frozen_generator_run_killed_mid_run_resumes_exactly(corpus, tmp_path):
  """config.generator_init: the generator is loaded only when a run starts, and after that the
  checkpoint holds it. A restart after a SIGKILL must take it from there, unchanged."""
  source = tmp_path / 'mlm'  # an MLM run of the generator's shape: 16 wide, one head, FFN 64
  run(corpus, source, 2, '--config.objective=mlm', '--config.model.hidden_size=16',
      '--config.model.num_heads=1', '--config.model.intermediate_size=64')
  flags = (f'--config.generator_init={source}', '--config.embedding_sharing=none',
           '--config.temperature_start=2.0')
  workdir, reference = killed_once_and_resumed(corpus, tmp_path, 3, *flags)
  assert check_same_as_uninterrupted(workdir, reference, STEPS) == 0.0
  state, mlm = final_state(workdir, STEPS), final_state(source, 2)
  generator = {k: v for k, v in state.items() if k.startswith("['params']['generator")}
  assert generator and all(  # the MLM's embeddings, encoder and head, bit for bit
      v.tobytes() == mlm[k.replace("['generator_embeddings']", "['embeddings']")
                         .replace("['generator']", "['discriminator']")
                         .replace("['generator_head']", "['mlm_head']")].tobytes()
      for k, v in generator.items())


@pytest.mark.slow
def test_many_kills_resume_exactly(corpus, tmp_path):
  steps = 40
  reference = tmp_path / 'uninterrupted'
  run(corpus, reference, steps)
  workdir = tmp_path / 'killed'
  plan = ['start', 'write', 'step', 'write', 'step', 'write', 'start', 'write', 'step', 'write',
          'step', 'write']
  started = time.time()
  kills, during_writes = run_with_kills(corpus, workdir, steps, plan, 1)
  difference = check_same_as_uninterrupted(workdir, reference, steps)
  print(f'\n{kills} kills, {during_writes} during a checkpoint write, {steps} steps, '
        f'max abs difference {difference}, {time.time() - started:.0f} s')
  assert kills >= 10 and during_writes >= 3, (kills, during_writes)
  assert difference == 0.0  # the final parameters and optimizer state, bit for bit


def test_a_metrics_line_cut_by_a_kill_is_dropped_on_resume(tmp_path):
  from electra_jax.training import report  # pylint: disable=g-import-not-at-top
  whole = ''.join(json.dumps({'step': s, 'loss': 1.0}) + '\n' for s in (1, 2, 3))
  (tmp_path / 'metrics.jsonl').write_text(whole + '{"step": 4, "lo')
  report.trim_metrics_file(str(tmp_path), 2)
  assert (tmp_path / 'metrics.jsonl').read_text() == whole.rsplit('{', 1)[0]
  report.trim_metrics_file(str(tmp_path), -1)  # no checkpoint: the run starts over
  assert (tmp_path / 'metrics.jsonl').read_text() == ''


# ---- damaged checkpoints, and checkpoints of another run ---------------------------------------

def truncate_array_files(checkpoint):
  # Every data file, not only the largest: once in CI the largest alone cut in half still
  # restored, so the damage never reached what was read.
  for file in checkpoint.rglob('ocdbt.process_0/d/*'):
    file.write_bytes(file.read_bytes()[:file.stat().st_size // 2])


def corrupt_manifest(checkpoint):
  manifest = checkpoint / 'default' / 'manifest.ocdbt'
  data = bytearray(manifest.read_bytes())
  for i in range(len(data) // 2, len(data)):
    data[i] ^= 0x5A
  manifest.write_bytes(bytes(data))


def truncate_metadata(checkpoint):
  metadata = checkpoint / 'default' / '_METADATA'
  metadata.write_bytes(metadata.read_bytes()[:100])


def failed_restore_error_line(result):
  """The one error line of a run stopped by a failed restore. Orbax raises at the first unreadable
  array and closes its event loop while TensorStore still reads the others: in most runs those
  reads print tracebacks ('Event loop is closed'), in pieces that may land inside the error
  line's, and nothing in the library silences them. So the line is found where it is."""
  errors = re.findall(r'electra_jax: error: .*', result.stderr)
  assert result.returncode != 0 and len(errors) == 1, result.stderr[-2000:]
  return errors[0]


@pytest.mark.parametrize('damage', [truncate_array_files, corrupt_manifest,
                                    truncate_metadata])
def test_a_damaged_checkpoint_stops_in_one_line_naming_it_and_the_fix(corpus, uninterrupted,
                                                                      tmp_path, damage):
  workdir = tmp_path / 'damaged'
  os.system(f'cp -r {uninterrupted} {workdir}')
  damage(workdir / 'checkpoints' / str(STEPS))
  before = tree_digest(workdir)
  line = failed_restore_error_line(run(corpus, workdir, STEPS + 4, check=False))
  assert f'checkpoint {workdir}/checkpoints/{STEPS} cannot be read' in line
  assert '--config.checkpoint_fallback=true' in line
  assert tree_digest(workdir) == before  # nothing touched


def test_checkpoint_fallback_sets_the_damaged_one_aside_and_resumes_exactly(corpus, uninterrupted,
                                                                           tmp_path):
  workdir = tmp_path / 'fallback'
  os.system(f'cp -r {uninterrupted} {workdir}')
  damaged = workdir / 'checkpoints' / str(STEPS)
  truncate_array_files(damaged)
  digest = tree_digest(damaged)
  result = run(corpus, workdir, STEPS, '--config.checkpoint_fallback=true')
  assert f'checkpoints/{STEPS} cannot be read' in result.stderr
  assert f'resuming at step {STEPS - 2} of {STEPS}' in result.stderr
  kept = workdir / 'damaged_checkpoints' / str(STEPS)
  assert tree_digest(kept) == digest  # kept as it was, out of Orbax's way
  assert check_same_as_uninterrupted(workdir, uninterrupted, STEPS) == 0.0


@pytest.mark.parametrize('override, message', [
    ('--config.objective=mlm', "written by a run of objective 'electra', not 'mlm'"),
    # Same shapes, other meaning: only the model config recorded in the checkpoint tells.
    ('--config.model.num_heads=4', 'num_heads: checkpoint 2, now 4'),
])
def test_a_checkpoint_of_another_run_is_refused_even_without_config_json(
    corpus, uninterrupted, tmp_path, override, message):
  workdir = tmp_path / 'other'
  os.system(f'cp -r {uninterrupted} {workdir}')
  (workdir / 'config.json').unlink()  # so that only the checkpoint can tell
  before = tree_digest(workdir)
  line = error_line(run(corpus, workdir, STEPS + 4, override, check=False))
  assert f'checkpoint {workdir}/checkpoints/{STEPS}' in line and message in line
  assert tree_digest(workdir) == before


# ---- Ctrl-C and SIGTERM: save, stop, say so; a second Ctrl-C stops at once ---------------------

SIGNAL_STEPS = 30


def wikitext_command(workdir):
  """A real tiny run on WikiText-2 (its own vocabulary), logging every step, saving only at 100."""
  from conftest import WIKITEXT  # pylint: disable=g-import-not-at-top
  return [sys.executable, '-m', 'electra_jax.main', '--config=configs/tiny.py',
          f'--workdir={workdir}', f'--config.data.train_files={WIKITEXT / "wiki.valid.raw"}',
          f'--config.num_train_steps={SIGNAL_STEPS}', '--config.batch_size=8',
          '--config.max_seq_length=64', '--config.model.vocab_size=1000', '--config.log_every=1',
          '--config.save_every=100', '--config.eval_every=0', '--config.warmup_steps=10']


@pytest.fixture(scope='module')
def wikitext_uninterrupted(tmp_path_factory, wikitext):
  workdir = tmp_path_factory.mktemp('wikitext_uninterrupted')
  subprocess.run(wikitext_command(workdir), env=env(), cwd=REPO, check=True, capture_output=True,
                 timeout=600)
  return workdir


def signal_when(command_line, signals, reached, stderr_path):
  """Starts `command_line` in a session of its own, as a terminal's foreground job, and sends
  `signals` to all its processes once reached() is true; (exit status, stderr, seconds from the
  last signal to the exit). Its log goes to a file, which no pipe's size can block."""
  with open(stderr_path, 'w') as stderr:
    process = subprocess.Popen(command_line, env=env(), cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=stderr, start_new_session=True)
    deadline = time.time() + 300
    while not reached():
      assert process.poll() is None, Path(stderr_path).read_text()[-3000:]
      assert time.time() < deadline, 'the run did not get there in time'
      time.sleep(0.01)
    for signum in signals:
      os.killpg(process.pid, signum)
      sent = time.time()
      time.sleep(0.05)
    process.wait(timeout=300)
  return process.returncode, Path(stderr_path).read_text(), time.time() - sent


def signal_at_step(workdir, signals, at=10):
  """signal_when for the WikiText run in `workdir`, once its step `at` is logged."""
  return signal_when(wikitext_command(workdir), signals,
                     lambda: max(logged_steps(workdir), default=0) >= at,
                     workdir.with_name(workdir.name + '.stderr'))


def check_resumes_exactly(workdir, reference):
  result = subprocess.run(wikitext_command(workdir), env=env(), cwd=REPO, capture_output=True,
                          text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  train, _ = records(workdir)
  assert [r['step'] for r in train] == list(range(1, SIGNAL_STEPS + 1))
  assert train == records(reference)[0]  # every float, bit for bit
  assert max_abs_difference(final_state(workdir, SIGNAL_STEPS),
                            final_state(reference, SIGNAL_STEPS)) == 0.0


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_ctrl_c_or_sigterm_saves_stops_unfinished_and_resumes_exactly(
    signum, wikitext_uninterrupted, tmp_path):
  """The first Ctrl-C is a preemption, as SIGTERM is: the step under way ends and is saved, one
  line says so, and the exit status (130, 143) tells a scheduler the run did not finish."""
  workdir = tmp_path / 'stopped'
  status, stderr, _ = signal_at_step(workdir, [signum])
  assert status == 128 + signum, stderr[-3000:]
  assert 'Traceback' not in stderr and 'KeyboardInterrupt' not in stderr, stderr[-3000:]
  stopped_at = max(logged_steps(workdir))
  assert 10 <= stopped_at < SIGNAL_STEPS
  name = 'Ctrl-C (SIGINT)' if signum == signal.SIGINT else 'SIGTERM'
  assert stderr.count(f'stopped by {name} at step {stopped_at} of {SIGNAL_STEPS}, its checkpoint '
                      'saved; run the same command again to resume') == 1, stderr[-3000:]
  assert sorted(os.listdir(workdir / 'checkpoints')) == [str(stopped_at)]  # save_every is 100
  check_resumes_exactly(workdir, wikitext_uninterrupted)


def test_a_second_ctrl_c_stops_at_once_and_the_run_still_resumes_exactly(
    wikitext_uninterrupted, tmp_path):
  workdir = tmp_path / 'aborted'
  status, stderr, seconds = signal_at_step(workdir, [signal.SIGINT, signal.SIGINT])
  assert status == 130 and seconds < 5, (status, seconds, stderr[-3000:])
  assert stderr.strip().splitlines()[-1] == (
      'electra_jax: stopped at once by a second Ctrl-C, without saving; run the same command '
      'again to resume from the last checkpoint')
  assert 'Traceback' not in stderr, stderr[-3000:]
  check_resumes_exactly(workdir, wikitext_uninterrupted)


# ---- fine-tuning killed mid-seed ----------------------------------------------------------------

FINETUNE_STEPS = 60  # per seed: 24 SST-2 sentences, 20 epochs of batches of 8


def finetune_command(corpus, workdir):
  return [sys.executable, '-m', 'electra_jax.finetune',
          f'--config={REPO / "configs" / "finetune" / "glue.py"}', '--config.task=SST-2',
          f'--config.data_dir={corpus / "glue"}', f'--config.vocab={corpus / "vocab.txt"}',
          f'--workdir={workdir}', '--config.seeds=4,7', '--config.max_seq_length=32',
          '--config.batch_size=8', '--config.eval_batch_size=8', '--config.num_epochs=20',
          '--config.log_every=1', '--config.save_every=4',
          f'--config.model.vocab_size={len((corpus / "vocab.txt").read_text().split())}',
          *(f'--config.model.{k}={v}' for k, v in {**TINY, 'num_layers': 1}.items())]


def finetune_records(workdir):
  lines = [json.loads(line) for line in Path(workdir, 'metrics.jsonl').read_text().splitlines()]
  for line in lines:
    line.pop('steps_per_s')
  return lines


def scores(workdir):
  summary = json.loads(Path(workdir, 'results.json').read_text())
  return {k: summary[k] for k in ('seeds', 'median', 'score')}


@pytest.mark.slow  # three fine-tuning processes: about 25 s of CPU
def test_fine_tuning_killed_mid_seed_resumes_to_the_same_scores(corpus, tmp_path):
  if not (corpus / 'glue').exists():
    glue_folder(corpus / 'glue')
  environment = env()
  reference = tmp_path / 'uninterrupted'
  subprocess.run(finetune_command(corpus, reference), env=environment, cwd=REPO, check=True,
                 capture_output=True, timeout=600)

  workdir = tmp_path / 'killed'
  process = subprocess.Popen(finetune_command(corpus, workdir), env=environment, cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  # Killed in the second seed's training, after its first checkpoints.
  while not any(r['seed'] == 7 and r['step'] >= 10 for r in
                (json.loads(l) for l in logged_lines(workdir))):
    assert process.poll() is None and time.time() < deadline, 'the run ended before its kill'
    time.sleep(0.001)
  process.send_signal(signal.SIGKILL)
  process.wait()
  resumed_at = max(int(p.name) for p in (workdir / 'checkpoints' / 'seed_7').iterdir()
                   if p.name.isdigit())
  assert 4 <= resumed_at < FINETUNE_STEPS and not (workdir / 'results.json').exists()

  rerun = subprocess.run(finetune_command(corpus, workdir), env=environment, cwd=REPO,
                         capture_output=True, text=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  # The finished seed is not trained again; the other continues where its checkpoint left it.
  assert f'seed 4: resuming at step {FINETUNE_STEPS} of {FINETUNE_STEPS}' in rerun.stderr
  assert f'seed 7: resuming at step {resumed_at} of {FINETUNE_STEPS}' in rerun.stderr
  assert scores(workdir) == scores(reference)  # every score, exactly
  assert finetune_records(workdir) == finetune_records(reference)  # each step once, same loss


@pytest.fixture(scope='module')
def finetune_uninterrupted(corpus, tmp_path_factory):
  if not (corpus / 'glue').exists():
    glue_folder(corpus / 'glue')
  workdir = tmp_path_factory.mktemp('finetune_uninterrupted')
  subprocess.run(finetune_command(corpus, workdir), env=env(), cwd=REPO, check=True,
                 capture_output=True, timeout=600)
  return workdir


def test_fine_tuning_ctrl_c_saves_the_seed_exits_unfinished_and_resumes_to_the_same_scores(
    corpus, finetune_uninterrupted, tmp_path):
  workdir = tmp_path / 'stopped'
  in_second_seed = lambda: any(r['seed'] == 7 and r['step'] >= 10
                               for r in map(json.loads, logged_lines(workdir)))
  status, stderr, _ = signal_when(finetune_command(corpus, workdir), [signal.SIGINT],
                                  in_second_seed, tmp_path / 'stopped.stderr')
  assert status == 130 and 'Traceback' not in stderr, stderr[-3000:]
  stopped_at = max(r['step'] for r in map(json.loads, logged_lines(workdir)) if r['seed'] == 7)
  assert 10 <= stopped_at < FINETUNE_STEPS
  assert stderr.count(f'stopped by Ctrl-C (SIGINT) at step {stopped_at} of {FINETUNE_STEPS} of '
                      'SST-2 seed 7, its checkpoint saved; run the same command again to '
                      'resume') == 1, stderr[-3000:]
  # That step is saved (save_every is 4), and no results claim a finished run.
  assert os.listdir(workdir / 'checkpoints' / 'seed_7') == [str(stopped_at)]
  assert not (workdir / 'results.json').exists()
  rerun = subprocess.run(finetune_command(corpus, workdir), env=env(), cwd=REPO,
                         capture_output=True, text=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert f'seed 7: resuming at step {stopped_at} of {FINETUNE_STEPS}' in rerun.stderr
  assert scores(workdir) == scores(finetune_uninterrupted)  # every score, exactly
  assert finetune_records(workdir) == finetune_records(finetune_uninterrupted)


def logged_lines(workdir):
  try:
    return [l for l in Path(workdir, 'metrics.jsonl').read_text().splitlines() if l.endswith('}')]
  except FileNotFoundError:
    return []


def test_a_fine_tuning_workdir_of_another_recipe_is_refused(tmp_path):
  # pylint: disable=g-import-not-at-top
  from electra_jax.common.errors import UsageError
  from electra_jax.finetune import loop as finetune
  from test_finetune import finetune_config
  config = finetune_config(task='SST-2', seeds='0')
  finetune.prepare_workdir(config, str(tmp_path))
  (tmp_path / 'checkpoints' / 'seed_0').mkdir(parents=True)
  config.update(seeds='0,1', log_every=7, save_every=3)  # these change no seed's training
  finetune.prepare_workdir(config, str(tmp_path))
  config.learning_rate = 1e-3
  with pytest.raises(UsageError, match=r'holds seed checkpoints of another fine-tuning run '
                                       r'\(learning_rate: saved 0.0, now 0.001\); use a new'):
    finetune.prepare_workdir(config, str(tmp_path))


RESTORE_A_DAMAGED_CHECKPOINT = """
import pathlib, sys
from typing import NamedTuple
import jax, numpy as np
from electra_jax.training import checkpoint

class State(NamedTuple):
  params: dict

# Many small arrays, so that many reads are under way when the damaged one fails.
rng = np.random.default_rng(0)
state = jax.device_put(State({f'w{i}': rng.standard_normal((64, 64), np.float32)
                              for i in range(150)}))
manager = checkpoint.make_manager(sys.argv[1], keep=1)
checkpoint.save(manager, 1, state)
manager.wait_until_finished()
files = list(pathlib.Path(sys.argv[1], 'checkpoints', '1').rglob('ocdbt.process_0/d/*'))
largest = max(files, key=lambda f: f.stat().st_size)
largest.write_bytes(largest.read_bytes()[:largest.stat().st_size // 2])
for _ in range(3):
  try:
    checkpoint.restore(manager, 1, state)
  except checkpoint.DamagedCheckpoint as e:
    print('refused:', e, flush=True)
"""


def test_a_failed_restore_is_refused_every_time_it_is_tried(tmp_path):
  """Orbax gives up at the first unreadable array while TensorStore still reads the others; the
  reads it abandons (which may print tracebacks to stderr) leave nothing that changes the next
  try: each is refused with the same error."""
  result = subprocess.run([sys.executable, '-c', RESTORE_A_DAMAGED_CHECKPOINT, str(tmp_path)],
                          env=env(), cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  refusals = result.stdout.splitlines()
  assert len(refusals) == 3 and len(set(refusals)) == 1, result.stdout
  assert refusals[0].startswith('refused: checkpoint ') and 'cannot be read' in refusals[0]


def test_a_checkpoint_of_another_state_layout_is_refused_and_never_set_aside(tmp_path):
  """An optimizer state whose tree differs only in empty nodes (what a changed optax chain gives)
  reads fine, so it is no damage: refused in one line naming the cause, and kept in place even
  with checkpoint_fallback, which would otherwise set every checkpoint of the run aside."""
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from electra_jax.common.errors import UsageError  # pylint: disable=g-import-not-at-top
  from electra_jax.training import checkpoint  # pylint: disable=g-import-not-at-top

  state_type = NamedTuple('State', [('params', dict), ('opt_state', tuple)])

  def state(decay_state):
    return jax.device_put(state_type({'w': np.arange(4, dtype=np.float32)},
                                     (decay_state, {'count': np.int32(7)})))

  manager = checkpoint.make_manager(str(tmp_path), keep=1)
  checkpoint.save(manager, 1, state(optax.EmptyState()))
  manager.wait_until_finished()
  with pytest.raises(UsageError, match=r'checkpoints/1 holds a training state laid out otherwise'
                     r'.*Nothing was moved or changed'):
    checkpoint.restore_latest(manager, state(optax.MaskedState(optax.EmptyState())),
                              fallback=True)
  assert manager.latest_step() == 1 and not (tmp_path / checkpoint.DAMAGED).exists()
  restored = checkpoint.restore_latest(manager, state(optax.EmptyState()))
  assert int(restored.opt_state[1]['count']) == 7
  manager.close()
