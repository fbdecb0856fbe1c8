"""Corpora as the field publishes them: parquet (FineWeb, wikimedia/wikipedia), JSON lines in zstd
(Dolma, DCLM, the Pile, RedPajama) and Hugging Face datasets (hf:): read, prepared, trained on.

Every file is written here from the same real documents (two WikiExtractor shards of
../shared/data), so each reader is checked against the plain-text reading of those documents.
A Hub dataset needs the network, which tests do not have: `hf:` on a local folder takes the code
path a Hub dataset takes (datasets' streaming builder, a unit per shard), and a Hub name without
the network must fail in one line.
"""

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, SHARED_DATA, error_line, real_file, tree_digest
from electra_jax.common.errors import UsageError
from electra_jax.data import formats, preparation, sources, store
from electra_jax.data import vocab as vocab_lib

datasets = pytest.importorskip('datasets')
pa = pytest.importorskip('pyarrow')
pq = pytest.importorskip('pyarrow.parquet')
zstandard = pytest.importorskip('zstandard')

SHARDS = [SHARED_DATA / 'pretraining-text' / 'enwiki' / name
          for name in ('AA_wiki_00.txt', 'AA_wiki_36.txt')]
SENTENCES = 12  # Per document: ~100 documents of ~1.5 KB, so that files hold many row groups.
UNIT_BYTES = 20_000
KINDS = {  # What each kind of source is named, and what its units are.
    'parquet': ('{root}/wiki.parquet', 'parquet'),
    'jsonl.zst': ('{root}/wiki.jsonl.zst', 'jsonl'),
    'jsonl.gz': ('{root}/wiki.jsonl.gz', 'jsonl'),
    'txt.zst': ('{root}/plain.txt.zst', 'text'),
    'hf: save_to_disk': ('hf:{root}/saved', 'hf_rows'),
    'hf: folder of parquet': ('hf:{root}/folder', 'hf_shard'),
}


def zstd(data: bytes) -> bytes:
  return zstandard.ZstdCompressor().compress(data)


def write_parquet(path, columns: dict, row_group_size: int = 8):
  pq.write_table(pa.table(columns), str(path), row_group_size=row_group_size)
  return str(path)


def write_corpus(root, records):
  """The records' texts as each kind of source, in `root`."""
  texts = [t for t in records if t]
  (root / 'plain.txt').write_text('\n\n'.join(texts) + '\n')
  (root / 'plain.txt.zst').write_bytes(zstd((root / 'plain.txt').read_bytes()))
  ids = list(range(len(records)))
  write_parquet(root / 'wiki.parquet', {'id': ids, 'text': records})
  lines = ''.join(json.dumps({'id': i, 'text': t}) + '\n' for i, t in enumerate(records)).encode()
  cut = lines.index(b'\n', len(lines) // 2) + 1  # Two frames, as parallel compressors write.
  (root / 'wiki.jsonl.zst').write_bytes(zstd(lines[:cut]) + zstd(lines[cut:]))
  (root / 'wiki.jsonl.gz').write_bytes(gzip.compress(lines))
  dataset = datasets.Dataset.from_dict({'id': ids, 'text': records})
  datasets.DatasetDict({'train': dataset, 'test': dataset.select(range(10))}).save_to_disk(
      str(root / 'saved'), max_shard_size='40KB')
  (root / 'folder').mkdir()
  third = len(records) // 3
  for part, first in enumerate(range(0, len(records), third)):
    write_parquet(root / 'folder' / f'train-{part}.parquet',
                  {'id': ids[first:first + third], 'text': records[first:first + third]})


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """(root, the documents): ~100 Wikipedia articles' first sentences, written as every kind,
  with an empty record among them (which holds no document)."""
  datasets.disable_progress_bars()
  docs = [document[:SENTENCES] for shard in SHARDS
          for document in formats.read_documents(str(real_file(shard)), 'wikiextractor')]
  records = ['\n'.join(d) for d in docs]
  records.insert(5, '')
  root = tmp_path_factory.mktemp('corpus')
  write_corpus(root, records)
  return root, docs


def documents(units):
  return [d for unit in units for d in sources.read_unit(unit)]


def units_of(spec, text_field='text', unit_bytes=UNIT_BYTES):
  [source] = sources.parse_sources(spec)
  return sources.source_units(source, text_field=text_field, unit_bytes=unit_bytes)


# ----------------------------------------------------------------------------- reading


@pytest.mark.parametrize('kind', KINDS)
def test_each_kind_reads_back_the_documents_of_the_plain_text(corpus, kind):
  root, docs = corpus
  plain = sources.Source(spec=str(root / 'plain.txt'), weight=None, text_format='lines')
  assert documents(sources.source_units(plain)) == docs  # The reference, read as text.
  spec, unit_kind = KINDS[kind]
  units = units_of(spec.format(root=root))
  assert documents(units) == docs
  assert {u.kind for u in units} == {unit_kind}
  assert {u.packing for u in units} == {'original'}  # As .jsonl and TFDS: the original's way.
  if unit_kind in ('parquet', 'hf_rows'):  # ~UNIT_BYTES of text each, in order, all of it.
    assert len(units) > 3 and units[0].start == 0
    assert all(a.stop == b.start for a, b in zip(units, units[1:]))
    rows = pq.ParquetFile(units[0].path).num_row_groups if unit_kind == 'parquet' else len(docs) + 1
    assert units[-1].stop == rows
  elif unit_kind == 'hf_shard':  # A streamed dataset's unit is a shard: here a file.
    assert [(u.start, u.stop) for u in units] == [(0, 1), (1, 2), (2, 3)]
  else:  # A zstd or gzip stream cannot be entered midway: a file is one unit.
    assert [(u.start, u.stop) for u in units] == [(0, None)]


def test_json_lines_are_named_as_the_corpora_publish_them():
  named = ['a.jsonl', 'a.jsonl.gz', 'a.jsonl.zst', 'a.json.gz', 'a.json.zst']
  assert [formats.is_jsonl(name) for name in named] == [True] * 5
  assert not any(formats.is_jsonl(name) for name in ('a.json', 'a.txt.zst', 'jsonl.txt'))


def test_a_saved_dataset_dict_reads_the_split_named(corpus):
  root, docs = corpus
  assert documents(units_of(f'hf:{root}/saved:test')) == docs[:5] + docs[5:9]


def test_hf_on_a_folder_is_what_datasets_streams(corpus):
  root, docs = corpus
  stream = datasets.load_dataset(str(root / 'folder'), split='train', streaming=True)
  texts = [row['text'] for row in stream]
  assert [sources.text_to_document(t) for t in texts if t] == docs


# ----------------------------------------------------------------------------- errors


def bad_sources(root, corpus_root):
  """{name: (spec, text_field, the error it must raise)}, written in `root`."""
  write_parquet(root / 'no_text.parquet', {'id': [1], 'body': ['x']})
  write_parquet(root / 'numbers.parquet', {'text': [1, 2]})
  write_parquet(root / 'null.parquet', {'text': ['a', 'b', None]}, row_group_size=2)
  (root / 'not.parquet').write_bytes(b'PAR1 not really')
  whole = (corpus_root / 'wiki.jsonl.zst').read_bytes()  # Cut in its second frame.
  (root / 'cut.jsonl.zst').write_bytes(whole[:len(whole) * 3 // 4])
  (root / 'noise.jsonl.zst').write_bytes(os.urandom(64))
  (root / 'int.json.zst').write_bytes(zstd(b'{"text": "a"}\n{"text": 5}\n'))
  datasets.Dataset.from_dict({'text': ['a']}).save_to_disk(str(root / 'one'))
  return {
      'parquet without the column': (
          f'{root}/no_text.parquet', 'text', r"no_text.parquet' has no column 'text' \(its "
          r'columns: id, body\); set --config.data.text_field'),
      'parquet of numbers': (f'{root}/numbers.parquet', 'text',
                             r"column 'text' of '.*numbers.parquet' holds int64, not text"),
      'parquet with a null': (f'{root}/null.parquet', 'text',
                              r"field 'text' of row 2 of '.*null.parquet' is null, not text"),
      'not parquet': (f'{root}/not.parquet', 'text', r"cannot read '.*not.parquet' as parquet"),
      'zst cut short': (f'{root}/cut.jsonl.zst', 'text',
                        r"cannot read '.*cut.jsonl.zst' after byte \d+ \(the file ends inside a "
                        r'zstd frame\); the file is damaged or truncated'),
      'zst of noise': (f'{root}/noise.jsonl.zst', 'text',
                       r"cannot read '.*noise.jsonl.zst' at its start \(zstd decompress"),
      'zst record of a number': (f'{root}/int.json.zst', 'text',
                                 r"field 'text' of the record at byte offset 14 of '.*int.json.zst'"
                                 ' is int, not text'),
      'hf: no such column': (f'hf:{corpus_root}/saved', 'body',
                             r"hf:.*saved has no column 'body' \(its columns: id, text\)"),
      'hf: no such split': (f'hf:{corpus_root}/saved:validation', 'text',
                            r"has no split 'validation' \(its splits: train, test\); name one "
                            r'as hf:.*saved:SPLIT'),
      'hf: a split of a Dataset': (f'hf:{root}/one:train', 'text',
                                   "is one dataset saved without splits; drop ':train'"),
      'hf: no directory': (f'hf:{root}/gone', 'text', r'hf:.*gone names no directory; check '
                           'the path'),
      'hf: no relative directory': ('hf:./gone', 'text', 'hf:./gone names no directory'),
  }


def test_bad_input_is_refused_in_one_line_that_names_it(corpus, tmp_path):
  for name, (spec, text_field, message) in bad_sources(tmp_path, corpus[0]).items():
    with pytest.raises(UsageError, match=message) as raised:
      documents(units_of(spec, text_field=text_field))
    assert '\n' not in str(raised.value), name


@pytest.mark.parametrize('package, spec', [
    ('pyarrow', '{root}/wiki.parquet'), ('zstandard', '{root}/wiki.jsonl.zst'),
    ('datasets', 'hf:{fresh}')])
def test_a_missing_optional_package_is_named_with_its_install_command(
    corpus, tmp_path, monkeypatch, package, spec):
  root, _ = corpus
  monkeypatch.setitem(sys.modules, package, None)  # How Python spells "not installed".
  with pytest.raises(UsageError, match=f"needs the Python package '{package}' .*; `pip install "
                                       rf"{package}`, or `pip install 'electra_jax\[corpora\]'`"):
    documents(units_of(spec.format(root=root, fresh=tmp_path)))


def test_a_hub_dataset_without_the_network_fails_in_one_line(tmp_path):
  # HF_HUB_OFFLINE fails at once where a machine without the network retries for ~20 s first.
  result = subprocess.run(
      [sys.executable, '-m', 'electra_jax.prepare', f'--config={REPO / "configs" / "tiny.py"}',
       f'--out={tmp_path / "out"}', '--config.data.sources=hf:HuggingFaceFW/fineweb/sample-10BT'],
      env={**os.environ, 'JAX_PLATFORMS': 'cpu', 'HF_HUB_OFFLINE': '1'}, cwd=REPO,
      capture_output=True, text=True, timeout=300)
  assert ('cannot load hf:HuggingFaceFW/fineweb/sample-10BT with datasets (Couldn\'t reach '
          "'HuggingFaceFW/fineweb' on the Hub") in error_line(result)
  assert 'and for a Hub dataset the network' in error_line(result)


# ----------------------------------------------------------------------------- preparing


@pytest.fixture(scope='module')
def vocab(corpus):
  root, _ = corpus
  return vocab_lib.train_vocab([str(root / 'plain.txt')], 400, str(root / 'vocab'))


def prepare(specs, vocab, out, workers):
  units = preparation.resolve(specs, unit_bytes=UNIT_BYTES)
  key = preparation.preparation_key(specs, units, vocab, 64, 0, 'text')
  preparation.prepare_split(specs, units, vocab, str(out), max_seq_length=64, seed=0, key=key,
                            workers=workers)
  return store.open_store(str(out)).manifest


def test_every_kind_prepares_the_same_examples_whatever_the_workers(corpus, vocab, tmp_path):
  root, docs = corpus
  specs = sources.parse_sources(','.join(spec.format(root=root) for spec, _ in KINDS.values()))
  one, two = (prepare(specs, vocab, tmp_path / str(w), workers=w) for w in (1, 2))
  assert one['counts']['documents'] == len(KINDS) * len(docs)
  assert len(one['shards']) > 10
  assert [s['sha256'] for s in two['shards']] == [s['sha256'] for s in one['shards']]
  assert two['counts'] == {**one['counts'], 'seconds': two['counts']['seconds']}


def test_prepared_data_is_reused_until_a_source_changes(corpus, vocab, tmp_path, monkeypatch):
  root, docs = corpus
  records = ['\n'.join(d) for d in docs[:30]]
  data = tmp_path / 'data'
  data.mkdir()
  write_corpus(data, records)
  specs = sources.parse_sources(f'{data}/wiki.parquet,hf:{data}/saved,hf:{data}/folder')
  out = tmp_path / 'prepared'
  ensure = lambda **kw: preparation.ensure_prepared(specs, vocab, str(out), max_seq_length=64,
                                                    seed=0, unit_bytes=UNIT_BYTES, workers=1,
                                                    **kw)
  documents_of = lambda examples: examples.manifest['counts']['documents']
  assert documents_of(ensure()) == 3 * 30
  for path in [data / 'wiki.parquet', *(data / 'saved' / 'train').glob('*.arrow'),
               *(data / 'folder').iterdir()]:
    os.utime(path, ns=(1, 1))  # Another host's copy: same paths and sizes, other mtimes.
  with monkeypatch.context() as patch:
    patch.setattr(preparation, 'prepare_split', lambda *a, **k: pytest.fail('not reused'))
    assert documents_of(ensure(check_mtimes=False)) == 3 * 30
  ensure()  # Here, where mtimes count: prepared again.
  with monkeypatch.context() as patch:
    patch.setattr(preparation, 'prepare_split', lambda *a, **k: pytest.fail('not reused'))
    ensure()

  # Each change keeps the number of units, so that only the source's identity can tell it.
  unit_counts = lambda: [len(u) for u in preparation.resolve(specs, unit_bytes=UNIT_BYTES)]
  counts = unit_counts()
  shards = lambda examples, source: [s['sha256'] for s in examples.manifest['shards']
                                     if s['source'] == source]
  write_parquet(data / 'folder' / 'train-0.parquet', {'id': [0], 'text': records[:1]})
  assert documents_of(ensure()) == 3 * 30 - 9  # It held 10 records, now 1.
  before = ensure()
  write_parquet(data / 'wiki.parquet', {'id': list(range(30)), 'text': records[::-1]})
  assert set(shards(ensure(), 0)).isdisjoint(shards(before, 0))  # The documents reversed.
  before = ensure()
  shutil.rmtree(data / 'saved')
  datasets.DatasetDict({'train': datasets.Dataset.from_dict({'text': records[::-1]})}).save_to_disk(
      str(data / 'saved'), max_shard_size='40KB')
  assert set(shards(ensure(), 1)).isdisjoint(shards(before, 1))
  assert unit_counts() == counts


# ----------------------------------------------------------------------------- training


def test_a_mixture_of_every_kind_trains_and_resumes_through_main(corpus, tmp_path):
  """Parquet, JSON lines in zstd and gzip, text, a save_to_disk dataset and an hf: folder."""
  root, _ = corpus
  workdir = tmp_path / 'run'
  command = lambda steps: [
      sys.executable, '-m', 'electra_jax.main', f'--config={REPO / "configs" / "tiny.py"}',
      f'--workdir={workdir}',
      f'--config.data.sources={root}/wiki.parquet@0.25,{root}/wiki.jsonl.zst@0.15,'
      f'{root}/wiki.jsonl.gz@0.15,{root}/plain.txt@0.15,hf:{root}/saved@0.15,'
      f'hf:{root}/folder@0.15',
      '--config.batch_size=16', '--config.max_seq_length=64', '--config.model.vocab_size=1000',
      '--config.warmup_steps=2', f'--config.num_train_steps={steps}', '--config.log_every=2',
      '--config.save_every=2', '--config.eval_every=0', '--config.data.prepare_workers=1']
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}
  run = lambda steps: subprocess.run(command(steps), env=env, cwd=REPO, capture_output=True,
                                     text=True, timeout=300)
  first = run(4)
  assert first.returncode == 0, first.stderr[-3000:]
  manifest = json.loads((workdir / 'data' / 'train' / 'manifest.json').read_text())
  assert manifest['sources'][0]['spec'].endswith('wiki.parquet')
  assert [s['weight'] for s in manifest['sources']] == [0.25] + [0.15] * 5
  assert all(s['examples'] > 100 for s in manifest['sources'])
  # A unit each but the folder's: one per file. The hf: sources are known by their data files.
  assert [s['source'] for s in manifest['shards']] == [0, 1, 2, 3, 4, 5, 5, 5]
  assert [len(s['hf']['files']) for s in manifest['key']['sources'][4:]] == [4, 3]
  prepared = tree_digest(workdir / 'data')

  resumed = run(6)  # Resumed: the prepared examples are the ones the first steps read.
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'resuming at step 4 of 6' in resumed.stderr
  assert 'preparing' not in resumed.stderr and tree_digest(workdir / 'data') == prepared
  logged = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  assert [m['step'] for m in logged if 'loss' in m] == [2, 4, 6]
  assert all(m['loss'] > 0 for m in logged if 'loss' in m)
