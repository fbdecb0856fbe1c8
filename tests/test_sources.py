"""Corpus sources: spec parsing, text/.gz/.jsonl files cut into units, and TFDS datasets.

TFDS is exercised for real: a GeneratorBasedBuilder writes WikiText-2 as array_record files into
a temporary data_dir and everything reads it back through TFDS. tfds.testing.mock_data stands in
only for a catalog dataset (wikipedia), which would need the internet.
"""

import gzip
import json
import re
import struct

from array_record.python import array_record_module as array_record
import pytest

from electra_jax.data import sources, text
from electra_jax.common.errors import UsageError


def write(path, content):
  path.write_bytes(content.encode() if isinstance(content, str) else content)
  return str(path)


def documents(unit_list):
  return [d for u in unit_list for d in sources.read_unit(u)]


# ----------------------------------------------------------------------------- specs


def test_parse_sources_reads_tfds_specs_files_and_weights():
  parsed = sources.parse_sources(
      'tfds:wikipedia/20230601.en@0.7, books/*.txt@0.3', setting='data.sources')
  assert [(s.tfds_name, s.split, s.feature, s.weight) for s in parsed] == [
      ('wikipedia/20230601.en', 'train', 'text', 0.7), ('', '', '', 0.3)]
  assert parsed[1].spec == 'books/*.txt'
  [pg19] = sources.parse_sources('tfds:pg19:1.0.0:validation[:10%]+test:book_text')
  assert (pg19.tfds_name, pg19.split, pg19.feature) == ('pg19:1.0.0', 'validation[:10%]+test',
                                                        'book_text')
  assert sources.parse_sources('a@b.txt')[0].spec == 'a@b.txt'  # not a weight


@pytest.mark.parametrize('value, message', [
    ('a.txt@1,b.txt', 'weights to some sources but not to others'),
    ('a.txt@0', 'must be positive'),
    ('tfds:wiki:train:text:extra', 'cannot parse'),
    (' , ', 'names no source'),
])
def test_parse_sources_refuses_bad_specs(value, message):
  with pytest.raises(UsageError, match=message):
    sources.parse_sources(value)


# ----------------------------------------------------------------------------- files


def test_text_units_cut_between_documents_and_read_like_the_whole_file(tmp_path):
  docs = [[f'doc {d} line {i}' + 'x' * (d % 7) for i in range(1 + d % 4)] for d in range(60)]
  body = '\n \n'.join('\n'.join(doc) for doc in docs) + '\n'
  path = write(tmp_path / 'corpus.txt', body)
  units = sources.source_units(sources.Source(spec=path, weight=None), unit_bytes=97)
  assert len(units) > 10 and units[0].start == 0 and units[-1].stop is None
  assert all(a.stop == b.start for a, b in zip(units, units[1:]))
  assert documents(units) == list(text.read_documents([path])) == docs


def test_gzip_and_jsonl_files(tmp_path):
  records = [{'text': 'First line.\n\nSecond line.', 'id': 1}, {'text': '  '}, {'text': 'Solo'}]
  lines = '\n'.join(json.dumps(r) for r in records) + '\n'
  plain = write(tmp_path / 'a.jsonl', lines)
  zipped = write(tmp_path / 'b.jsonl.gz', gzip.compress(lines.encode()))
  write(tmp_path / 'c.txt.gz', gzip.compress(b'one\ntwo\n\nthree\n'))
  units = sources.source_units(sources.Source(spec=str(tmp_path / '*'), weight=None),
                               unit_bytes=40)
  assert {u.kind for u in units} == {'jsonl', 'text'}
  assert [u for u in units if u.path == zipped][0].stop is None  # a .gz file is one unit
  expected = [['First line.', 'Second line.'], ['Solo']]
  assert documents(units) == expected + expected + [['one', 'two'], ['three']]
  assert len([u for u in units if u.path == plain]) > 1  # cut at line starts


@pytest.mark.parametrize('line, message', [
    ('{"body": "x"}', "without a string field 'text'.*data.text_field"),
    ('{"text": 5}', 'is int, not text'),
    ('not json', 'not JSON at byte offset 0'),
])
def test_bad_jsonl_records_are_named(tmp_path, line, message):
  path = write(tmp_path / 'bad.jsonl', line + '\n')
  [unit] = sources.source_units(sources.Source(spec=path, weight=None))
  with pytest.raises(UsageError, match=message):
    documents([unit])


def test_truncated_gzip_is_reported(tmp_path):
  path = write(tmp_path / 'cut.txt.gz', gzip.compress(b'hello world\n' * 1000)[:60])
  [unit] = sources.source_units(sources.Source(spec=path, weight=None))
  with pytest.raises(UsageError, match='damaged or truncated'):
    documents([unit])


def test_sample_lines_is_deterministic_and_bounded(tmp_path):
  path = write(tmp_path / 'c.txt', ''.join(f'line {i}\n' + ('\n' if i % 3 == 0 else '')
                                           for i in range(500)))
  units = sources.source_units(sources.Source(spec=path, weight=None), unit_bytes=200)
  sample = sources.sample_lines(units, 20, seed=3)
  assert len(sample) == 20 and len(set(sample)) == 20
  assert sample == sources.sample_lines(units, 20, seed=3) != sources.sample_lines(units, 20, 4)
  # A sample of a tenth of the corpus may stop early, after 10x its size: never all 500.
  assert len(sources.sample_lines(units, 1000, seed=3)) == 500


# ----------------------------------------------------------------------------- TFDS


@pytest.fixture(scope='module')
def tfds_dir(tmp_path_factory, wikitext):
  import tfds_wikitext  # pylint: disable=g-import-not-at-top
  data_dir = tmp_path_factory.mktemp('tfds')
  return str(data_dir), tfds_wikitext.build(data_dir)


def test_tfds_split_is_read_back_through_tfds(tfds_dir):
  data_dir, name = tfds_dir
  [spec] = sources.parse_sources(f'tfds:{name}:train')
  units = sources.source_units(spec, tfds_data_dir=data_dir, unit_bytes=100_000)
  assert len(units) > 3 and {u.kind for u in units} == {'tfds'}
  docs = documents(units)
  assert len(docs) == 60 and all(docs)  # WikiText-2 valid holds 60 articles
  [half] = sources.parse_sources(f'tfds:{name}:train[:50%]:text')
  assert documents(sources.source_units(half, tfds_data_dir=data_dir)) == docs[:30]
  identity = sources.identity(spec, units)['tfds']
  assert identity['num_examples'] == 60 and identity['version'] == '1.0.0'


@pytest.mark.parametrize('spec, message', [
    ('tfds:{name}:validation', r"has no split 'validation'.*\['train', 'test'\]|'test', 'train'"),
    ('tfds:{name}:train:body', r"no text feature 'body' \(its text features: \['text', 'title'\]"),
    ('tfds:no_such_dataset_xyz', "TFDS knows no dataset 'no_such_dataset_xyz'"),
])
def test_tfds_errors_name_the_fix(tfds_dir, spec, message):
  data_dir, name = tfds_dir
  [source] = sources.parse_sources(spec.format(name=name))
  with pytest.raises(UsageError, match=message):
    sources.source_units(source, tfds_data_dir=data_dir)


def test_unprepared_catalog_dataset_says_how_to_build_it(tmp_path):
  [source] = sources.parse_sources('tfds:imdb_reviews')
  with pytest.raises(UsageError, match=re.escape('tfds build imdb_reviews')):
    sources.source_units(source, tfds_data_dir=str(tmp_path))


def _tfrecord_frame(data: bytes) -> bytes:
  # The masked CRCs are not checked by the reader, so zeros stand in for them here.
  return struct.pack('<Q', len(data)) + b'\0' * 4 + data + b'\0' * 4


def test_tfrecord_split_is_read_without_tensorflow(tfds_dir, tmp_path):
  """The prebuilt catalog (gs://tfds-data) is TFRecord: rewrite the dataset in that format."""
  import shutil  # pylint: disable=g-import-not-at-top
  data_dir, name = tfds_dir
  copy = tmp_path / 'tfds'
  shutil.copytree(data_dir, copy)
  version_dir = copy / name / '1.0.0'
  for split in ('train', 'test'):
    [source_file] = version_dir.glob(f'*-{split}.array_record-*')
    records = array_record.ArrayRecordReader(str(source_file)).read_all()
    target = str(source_file).replace('.array_record-', '.tfrecord-')
    (version_dir / target).write_bytes(b''.join(map(_tfrecord_frame, records)))
    source_file.unlink()
  info = json.loads((version_dir / 'dataset_info.json').read_text())
  info['fileFormat'] = 'tfrecord'
  (version_dir / 'dataset_info.json').write_text(json.dumps(info))
  sources.tfds_builder.cache_clear()
  sources.tfds_data_source.cache_clear()

  [spec] = sources.parse_sources(f'tfds:{name}:train')
  units = sources.source_units(spec, tfds_data_dir=str(copy))
  assert [u.kind for u in units] == ['tfrecord']
  expected = documents(sources.source_units(spec, tfds_data_dir=data_dir))
  assert documents(units) == expected
  [missing] = sources.parse_sources(f'tfds:{name}:validation')
  with pytest.raises(UsageError, match="has no split 'validation'"):
    sources.source_units(missing, tfds_data_dir=str(copy))

  tfrecord = next(version_dir.glob('*-train.tfrecord-*'))
  tfrecord.write_bytes(tfrecord.read_bytes()[:-100])
  with pytest.raises(UsageError, match='truncated'):
    documents(units)


def test_catalog_dataset_name_split_and_feature_with_mock_data(tmp_path):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  sources.tfds_builder.cache_clear()
  sources.tfds_data_source.cache_clear()
  try:
    with tfds.testing.mock_data(num_examples=9):
      [spec] = sources.parse_sources('tfds:wikipedia/20230601.en:train:text@1')
      units = sources.source_units(spec, tfds_data_dir=str(tmp_path))
      assert sum(u.stop - u.start for u in units) == 9
      assert len(documents(units)) == 9
      [title] = sources.parse_sources('tfds:wikipedia/20230601.en:train:title')
      assert len(documents(sources.source_units(title, tfds_data_dir=str(tmp_path)))) == 9
  finally:  # The mocked sources must not outlive the mock.
    sources.tfds_builder.cache_clear()
    sources.tfds_data_source.cache_clear()
