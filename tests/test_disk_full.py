"""A disk that fills during a run: the failed checkpoint write stops the run in one line naming
the checkpoint, the free space and the last good checkpoint, leaves no partial write behind, and
the same command resumes exactly once there is room. The workdir is a small tmpfs (mounting
one needs root; elsewhere the test skips, saying so)."""

import os
from pathlib import Path
import re
import subprocess

import pytest

from test_faults import STEPS, TMP_MARK, check_same_as_uninterrupted, corpus, run  # noqa: F401
from test_faults import uninterrupted  # noqa: F401


def size(path: Path) -> int:
  """Bytes `path` takes on a tmpfs: each file rounded up to 4 KiB pages."""
  files = [path] if path.is_file() else [p for p in path.rglob('*') if p.is_file()]
  return sum(-(-p.stat().st_size // 4096) * 4096 for p in files)


@pytest.fixture
def small_disk(tmp_path):
  mount = tmp_path / 'disk'
  mount.mkdir()
  if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', str(mount)],
                    capture_output=True).returncode:
    pytest.skip('cannot mount a tmpfs here (needs root)')
  yield mount
  subprocess.run(['umount', '-l', str(mount)], check=True)


def resize(mount: Path, bytes_: int):
  subprocess.run(['mount', '-o', f'remount,size={bytes_}', str(mount)], check=True)


def test_a_full_disk_stops_at_the_failed_save_in_one_line_and_resumes_exactly(
    corpus, uninterrupted, small_disk):  # noqa: F811
  checkpoints = sorted((uninterrupted / 'checkpoints').iterdir())
  one = max(size(p) for p in checkpoints)
  rest = size(uninterrupted) - sum(size(p) for p in checkpoints)
  resize(small_disk, rest + int(2.5 * one))  # the third save (step 6 of 2, 4, 6, ...) fails
  workdir = small_disk / 'run'
  result = run(corpus, workdir, STEPS, check=False)
  error = [line for line in result.stderr.splitlines() if line.startswith('electra_jax: error:')]
  assert result.returncode == 1 and len(error) == 1, result.stderr[-3000:]
  match = re.fullmatch(
      rf'electra_jax: error: checkpoint {workdir.absolute()}/checkpoints/(\d+) could not be '
      r'written: No space left on device \(([\d.]+) MiB free there\); the last good checkpoint '
      rf'is {workdir.absolute()}/checkpoints/(\d+)\. Make room and run the same command again '
      'to resume', error[0])
  assert match, error[0]
  failed, good = int(match[1]), int(match[3])
  assert good == failed - 2 and failed >= 6
  steps_trained = max(int(m) for m in re.findall(r'step (\d+)/', result.stderr))
  assert steps_trained <= failed + 2  # stopped at the failed write, not a save later
  assert not [p for p in (workdir / 'checkpoints').iterdir() if TMP_MARK in p.name]
  resize(small_disk, 64 << 20)
  again = run(corpus, workdir, STEPS)
  assert f'resuming at step {good}' in again.stderr or f'step {good + 1}/' in again.stderr
  assert check_same_as_uninterrupted(workdir, uninterrupted, STEPS) == 0.0
