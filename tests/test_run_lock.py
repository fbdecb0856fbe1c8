"""electra_jax/common/run_lock.py: one process at a time in a run's directory, released however the
process ends."""

import importlib
import os
import signal
import subprocess
import sys

import pytest

from conftest import REPO
from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError

HOLD = ('import sys, time\n'
        'from electra_jax.common import run_lock\n'
        "with run_lock.only_run_in(sys.argv[1], 'pretraining run'):\n"
        "  print('held', flush=True)\n"
        '  time.sleep(600)\n')


def test_a_directory_held_by_a_live_process_is_refused_and_freed_when_it_is_killed(tmp_path):
  holder = subprocess.Popen([sys.executable, '-c', HOLD, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    with pytest.raises(UsageError) as refused:
      with run_lock.only_run_in(str(tmp_path), 'pretraining run'):
        pytest.fail('entered a directory another process holds')
    assert str(refused.value) == (
        f'{tmp_path} is in use by another pretraining run (a running process holds it); wait '
        'for that one to end or stop it, or use another directory')
  finally:
    holder.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops the lock
    holder.wait()
  with run_lock.only_run_in(str(tmp_path), 'pretraining run'):
    pass
  assert os.listdir(tmp_path) == []  # it leaves no file behind


def test_a_second_holder_in_the_same_process_is_refused_until_the_first_is_done(tmp_path):
  with run_lock.only_run_in(str(tmp_path), 'transfer study'):
    with pytest.raises(UsageError, match='in use by another transfer study'):
      with run_lock.only_run_in(str(tmp_path), 'transfer study'):
        pass
  with run_lock.only_run_in(str(tmp_path), 'transfer study'):
    pass


def test_a_directory_it_made_is_removed_only_if_the_run_left_it_empty(tmp_path):
  refused, written, kept = tmp_path / 'refused', tmp_path / 'written', tmp_path / 'kept'
  with pytest.raises(UsageError):
    with run_lock.only_run_in(str(refused), 'fine-tuning run', create=True):
      assert refused.is_dir()
      raise UsageError('a setting refused before anything was written')
  assert not refused.exists()
  with run_lock.only_run_in(str(written), 'fine-tuning run', create=True):
    (written / 'config.json').write_text('{}')
  assert (written / 'config.json').exists()
  kept.mkdir()  # the user's own (empty) folder stays
  with run_lock.only_run_in(str(kept), 'fine-tuning run', create=True):
    pass
  assert kept.is_dir()


def test_an_object_store_directory_is_not_locked():
  with run_lock.only_run_in('gs://bucket/run', 'pretraining run'):
    with run_lock.only_run_in('gs://bucket/run', 'pretraining run'):
      pass


@pytest.mark.parametrize('family', ['glue.run', 'squad.run', 'tagging.run'])
def test_every_fine_tuning_family_holds_its_workdir(family, tmp_path):
  fine_tune = importlib.import_module(f'electra_jax.finetune.{family}').fine_tune
  (tmp_path / 'config.json').write_text('{}')
  with run_lock.only_run_in(str(tmp_path), 'fine-tuning run'):  # as a run there does
    with pytest.raises(UsageError, match=f'{tmp_path} is in use by another fine-tuning run'):
      fine_tune(None, str(tmp_path))  # refused before the config is read
  assert os.listdir(tmp_path) == ['config.json']
