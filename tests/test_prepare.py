"""Preparation once, reading many times: prepared splits, their checks, mixtures, the CLI, main.

The end-to-end test builds a real TFDS dataset from ../shared/data, prepares it with
`python -m electra_jax.prepare` and trains on it with `python -m electra_jax.main`.
"""

import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import time

from jax.sharding import NamedSharding, PartitionSpec
import numpy as np
import pytest

from conftest import REPO, WIKITEXT, load_config, real_file, tree_digest
from electra_jax.common import run_lock
from electra_jax.training import inputs, train
from electra_jax.data import packing, preparation, sources, store
from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError

WIKI_PART = WIKITEXT / 'wiki.train.PARTIAL-first-1019-lines.raw'


def source(path, weight=None):
  return sources.Source(spec=str(path), weight=weight)


def prepare(specs, vocab, out, unit_bytes=40_000, workers=1, length=64, seed=0):
  units = preparation.resolve(specs, unit_bytes=unit_bytes)
  key = preparation.preparation_key(specs, units, vocab, length, seed, 'text')
  preparation.prepare_split(specs, units, vocab, str(out), max_seq_length=length, seed=seed,
                            key=key, workers=workers)
  return store.open_store(str(out)), units


@pytest.fixture(scope='module')
def vocab(tmp_path_factory, wikitext):
  del wikitext
  return vocab_lib.train_vocab([str(WIKI_PART)], 400, str(tmp_path_factory.mktemp('v') / 'v'))


@pytest.fixture(scope='module')
def prepared(tmp_path_factory, vocab):
  out = tmp_path_factory.mktemp('prepared') / 'train'
  return prepare([source(WIKI_PART)], vocab, out)


def test_a_killed_preparations_staging_folder_beside_a_split_is_removed(vocab, tmp_path):
  """main prepares its cache in <workdir>/data/<split>.incomplete<pid>: a killed run's stays
  behind until the next preparation of that split removes it (not a live process's)."""
  ended = subprocess.Popen([sys.executable, '-c', 'pass'])
  ended.wait()
  dead = tmp_path / f'train.incomplete{ended.pid}'
  alive = tmp_path / f'train.incomplete{os.getppid()}'
  for stage in (dead, alive):
    stage.mkdir()
    (stage / 'shard.npy').write_bytes(b'x' * 1000)
  prepare([source(WIKI_PART)], vocab, tmp_path / 'train')
  assert not dead.exists() and alive.is_dir() and (tmp_path / 'train' / 'manifest.json').exists()


# ----------------------------------------------------------------------------- format


def test_shards_hold_the_packing_of_each_unit_whatever_the_workers(prepared, vocab, tmp_path):
  examples, [units] = prepared
  manifest = examples.manifest
  assert len(units) == len(manifest['shards']) > 3
  expected = []
  for u, unit in enumerate(units):  # Each unit is packed with its own stream (seed, source, unit).
    docs = [vocab.encode(d) for d in sources.read_unit(unit)]
    pairs = packing.PACKINGS[unit.packing](docs, 64, np.random.default_rng([0, 0, u]))
    for pair in pairs:
      ids, segments = np.zeros(64, np.int32), np.zeros(64, np.int32)
      packing.fill_example(pair, ids, segments, vocab.cls_id, vocab.sep_id)
      expected.append((ids, segments))
  rows = examples.gather(np.arange(len(examples)))
  assert rows['input_ids'].dtype == np.int32 and rows['input_ids'].shape == (len(expected), 64)
  np.testing.assert_array_equal(rows['input_ids'], [e[0] for e in expected])
  np.testing.assert_array_equal(rows['segment_ids'], [e[1] for e in expected])
  counts = manifest['counts']
  assert counts['examples'] == len(examples) and counts['documents'] > 0
  assert counts['tokens'] >= counts['tokens_in_examples'] > 0
  assert counts['padding_fraction'] == pytest.approx(np.mean(rows['input_ids'] == 0), abs=1e-5)
  assert manifest['vocab_sha256'] == vocab.fingerprint() and manifest['ids_dtype'] == '<u2'

  parallel, _ = prepare([source(WIKI_PART)], vocab, tmp_path / 'parallel', workers=2)
  assert ([s['sha256'] for s in parallel.manifest['shards']] ==
          [s['sha256'] for s in manifest['shards']])


def test_gather_keeps_the_order_asked_for(prepared):
  examples, _ = prepared
  everything = examples.gather(np.arange(len(examples)))
  ids = np.random.default_rng(0).integers(len(examples), size=300)
  ids[:3] = [len(examples) - 1, 0, 0]
  rows = examples.gather(ids)
  np.testing.assert_array_equal(rows['input_ids'], everything['input_ids'][ids])
  np.testing.assert_array_equal(rows['segment_ids'], everything['segment_ids'][ids])
  np.testing.assert_array_equal(examples[5]['input_ids'], everything['input_ids'][5])
  with pytest.raises(IndexError):
    examples.gather([len(examples)])


def test_damage_is_reported_and_nothing_is_changed(prepared, vocab, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  examples, _ = prepared
  split = tmp_path / 'train'
  shutil.copytree(examples.directory, split)
  shard = split / examples.manifest['shards'][1]['file']
  first_of_shard = examples.manifest['shards'][0]['examples']

  data = bytearray(shard.read_bytes())
  data[-100] ^= 0x10  # A flipped bit in the last row (196 bytes) of the second shard.
  shard.write_bytes(bytes(data))
  before = tree_digest(split)
  damaged = store.open_store(str(split))  # Sizes still match: caught when the row is read.
  damaged.gather([0, first_of_shard])  # Undamaged rows read fine.
  last = first_of_shard + examples.manifest['shards'][1]['examples'] - 1
  with pytest.raises(UsageError, match=f'example {last} .*fails its checksum.*prepare it again'):
    damaged.gather([3, last])
  with pytest.raises(UsageError, match='sha256 mismatch'):
    store.verify_store(str(split))
  assert tree_digest(split) == before  # Reported, not repaired or removed.

  shard.write_bytes(bytes(data[:-1000]))
  with pytest.raises(UsageError, match=r'has \d+ bytes but \d+ were written \(truncated'):
    store.open_store(str(split))
  shard.unlink()
  with pytest.raises(UsageError, match='is missing'):
    store.open_store(str(split))
  with pytest.raises(UsageError, match=r'vocabulary sha256 [0-9a-f]{12}\.\.\. but this run uses '
                                       r'0123456789ab\.\.\.'):
    store.open_store(str(split), vocab_sha256='0123456789ab' * 5)
  with pytest.raises(UsageError, match='--config.max_seq_length=64'):
    store.open_store(str(examples.directory), max_seq_length=128)
  store.verify_store(examples.directory)  # The original is intact.


def test_main_prepares_local_files_once_and_again_when_they_change(tmp_path, vocab, monkeypatch):
  corpus = tmp_path / 'corpus.txt'
  corpus.write_bytes(WIKI_PART.read_bytes())
  out = tmp_path / 'data' / 'train'
  ensure = lambda length: preparation.ensure_prepared([source(corpus)], vocab, str(out),
                                                      max_seq_length=length, seed=0)
  built = ensure(64)
  os.utime(corpus, ns=(1, 1))  # Another host's copy: same path and size, another mtime.
  with monkeypatch.context() as patch:
    patch.setattr(preparation, 'prepare_split', lambda *a, **k: pytest.fail('not reused'))
    assert len(preparation.ensure_prepared([source(corpus)], vocab, str(out), max_seq_length=64,
                                           seed=0, check_mtimes=False)) == len(built)
  assert len(ensure(64)) == len(built)  # Process 0 checks mtimes: prepared again, the same.
  with monkeypatch.context() as patch:
    patch.setattr(preparation, 'prepare_split', lambda *a, **k: pytest.fail('not reused'))
    assert len(ensure(64)) == len(built)
  assert ensure(32).max_seq_length == 32  # Another length: prepared again.
  tokens = lambda examples: examples.manifest['counts']['tokens']
  shorter = ensure(32)
  with open(corpus, 'a') as f:  # So does a changed corpus.
    f.write('\n A new paragraph about lobsters .\n')
  grown = ensure(32)
  added = vocab.encode(['A new paragraph about lobsters .'])[0]
  assert tokens(grown) == tokens(shorter) + len(added)
  shard = next(out.glob('shard-*'))
  shard.write_bytes(shard.read_bytes()[:-10])  # A broken cache is rebuilt, not trusted.
  assert len(ensure(32)) == len(grown)
  (tmp_path / 'empty.txt').write_text('\n \n')
  with pytest.raises(UsageError, match="corpus .*empty.txt holds no text"):
    preparation.ensure_prepared([source(tmp_path / 'empty.txt')], vocab, str(tmp_path / 'e'),
                                max_seq_length=64, seed=0)
  assert not (tmp_path / 'e').exists()


# ----------------------------------------------------------------------------- batches


def test_prepare_trains_a_lowercase_vocab_and_refuses_one_over_cased_data(tmp_path, caplog):
  config = load_config('tiny')
  config.max_seq_length, config.model.vocab_size = 64, 400
  config.data.update(train_files=str(real_file(WIKI_PART)), vocab_sample_sentences=2000,
                     prepare_workers=1, vocab_lowercase=True)
  with caplog.at_level(logging.INFO, logger='absl'):
    preparation.prepare_dataset(config, str(tmp_path / 'lowercase'))
  # Training the vocabulary (46 s of silence on a large corpus) says what, on how much, and when
  # it is done.
  said = [r.getMessage() for r in caplog.records if r.getMessage().startswith('vocabulary:')]
  assert len(said) == 2, said
  assert re.fullmatch(r'vocabulary: training a sentencepiece unigram vocabulary of 400 pieces on '
                      r'[\d,]+ lines \(\d+\.\d MB\) sampled from .*wiki\.train\.PARTIAL.*; it '
                      r'reports no progress: roughly \d+ s on a 2-core CPU', said[0]), said[0]
  assert re.fullmatch(r'vocabulary: trained in \d+\.\d s \(400 pieces\)', said[1]), said[1]
  vocab = vocab_lib.load_vocab(str(tmp_path / 'lowercase' / 'vocab.model'))
  assert vocab.lowercase and vocab.encode(['The Cat']) == vocab.encode(['the cat'])

  config.data.vocab_lowercase = False
  preparation.prepare_dataset(config, str(tmp_path / 'cased'))
  before = tree_digest(tmp_path / 'cased')
  config.data.vocab_lowercase = True
  with pytest.raises(UsageError, match='is a cased vocabulary'):
    preparation.prepare_dataset(config, str(tmp_path / 'cased'))
  assert tree_digest(tmp_path / 'cased') == before
  # A second preparation into an --out that one is writing is refused before it stages anything.
  with run_lock.only_run_in(str(tmp_path / 'cased'), 'preparation'):  # as a preparation does
    with pytest.raises(UsageError, match=f'{tmp_path / "cased"} is in use by another preparation'):
      preparation.prepare_dataset(config, str(tmp_path / 'cased'), overwrite=True)
  assert tree_digest(tmp_path / 'cased') == before
  assert sorted(p.name for p in tmp_path.iterdir()) == ['cased', 'lowercase']


def test_packing_original_that_drops_much_of_the_text_says_so_and_fill_does_not(
    tmp_path, caplog):
  # WikiText read as 'lines': a paragraph per line, a blank line between paragraphs, so each
  # paragraph is a document and a line longer than an example loses its tail.
  config = load_config('tiny')
  config.max_seq_length, config.model.vocab_size = 64, 400
  config.data.update(train_files=str(real_file(WIKI_PART)), vocab_sample_sentences=2000,
                     prepare_workers=1, text_format='lines')
  with caplog.at_level(logging.WARNING):
    counts = preparation.prepare_dataset(config, str(tmp_path / 'original'))['train']['counts']
  assert counts['kept_fraction'] < 0.9
  warned = [r.getMessage() for r in caplog.records if 'kept only' in r.getMessage()]
  assert warned == [
      f"train: packing 'original' kept only {100 * counts['kept_fraction']:.1f}% of the tokens, "
      f"and {100 * counts['padding_fraction']:.1f}% of the slots are padding (1 of 1 units are "
      "packed 'original': data.packing 'auto' does so for 'lines' text, .jsonl and TFDS). It "
      'drops the rest of the line that overflows each example and pads the end of every '
      'document, which costs most when documents are short (a blank line between paragraphs) or '
      'lines long (lines are not cut into sentences). --config.data.packing=fill keeps that '
      "text; 'original' makes the original's examples exactly"]
  caplog.clear()
  config.data.packing = 'fill'  # what the warning offers: the text is kept, nothing is said
  with caplog.at_level(logging.WARNING):
    counts = preparation.prepare_dataset(config, str(tmp_path / 'fill'))['train']['counts']
  assert counts['kept_fraction'] > 0.97 and counts['padding_fraction'] < 0.03
  assert not [r for r in caplog.records if 'kept only' in r.getMessage()]


def test_mixture_batches_hold_fixed_shares_of_each_source(vocab, tmp_path, wikitext):
  specs = [source(WIKI_PART, 0.75), source(wikitext / 'wiki.valid.raw', 0.25)]
  examples, _ = prepare(specs, vocab, tmp_path / 'mix', unit_bytes=400_000)
  sizes = examples.source_sizes
  assert examples.weights == [0.75, 0.25] and sum(sizes) == len(examples)
  assert inputs.mixture_counts([0.75, 0.25], 32) == [24, 8]
  assert inputs.mixture_counts([1, 1, 1], 32) == [11, 11, 10]
  with pytest.raises(UsageError, match='less than one example in a batch of 32'):
    inputs.mixture_counts([1, 0.01], 32)

  steps = sizes[1] // 8 + 1  # Long enough for the smaller source to pass a whole epoch.
  batches = [inputs.global_batch_indices(examples, 32, 5, s) for s in range(steps)]
  from_first = [b[b < sizes[0]] for b in batches]
  assert all(len(b) == 24 for b in from_first)
  second = [b[b >= sizes[0]] - sizes[0] for b in batches]
  within_epoch = np.concatenate(second[:sizes[1] // 8])  # Source 2's first epoch: no repeats,
  assert len(set(within_epoch)) == len(within_epoch)
  assert set(np.concatenate(second)) == set(range(sizes[1]))  # and every example.
  np.testing.assert_array_equal(inputs.global_batch_indices(examples, 32, 5, 7), batches[7])
  assert not np.array_equal(inputs.global_batch_indices(examples, 32, 6, 7), batches[7])
  shares = [inputs.local_batch_indices(examples, 32, 5, 7, p, 4) for p in range(4)]
  np.testing.assert_array_equal(np.concatenate(shares), batches[7])
  assert all(0 < np.sum(s >= sizes[0]) < 8 for s in shares[:2])  # Rows are shuffled.


def test_prefetched_batches_equal_the_batches_of_each_step(prepared):
  examples, _ = prepared
  config = load_config('tiny')
  config.batch_size, config.num_train_steps = 8, 9
  sharding = NamedSharding(train.make_mesh(), PartitionSpec('data'))
  expected = [inputs.local_batch(examples, 8, config.seed, s) for s in range(3, 9)]
  for depth in (0, 2):
    config.data.prefetch_batches = depth
    got = list(inputs.train_batches(examples, config, 3, sharding))
    assert len(got) == 6
    for batch, want in zip(got, expected):
      assert batch['input_ids'].sharding == sharding
      np.testing.assert_array_equal(np.asarray(batch['input_ids']), want['input_ids'])

  class Failing:  # A store that breaks at the third batch: the consumer sees the error.
    weights = None
    def __len__(self):
      return len(examples)
    def gather(self, ids):
      if Failing.calls == 2:
        raise UsageError('disk gone')
      Failing.calls += 1
      return examples.gather(ids)
  Failing.calls = 0
  batches = inputs.train_batches(Failing(), config, 0, sharding)
  next(batches), next(batches)
  with pytest.raises(UsageError, match='disk gone'):
    next(batches)


# ----------------------------------------------------------------------------- CLI and main


def run_module(module, *args, check=True):
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}
  result = subprocess.run([sys.executable, '-m', module, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
  if check and result.returncode:
    raise AssertionError(f'{module} failed:\n{result.stderr[-3000:]}')
  return result


@pytest.fixture(scope='module')
def tfds_prepared(tmp_path_factory, wikitext):
  """A real TFDS dataset built from WikiText-2, prepared by the CLI into DATA_DIR."""
  del wikitext
  import tfds_wikitext  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('tfds_run')
  name = tfds_wikitext.build(root / 'tfds')
  args = [f'--config={REPO / "configs" / "tiny.py"}', f'--out={root / "prepared"}',
          f'--config.data.sources=tfds:{name}:train',
          f'--config.data.eval_sources=tfds:{name}:test',
          f'--config.data.tfds_data_dir={root / "tfds"}', '--config.model.vocab_size=1000',
          '--config.max_seq_length=64', '--config.data.vocab_sample_sentences=20000']
  result = run_module('electra_jax.prepare', *args)
  return root, args, result


def kill_while_staging(args):
  """SIGKILLs `python -m electra_jax.prepare` (preparing anew) once its staging folder exists."""
  out = next(a.split('=', 1)[1] for a in args if a.startswith('--out='))
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}
  process = subprocess.Popen([sys.executable, '-m', 'electra_jax.prepare', *args, '--overwrite',
                              '--config.seed=1'], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  stage = f'{out}.incomplete{process.pid}'
  try:
    deadline = time.time() + 120
    while not os.path.isdir(stage):
      assert process.poll() is None and time.time() < deadline, 'no staging folder appeared'
      time.sleep(0.02)
  finally:
    process.kill()
    process.wait()
  assert os.path.isdir(stage)
  return pathlib.Path(stage)


def test_prepare_cli_writes_once_and_refuses_to_replace(tfds_prepared):
  root, args, result = tfds_prepared
  lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{')]
  assert [line['split'] for line in lines] == ['train', 'eval']
  assert lines[0]['documents'] == 60 and lines[0]['examples'] > 1000
  assert 0 < lines[0]['padding_fraction'] < 0.5 and lines[0]['tokens_per_s'] > 0
  # TFDS text is packed as the original packs it: what does not fit is dropped.
  assert lines[0]['kept_fraction'] == round(lines[0]['tokens_in_examples'] / lines[0]['tokens'], 6)
  assert 0 < lines[0]['kept_fraction'] < 1
  out = root / 'prepared'
  assert (out / 'vocab.model').exists() and (out / 'eval' / 'manifest.json').exists()
  killed = kill_while_staging(args)  # its staging folder, left behind
  alive = root / f'prepared.incomplete{os.getpid()}'  # as a running preparation's
  alive.mkdir()
  before = tree_digest(out)
  again = run_module('electra_jax.prepare', *args)  # Same inputs: nothing to do.
  assert again.stdout.splitlines()[:2] == result.stdout.splitlines()[:2]
  assert not killed.exists() and alive.is_dir()
  assert ('removed 1 staging folder(s) of preparations that ended unfinished (killed): '
          f'{killed}') in again.stderr
  alive.rmdir()
  refused = run_module('electra_jax.prepare', *args, '--config.seed=1', check=False)
  assert refused.returncode and 'prepared from other inputs' in refused.stderr
  assert '--overwrite' in refused.stderr.strip().splitlines()[-1]
  assert tree_digest(out) == before
  verified = run_module('electra_jax.prepare', f'--verify={out}')
  assert '"split": "train"' in verified.stdout


def test_run_on_prepared_data_takes_its_vocabulary_and_refuses_another(tfds_prepared, tmp_path):
  root, _, _ = tfds_prepared
  config = load_config('tiny')
  config.max_seq_length, config.model.vocab_size = 64, 1000
  config.data.prepared_dir = str(root / 'prepared')
  (tmp_path / 'run').mkdir()
  (tmp_path / 'other_run').mkdir()
  vocab = inputs.setup_vocab(config, str(tmp_path / 'run'))
  prepared_vocab = vocab_lib.load_vocab(str(root / 'prepared' / 'vocab.model'))
  assert vocab.fingerprint() == prepared_vocab.fingerprint()
  for split in ('train', 'eval'):
    examples = inputs.load_examples(config, str(tmp_path / 'run'), vocab, split)
    assert len(examples) > 1000 and examples.directory == str(root / 'prepared' / split)

  # Asking for a lowercased vocabulary over a prepared cased one is refused before anything
  # is written to the run.
  config.data.vocab_lowercase = True
  (tmp_path / 'lowercase_run').mkdir()
  with pytest.raises(UsageError, match='data.vocab_lowercase=True, but .* is a cased vocabulary'):
    inputs.setup_vocab(config, str(tmp_path / 'lowercase_run'))
  assert not os.listdir(tmp_path / 'lowercase_run')
  config.data.vocab_lowercase = False

  config.model.vocab_size = 300
  config.data.vocab_model = vocab_lib.train_vocab([str(WIKI_PART)], 300,
                                                  str(tmp_path / 'other')).model_path
  other = inputs.setup_vocab(config, str(tmp_path / 'other_run'))
  with pytest.raises(UsageError, match='was prepared with vocabulary sha256'):
    inputs.load_examples(config, str(tmp_path / 'other_run'), other, 'train')


def test_tfds_corpus_trains_end_to_end_through_main(tfds_prepared, tmp_path):
  root, _, _ = tfds_prepared
  workdir = tmp_path / 'run'
  run_module('electra_jax.main', f'--config={REPO / "configs" / "tiny.py"}',
             f'--workdir={workdir}', f'--config.data.prepared_dir={root / "prepared"}',
             '--config.model.vocab_size=1000', '--config.max_seq_length=64',
             '--config.batch_size=16', '--config.num_train_steps=4', '--config.log_every=2',
             '--config.eval_every=0', '--config.save_every=4')
  logged = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  assert [m['step'] for m in logged] == [2, 4] and all(np.isfinite(m['loss']) for m in logged)
  assert (workdir / 'checkpoints' / '4').is_dir()
  assert (workdir / 'vocab.model').read_bytes() == (root / 'prepared' / 'vocab.model').read_bytes()
