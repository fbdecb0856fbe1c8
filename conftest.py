"""Test setup for tests/ and each research wing's tests/: CPU only, four simulated devices so
data parallelism is exercised everywhere, and the helpers test files take `from conftest import`.
At the root, so that a wing's test file run alone gets the same setup and worker count."""

import hashlib
import os
from pathlib import Path
import tempfile

# Must happen before jax is imported anywhere.
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('JAX_NUM_CPU_DEVICES', '4')
# libtpu (installed for tests/test_aot.py) takes /tmp/libtpu_lockfile in the first process that
# loads it; a training run on the same host that did (one without JAX_PLATFORMS=cpu) would make
# the topology compile here fail. On a CPU host no chip is shared, so more loads are safe.
os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
# JAX's persistent compilation cache, for this process and every command a test starts: the
# suite compiles the same tiny steps again and again (a run and its resume, one subprocess after
# another), and a program XLA took over a second to compile is read back instead. Keyed by the
# program, JAX version and flags, so a stale entry is never used.
JAX_CACHE = Path(tempfile.gettempdir()) / 'electra_jax_tests' / 'jax_cache'
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', str(JAX_CACHE))

import pytest  # pylint: disable=g-import-not-at-top

REPO = Path(__file__).resolve().parent
SHARED_DATA = REPO.parent / 'shared' / 'data'
WIKITEXT = SHARED_DATA / 'wikitext-2-raw'


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
  """-n auto (pytest.ini): a worker per usable core, at most four and one per 6 GB of memory,
  since each worker holds its own JAX, torch and transformers (one held 5.3 GB midway through
  the suite on a 2-core machine) and its tests start processes of their own. Where the command
  names test files only, no more workers than files (each file runs whole in one), and none for
  one file: a worker costs a few seconds to start and would have nothing to share."""
  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  memory = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
  workers = max(1, min(cores or 1, 4, memory // (6 << 30)))
  named = {arg.split('::')[0] for arg in config.args}
  if named and all(Path(path).is_file() for path in named):
    workers = min(workers, len(named))
  return 0 if workers == 1 else workers


@pytest.fixture(scope='session')
def wikitext():
  if not WIKITEXT.is_dir():
    pytest.skip(f'real data not found at {WIKITEXT} (../shared beside the checkout)')
  return WIKITEXT


def real_file(path: Path) -> Path:
  """`path` under SHARED_DATA, or the test is skipped where ../shared is absent."""
  if not path.is_file():
    pytest.skip(f'real data not found at {path} (../shared beside the checkout)')
  return path


def load_config(name: str):
  """get_config() of configs/<name>.py."""
  from electra_jax.common.config import load_config_file  # pylint: disable=g-import-not-at-top
  return load_config_file(str(REPO / 'configs' / f'{name}.py'))


def prepare_wikitext(out, eval_text: bool = True):
  """WikiText-2 valid (and, with `eval_text`, test for evaluation) prepared into `out` with a
  1,000-piece vocabulary at length 32: the corpus of the tests that run the trainer on real text."""
  from electra_jax.data import preparation  # pylint: disable=g-import-not-at-top
  config = load_config('tiny')
  config.max_seq_length = 32
  config.model.vocab_size = 1000
  config.data.update(train_files=str(WIKITEXT / 'wiki.valid.raw'), prepare_workers=1,
                     eval_files=str(WIKITEXT / 'wiki.test.raw') if eval_text else '')
  preparation.prepare_dataset(config, str(out))
  return out


def set_fields(config, overrides: dict):
  """`config` with each field of `overrides` ('lr', 'model.hidden_size', ...) set; returned."""
  for field, value in overrides.items():
    *parents, name = field.split('.')
    node = config
    for parent in parents:
      node = node[parent]
    node[name] = value
  return config


def compile_train_step(config):
  """(the train step of `config` compiled ahead of time on one device for its batch shape, the
  abstract train state it takes): aot.py's lowering, for this host's first device."""
  import jax  # pylint: disable=g-import-not-at-top
  from electra_jax.training import aot  # pylint: disable=g-import-not-at-top
  lowered, state, _ = aot.lower_pretrain_step(config, jax.devices()[:1])
  return lowered.compile(), state


def tree_digest(path):
  """One sha256 over every file below `path`, names included: proof that nothing changed."""
  digest = hashlib.sha256()
  for file in sorted(Path(path).rglob('*')):
    if file.is_file():
      digest.update(str(file.relative_to(path)).encode() + file.read_bytes())
  return digest.hexdigest()


def error_line(result):
  """The one `electra_jax: error:` line a failed command ends with (and no traceback)."""
  assert result.returncode != 0
  lines = [l for l in result.stderr.strip().splitlines() if l.startswith('electra_jax: error:')]
  assert len(lines) == 1 and 'Traceback' not in result.stderr, result.stderr[-2000:]
  return lines[0]
