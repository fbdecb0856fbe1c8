"""Per-host input: two JAX processes read disjoint shares, and a killed run resumes exactly.

Two real processes (2 simulated CPU devices each, joined by jax.distributed on localhost) build
global batches with make_array_from_process_local_data; they must equal the batches of this
process, which has 4 devices. A loader killed with SIGKILL at random steps and resumed from its
saved step must consume exactly the example ids of an uninterrupted run.
"""

import json
import os
from pathlib import Path
import signal
import socket
import subprocess
import sys
import time

import jax
from jax.sharding import NamedSharding, PartitionSpec
import numpy as np
import pytest

import data_worker
from conftest import WIKITEXT, load_config
from electra_jax.training import inputs, train
from electra_jax.data import preparation, sources, store, vocab as vocab_lib

WORKER = str(Path(__file__).with_name('data_worker.py'))


@pytest.fixture(scope='module')
def prepared(tmp_path_factory, wikitext):
  """A small prepared split in several shards (~300 examples of 32 tokens)."""
  del wikitext
  root = tmp_path_factory.mktemp('mp')
  corpus = WIKITEXT / 'wiki.train.PARTIAL-first-1019-lines.raw'
  vocab = vocab_lib.train_vocab([str(corpus)], 300, str(root / 'v'))
  specs = [sources.Source(spec=str(corpus), weight=None)]
  units = preparation.resolve(specs, unit_bytes=60_000)
  preparation.prepare_split(specs, units, vocab, str(root / 'train'), max_seq_length=32,
                            seed=0, key={}, workers=1)
  return str(root / 'train')


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def test_two_processes_read_disjoint_shares_that_make_the_global_batches(prepared, tmp_path):
  port = free_port()
  env = {k: v for k, v in os.environ.items() if not k.startswith('JAX_')}
  env['PYTHONPATH'] = os.pathsep.join([str(Path(__file__).parents[1]), env.get('PYTHONPATH', '')])
  workers = [subprocess.Popen([sys.executable, WORKER, 'batches', prepared, str(tmp_path),
                               str(port), str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
  for worker in workers:
    output, _ = worker.communicate(timeout=300)
    assert worker.returncode == 0, output[-3000:]
  results = [np.load(tmp_path / f'process_{i}.npz') for i in range(2)]

  # This process has 4 devices: the same global batches, from one process.
  examples = store.open_store(prepared)
  config = load_config('tiny')
  config.batch_size, config.seed = data_worker.BATCH, data_worker.SEED
  config.num_train_steps = len(results[0]['ids'])
  sharding = NamedSharding(train.make_mesh(), PartitionSpec('data'))
  assert jax.process_count() == 1 and jax.device_count() == 4
  for step, batch in enumerate(inputs.train_batches(examples, config, 0, sharding)):
    for result in results:
      for key in ('input_ids', 'segment_ids'):
        np.testing.assert_array_equal(result[key][step], np.asarray(batch[key]))

  # Each process read its own rows; over an epoch the shares are disjoint and make up all of it.
  steps_per_epoch = len(examples) // data_worker.BATCH
  shares = [r['ids'][:steps_per_epoch].reshape(-1) for r in results]
  assert not set(shares[0]) & set(shares[1])
  epoch = np.concatenate(shares)
  assert len(set(epoch)) == len(epoch) == steps_per_epoch * data_worker.BATCH
  full = np.concatenate([r['ids'][:steps_per_epoch + 1].reshape(-1) for r in results])
  assert set(full) == set(range(len(examples)))  # The epoch's remainder is read at its end.
  for step in range(len(results[0]['ids'])):
    np.testing.assert_array_equal(
        np.concatenate([r['ids'][step] for r in results]),
        inputs.batch_indices(len(examples), data_worker.BATCH, data_worker.SEED, step))


def read_log(log_path):
  return [list(map(int, line.split())) for line in Path(log_path).read_text().splitlines()]


def saved_step(workdir):
  path = Path(workdir) / 'step.json'
  return 0 if not path.exists() else json.loads(path.read_text())['step']


def test_killed_and_resumed_loader_consumes_exactly_the_uninterrupted_ids(prepared, tmp_path):
  num_steps, save_every = 60, 7
  command = lambda workdir: [sys.executable, WORKER, 'consume', prepared, str(workdir),
                             str(num_steps), str(save_every)]
  env = {**os.environ, 'PYTHONPATH': str(Path(__file__).parents[1])}
  reference = tmp_path / 'reference'
  reference.mkdir()
  subprocess.run(command(reference), env=env, check=True, timeout=300)
  expected = read_log(reference / 'consumed.log')
  assert [line[0] for line in expected] == list(range(num_steps))

  killed = tmp_path / 'killed'
  killed.mkdir()
  log = killed / 'consumed.log'
  rng = np.random.default_rng(0)
  kills = []  # (lines logged when killed, step saved when killed)
  while len(kills) < 4:  # Kill at 4 random points, then let it finish.
    target = (len(read_log(log)) if log.exists() else 0) + int(rng.integers(2, 14))
    process = subprocess.Popen(command(killed), env=env)
    while process.poll() is None and (not log.exists() or len(read_log(log)) < target):
      time.sleep(0.005)
    if process.poll() is not None:
      break  # It finished first.
    process.send_signal(signal.SIGKILL)
    process.wait()
    kills.append((len(read_log(log)), saved_step(killed)))
  subprocess.run(command(killed), env=env, check=True, timeout=300)
  lines = read_log(log)
  assert len(kills) >= 2
  for logged, saved in kills:  # Each restart resumed exactly at the step it had saved.
    assert lines[logged][0] == saved
  lineage = {}
  for step, *ids in lines:  # A replayed step replaces the lost one: the last entry counts.
    lineage[step] = ids
  assert [[s, *lineage[s]] for s in range(num_steps)] == expected  # No repeats, no skips.
  for line in lines:  # Even the lost steps read what the uninterrupted run read.
    assert line == expected[line[0]]
  ids = np.array([lineage[s] for s in range(num_steps)]).reshape(-1)
  epoch = len(store.open_store(prepared))
  assert len(set(ids[:epoch])) == min(epoch, len(ids))
