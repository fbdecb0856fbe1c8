"""Corpus sources (data.sources: tfds:NAME..., hf:NAME..., paths or globs of text, JSON lines and
parquet files, each @WEIGHT or none; docs/data.md) cut into units of work.

A unit is what one worker tokenizes and packs into one shard: a ~64 MB byte range of a text
file (cut between documents), a whole book or compressed (.gz, .zst) file, ~64 MB of a parquet
file's row groups, a range of a TFDS split or of a saved Hugging Face dataset, or one shard of a
streamed one, with its format and packing. The units, and so the example ids, never depend on the
number of workers.
"""

import collections
from collections.abc import Iterator, Sequence
import dataclasses
import functools
import importlib
import os
import re
import struct

import numpy as np

from electra_jax.data import formats
from electra_jax.data import text
from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError

UNIT_BYTES = 64 << 20  # Text per unit of work (and per shard) when a file can be cut.
TEXT_FORMATS = ('auto', *formats.FORMATS)
PACKINGS = ('auto', 'original', 'fill', 'documents')
# Vocabulary sampling stops reading once it has seen this many times the lines it keeps.
_SAMPLE_OVERREAD = 10

_HF_SPEC = re.compile(r'hf:(?P<name>[^:]+)(?::(?P<split>[\w.-]+))?$')
_TFDS_SPEC = re.compile(r'''
    tfds:(?P<name>[\w.-]+(?:/[\w.=-]+)?)                   # name or name/config
    (?::(?P<version>\d+\.\d+\.\d+))?                       # version, as TFDS writes it
    (?::(?P<split>[\w-]+(?:\[[^\]]*\])?(?:\+[\w-]+(?:\[[^\]]*\])?)*))?   # train, test[:10%]
    (?::(?P<feature>[\w/]+))?                              # the text feature
    $''', re.VERBOSE)


@dataclasses.dataclass(frozen=True)
class Source:
  """One parsed item of data.sources."""
  spec: str                   # as written, without the weight
  weight: float | None        # mixture weight; None when the sources are simply concatenated
  setting: str = 'data.sources'  # the config field it came from, for messages
  tfds_name: str = ''         # for tfds: NAME[/CONFIG][:VERSION]
  hf_name: str = ''           # for hf: PATH, or a Hub dataset's OWNER/NAME[/CONFIG]
  split: str = ''             # tfds: the split; hf: the split, '' = the default
  feature: str = ''
  text_format: str = 'auto'   # data.text_format: how text files are read
  packing: str = 'auto'       # data.packing: how documents become examples


@dataclasses.dataclass(frozen=True)
class Unit:
  """A stretch of one source's documents that one worker reads (picklable for the workers)."""
  # 'text', 'jsonl', 'parquet', 'tfds' (random-access split), 'tfrecord', 'hf_rows' (a saved
  # dataset) or 'hf_shard' (a streamed one)
  kind: str
  path: str                   # the file; tfds: the dataset name; hf: its path or Hub name
  start: int = 0              # byte offset, first record or row group, or the shard
  stop: int | None = None     # end offset, record or row group (exclusive); None = to the end
  split: str = ''             # tfds and hf: the split
  field: str = ''             # jsonl, parquet and hf: the text field; tfds: the feature
  config: str = ''            # hf: the Hub dataset's config
  data_dir: str = ''          # tfds: the data_dir ('' = TFDS's default)
  file: str = ''              # tfrecord: the TFRecord file
  text_format: str = 'lines'  # text: the file's format (formats.FORMATS), never 'auto'
  packing: str = 'original'   # 'original' or 'fill' (packing.py), never 'auto'


def _parse_weight(item: str, setting: str) -> tuple[str, float | None]:
  body, at, weight = item.rpartition('@')
  if not at:
    return item, None
  try:
    value = float(weight)
  except ValueError:
    return item, None  # An '@' that belongs to a path.
  if not value > 0:
    raise UsageError(f"weight {weight!r} of '{body}' in {setting} must be positive, "
                     'e.g. @0.3')
  return body, value


def parse_sources(value: str, setting: str = 'data.sources', *, text_format: str = 'auto',
                  packing: str = 'auto') -> list[Source]:
  """The sources of a comma-separated spec; `setting` names the config field for messages."""
  _check_choices(text_format, packing)
  how = {'setting': setting, 'text_format': text_format, 'packing': packing}
  sources = []
  for item in (i.strip() for i in value.split(',')):
    if not item:
      continue
    spec, weight = _parse_weight(item, setting)
    named = {}  # A path or glob names its files in `spec`.
    if spec.startswith('hf:'):
      if not (match := _HF_SPEC.match(spec)):
        raise UsageError(f"cannot parse '{spec}' in {setting}; write hf:NAME_OR_PATH[/CONFIG]"
                         '[:SPLIT], e.g. hf:HuggingFaceFW/fineweb/sample-10BT:train')
      named = {'hf_name': match['name'], 'split': match['split'] or ''}
    elif spec.startswith('tfds:'):
      if not (match := _TFDS_SPEC.match(spec)):
        raise UsageError(f"cannot parse '{spec}' in {setting}; write tfds:NAME[/CONFIG][:SPLIT"
                         '[:FEATURE]], e.g. tfds:wikipedia/20230601.en:train:text')
      version = f":{match['version']}" if match['version'] else ''
      named = {'tfds_name': match['name'] + version, 'split': match['split'] or 'train',
               'feature': match['feature'] or 'text'}
    sources.append(Source(spec=spec, weight=weight, **named, **how))
  if not sources:
    raise UsageError(f'{setting} names no source; pass --config.{setting}=PATH_OR_GLOB, '
                     'tfds:NAME or hf:NAME_OR_PATH')
  weighted = [s.weight is not None for s in sources]
  if any(weighted) and not all(weighted):
    raise UsageError(f'{setting} gives weights to some sources but not to others; give every '
                     'source an @WEIGHT (a mixture) or none (one concatenated corpus)')
  return sources


def _check_choices(text_format: str, packing: str) -> None:
  for field, value, choices in (('text_format', text_format, TEXT_FORMATS),
                                ('packing', packing, PACKINGS)):
    if value not in choices:
      raise UsageError(f"data.{field}={value!r} is not one of {', '.join(choices)}; set "
                       f'--config.data.{field}=auto (or another of them)')


def from_config(data_config, split: str) -> list[Source] | None:
  """The sources of 'train' or 'eval' in the config's data section, or None if it names none.

  data.train_files / data.eval_files are the simple path: text files, concatenated.
  """
  files_field = f'{split}_files'
  sources_field = 'sources' if split == 'train' else 'eval_sources'
  files, specs = data_config[files_field], data_config[sources_field]
  documents = data_config['document_attention'] and data_config['packing'] == 'auto'
  how = {'text_format': data_config['text_format'],
         'packing': 'documents' if documents else data_config['packing']}
  if files and specs:
    raise UsageError(f'set config.data.{files_field} or data.{sources_field}, not both')
  if specs:
    return parse_sources(specs, setting=f'data.{sources_field}', **how)
  if files:
    _check_choices(**how)
    return [Source(spec=p.strip(), weight=None, setting=f'data.{files_field}', **how)
            for p in files.split(',') if p.strip()]
  return None


def _packing(source: Source, text_format: str) -> str:
  """'auto' fills the examples of the formats whose paragraphs are cut into sentences here."""
  if source.packing != 'auto':
    return source.packing
  return 'original' if text_format == 'lines' else 'fill'


def _file_units(source: Source, text_field: str, unit_bytes: int) -> list[Unit]:
  units = []
  for path in text.resolve_files(source.spec, setting=source.setting):
    # A record's text field holds a document, so its format is 'lines'.
    kind, field, text_format = 'jsonl', text_field, 'lines'
    if formats.is_jsonl(path):
      ranges = text.line_ranges(path, unit_bytes)
    elif path.endswith('.parquet'):
      kind, ranges = 'parquet', formats.row_group_ranges(path, text_field, unit_bytes)
    else:
      kind, field, text_format = 'text', '', formats.file_format(path, source.text_format)
      ranges = formats.byte_ranges(path, text_format, unit_bytes)
    units += [Unit(kind=kind, path=path, start=start, stop=stop, field=field,
                   text_format=text_format, packing=_packing(source, text_format))
              for start, stop in ranges]
  return units


def source_units(source: Source, *, tfds_data_dir: str = '', text_field: str = 'text',
                 unit_bytes: int = UNIT_BYTES) -> list[Unit]:
  """The units of work of one source, in corpus order."""
  if source.hf_name:
    return _hf_units(source, text_field, unit_bytes)
  if not source.tfds_name:
    return _file_units(source, text_field, unit_bytes)
  return _tfds_units(source, tfds_data_dir, unit_bytes)


def text_to_document(body: str) -> list[str]:
  """A document's non-empty stripped lines (a record's text holds a whole document)."""
  return [line for line in (raw.strip() for raw in body.splitlines()) if line]


def read_unit(unit: Unit, notes: collections.Counter | None = None) -> Iterator[list[str]]:
  """Yields the documents of a unit, each as its list of non-empty lines.

  `notes` counts what was read in spite of a flaw (formats.py: 'unclosed_docs').
  """
  if unit.kind == 'text':
    return formats.read_documents(unit.path, unit.text_format, unit.start, unit.stop, notes)
  if unit.kind == 'jsonl':
    texts = formats.jsonl_texts(unit.path, unit.field, unit.start, unit.stop)
  elif unit.kind == 'parquet':
    texts = formats.parquet_texts(unit.path, unit.field, unit.start, unit.stop)
  elif unit.kind.startswith('hf_'):
    texts = hf_texts(unit)
  else:
    texts = (_decode(record[unit.field], unit.path, index) for index, record in _records(unit))
  return (document for document in map(text_to_document, texts) if document)


def _reading(unit: Unit) -> dict:
  """How a unit's text becomes examples, where not the original's way (so that older prepared
  data keeps its identity)."""
  reading = {'format': unit.text_format} if unit.text_format != 'lines' else {}
  return reading | ({'packing': unit.packing} if unit.packing != 'original' else {})


def identity(source: Source, units: Sequence[Unit]) -> dict:
  """What the prepared data of a source was made from, to tell when it must be remade."""
  record = {'spec': source.spec, 'weight': source.weight}
  if source.tfds_name:
    tfds = tfds_identity(source.tfds_name, source.split, units[0].data_dir)
    return record | {'tfds': tfds} | _reading(units[0])
  if source.hf_name:
    return record | {'hf': hf_identity(units[0])} | _reading(units[0])
  # Each file once, in order.
  return record | {'files': [_file_identity(unit.path) | _reading(unit)
                             for unit in {u.path: u for u in units}.values()]}


def _file_identity(path: str) -> dict:
  """A file's path, size and modification time; a remote one (hf://...@REVISION/...) its URL."""
  if '://' in path:
    return {'path': path}
  stat = os.stat(path)
  return {'path': os.path.abspath(path), 'bytes': stat.st_size, 'mtime_ns': stat.st_mtime_ns}


def describe(sources: Sequence[Source]) -> str:
  return ', '.join(s.spec + (f'@{s.weight:g}' if s.weight is not None else '') for s in sources)


def sample_lines(units: Sequence[Unit], max_lines: int, seed: int) -> list[str]:
  """A random sample of at most `max_lines` lines of the units' text, in bounded memory and time:
  units in a random order, until _SAMPLE_OVERREAD x max_lines lines have passed."""
  rng = np.random.default_rng(seed)
  budget = _SAMPLE_OVERREAD * max_lines

  def lines():
    seen = 0
    for index in rng.permutation(len(units)):
      for document in read_unit(units[index]):
        yield from document
        seen += len(document)
      if seen >= budget:
        return

  return vocab_lib.reservoir_sample(lines(), max_lines, np.random.default_rng([seed, 1]))


# TFDS datasets, read without TensorFlow. A random-access split (array_record, parquet) is read
# through tfds.data_source; a TFRecord split (gs://tfds-data's prebuilt datasets) is framed here
# and decoded by TFDS's NumPy parser; gs:// paths go through etils.epath (gcsfs, no TensorFlow).

_READ_CHUNK = 1024            # Records fetched per data-source call (each call has overhead).
_DEFAULT_RECORD_BYTES = 4096  # Assumed record size where a split does not record its size.


def _tfds():
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  (slow to import)
  return tfds


def _where(data_dir: str) -> str:
  return f"data_dir '{data_dir}'" if data_dir else 'the default TFDS data_dir'


@functools.lru_cache(maxsize=None)
def tfds_builder(name: str, data_dir: str):
  """The TFDS builder of `name`: a catalog dataset, or one prepared in `data_dir`."""
  tfds = _tfds()
  kwargs = {'data_dir': data_dir} if data_dir else {}
  try:
    try:
      return tfds.builder(name, **kwargs)
    except tfds.core.registered.DatasetNotFoundError:
      # TFDS imports its catalog lazily; this registers the text datasets (wikipedia, c4,
      # pg19, lm1b, imdb_reviews, ...), so a catalog name resolves.
      importlib.import_module('tensorflow_datasets.text')
      return tfds.builder(name, **kwargs)
  except tfds.core.registered.DatasetNotFoundError:
    raise UsageError(f"TFDS knows no dataset '{name}' (not in its catalog, not prepared in "
                     f'{_where(data_dir)}); check tfds:{name} in data.sources and '
                     'data.tfds_data_dir') from None
  except ImportError as e:
    raise UsageError(f"cannot open TFDS dataset '{name}' in {_where(data_dir)}: {e}; for gs:// "
                     'paths without TensorFlow, `pip install gcsfs`') from None


def _missing_split(name: str, split: str, data_dir: str, error: Exception) -> UsageError:
  splits = list(tfds_builder(name, data_dir).info.splits)
  if all(part.split('[')[0] in splits for part in split.split('+')):  # A bad slice, not name.
    reason = str(error).strip().splitlines()[0]
    return UsageError(f"cannot read split '{split}' of TFDS dataset '{name}' ({reason}); fix the "
                      'slice (e.g. train[:90%]) in data.sources')
  return UsageError(f"TFDS dataset '{name}' in {_where(data_dir)} has no split '{split}'; it "
                    f'has {splits}: use tfds:{name}:SPLIT with one of them')


class NotPrepared(UsageError):
  """A TFDS dataset not built in its data_dir; the fix names `setting` and `instead` as the
  caller's config spells them."""

  def __init__(self, name: str, data_dir: str, setting: str = 'data.tfds_data_dir',
               instead: str = ''):
    super().__init__(
        f"TFDS dataset '{name}' is not prepared in {_where(data_dir)}; {instead}build it there "
        f'with `tfds build {name} --data_dir=DIR --file_format=array_record`, or point '
        f'{setting} at a copy (e.g. gs://tfds-data/datasets for the prebuilt catalog)')
    self.name, self.data_dir = name, data_dir


@functools.lru_cache(maxsize=None)
def tfds_data_source(name: str, split: str, data_dir: str):
  """A random-access source of the split, or None for a split stored as TFRecord files."""
  dataset = tfds_builder(name, data_dir)
  try:
    return dataset.as_data_source(split=split)
  except NotImplementedError:  # No random-access files: TFRecord (its split: _tfrecord_files)
    if not dataset.is_prepared():
      raise NotPrepared(name, data_dir) from None
    return None
  except (ValueError, KeyError) as e:
    if 'split' in str(e).lower():
      raise _missing_split(name, split, data_dir, e) from None
    raise
  except FileNotFoundError:
    raise NotPrepared(name, data_dir) from None


def _check_feature(name: str, feature: str, data_dir: str):
  features = tfds_builder(name, data_dir).info.features
  texts = sorted(k for k, v in features.items() if isinstance(v, _tfds().features.Text))
  if feature not in texts:
    raise UsageError(f"TFDS dataset '{name}' has no text feature '{feature}' (its text features: "
                     f'{texts}); name one as tfds:{name}:SPLIT:FEATURE')


def _tfrecord_files(name: str, split: str, data_dir: str) -> list[tuple[str, int, int]]:
  """(TFRecord file, first record, end record) of each file a split reads (its slice applied)."""
  try:
    instructions = tfds_builder(name, data_dir).info.splits[split].file_instructions
  except (ValueError, KeyError) as e:
    raise _missing_split(name, split, data_dir, e) from None
  return [(i.filename, i.skip, i.skip + i.take) for i in instructions if i.take]


def _tfds_units(source: Source, data_dir: str, unit_bytes: int) -> list[Unit]:
  """A split's record ranges of about `unit_bytes`, or one unit per TFRecord file read."""
  name, split = source.tfds_name, source.split
  records = tfds_data_source(name, split, data_dir)
  _check_feature(name, source.feature, data_dir)
  unit = functools.partial(Unit, path=name, split=split, field=source.feature, data_dir=data_dir,
                           packing=_packing(source, 'lines'))
  if records is None:
    units = [unit(kind='tfrecord', file=file, start=start, stop=stop)
             for file, start, stop in _tfrecord_files(name, split, data_dir)]
  else:
    try:
      info = tfds_builder(name, data_dir).info.splits[split]
      record_bytes = max(1, int(info.num_bytes) // max(1, info.num_examples))
    except (ValueError, KeyError, TypeError):  # Sizes unknown (e.g. under tfds.testing.mock_data).
      record_bytes = _DEFAULT_RECORD_BYTES
    per_unit = max(1, unit_bytes // record_bytes)
    units = [unit(kind='tfds', start=start, stop=min(start + per_unit, len(records)))
             for start in range(0, len(records), per_unit)]
  if not units:
    raise UsageError(f"split '{split}' of TFDS dataset '{name}' is empty; choose another split")
  return units


def _get_records(source, keys: Sequence[int]) -> list:
  try:
    return source.__getitems__(list(keys))
  except TypeError:  # tfds.testing.mock_data's sources have no working __getitems__.
    return [source[k] for k in keys]


def _tfrecords(path: str, start: int, stop: int) -> Iterator[bytes]:
  """Records [start, stop) of a TFRecord file (length, CRC, bytes, CRC; the CRCs unchecked)."""
  from etils import epath  # pylint: disable=g-import-not-at-top
  with epath.Path(path).open('rb') as f:
    for index in range(stop):
      header = f.read(12)  # uint64 length, uint32 masked CRC of the length
      if len(header) < 12:
        raise UsageError(f"TFRecord file '{path}' ends after {index} records, but TFDS expects "
                         f'{stop}; the file is truncated: re-download or rebuild the dataset')
      (length,) = struct.unpack('<Q', header[:8])
      if index < start:
        f.seek(length + 4, 1)
        continue
      data = f.read(length)
      if len(data) < length or len(f.read(4)) < 4:
        raise UsageError(f"TFRecord file '{path}' is truncated inside record {index}; "
                         're-download or rebuild the dataset')
      yield data


def _records(unit: Unit) -> Iterator[tuple[int, dict]]:
  """(index, record decoded by TFDS) of a 'tfds' or 'tfrecord' unit's records [start, stop)."""
  if unit.kind == 'tfds':
    source = tfds_data_source(unit.path, unit.split, unit.data_dir)
    for first in range(unit.start, unit.stop, _READ_CHUNK):
      keys = range(first, min(first + _READ_CHUNK, unit.stop))
      yield from zip(keys, _get_records(source, keys))
    return
  features = tfds_builder(unit.path, unit.data_dir).info.features
  for index, raw in enumerate(_tfrecords(unit.file, unit.start, unit.stop), start=unit.start):
    yield index, features.deserialize_example_np(raw)


def _decode(value, name: str, index: int) -> str:
  if isinstance(value, bytes):
    try:
      return value.decode('utf-8')
    except UnicodeDecodeError as e:
      raise UsageError(f"record {index} of TFDS dataset '{name}' is not valid UTF-8 ({e}); "
                       'choose another text feature') from None
  return str(value)


def tfds_identity(name: str, split: str, data_dir: str) -> dict:
  """What identifies the split's content: dataset, version, data_dir and size."""
  dataset = tfds_builder(name, data_dir)
  source = tfds_data_source(name, split, data_dir)
  size = len(source) if source is not None else dataset.info.splits[split].num_examples
  return {'name': name, 'split': split, 'data_dir': data_dir,
          'version': str(dataset.info.version), 'num_examples': int(size)}


def tfds_records(name: str, split: str, data_dir: str) -> Iterator[dict]:
  """Every record of the split with all its features, decoded by TFDS (text as bytes)."""
  source = tfds_data_source(name, split, data_dir)
  units = ([Unit('tfrecord', name, start, stop, split, data_dir=data_dir, file=file)
            for file, start, stop in _tfrecord_files(name, split, data_dir)] if source is None
           else [Unit('tfds', name, 0, len(source), split, data_dir=data_dir)])
  for unit in units:
    yield from (record for _, record in _records(unit))


# Hugging Face datasets (hf:NAME_OR_PATH[/CONFIG][:SPLIT]), read through the `datasets` library,
# an optional package. A directory written by save_to_disk is memory-mapped arrow, cut into row
# ranges; a folder of data files or a Hub dataset is streamed, one unit per shard (a data file),
# so a Hub dataset needs the network but no disk for a copy.

_SAVED = ('state.json', 'dataset_dict.json')  # What save_to_disk writes: a Dataset, a dict.


def _datasets(name: str):
  return text.optional_module('datasets', f'reading hf:{name}')


def _first_line(error: Exception) -> str:
  return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _hf_location(name: str) -> tuple[str, str, str]:
  """(unit kind, path or Hub name, config) of an hf: source: a local directory, or OWNER/NAME
  and the rest of the name as the config."""
  path = os.path.expanduser(name)
  if os.path.isdir(path):
    saved = any(os.path.exists(os.path.join(path, f)) for f in _SAVED)
    return ('hf_rows' if saved else 'hf_shard'), path, ''
  if name.startswith(('/', '.', '~')):
    raise UsageError(f'hf:{name} names no directory; check the path (a dataset saved with '
                     'save_to_disk, or a folder of parquet or JSON lines files)')
  parts = name.split('/')
  return 'hf_shard', '/'.join(parts[:2]), '/'.join(parts[2:])


def _hf_saved(path: str, split: str):
  """The dataset saved in `path`: a DatasetDict's `split` ('' = train), or the one Dataset."""
  datasets = _datasets(path)
  try:
    saved = datasets.load_from_disk(path)
  except (OSError, ValueError) as e:
    raise UsageError(f'cannot load hf:{path} with datasets.load_from_disk ({_first_line(e)}); '
                     'restore the directory or save the dataset again') from None
  if isinstance(saved, datasets.DatasetDict):
    if (split or 'train') not in saved:
      raise UsageError(f"hf:{path} has no split '{split or 'train'}' (its splits: "
                       f"{', '.join(saved)}); name one as hf:{path}:SPLIT")
    return saved[split or 'train']
  if split:
    raise UsageError(f"hf:{path} is one dataset saved without splits; drop ':{split}'")
  return saved


def _hf_streamed(name: str, config: str, split: str):
  """(the split streamed, its data files) of a folder of data files or a Hub dataset: what
  datasets.load_dataset(name, config, split=split, streaming=True) does, with the files."""
  datasets = _datasets(name)
  try:
    builder = datasets.load_dataset_builder(name, config or None)
    stream = builder.as_streaming_dataset(split=split or 'train')
  except (OSError, ValueError) as e:  # No network (ConnectionError), no such dataset or split.
    where = f'hf:{name}' + (f'/{config}' if config else '')
    raise UsageError(f'cannot load {where} with datasets ({_first_line(e)}); check the name, '
                     'config and split, and for a Hub dataset the network (it is streamed from '
                     'the Hub)') from None
  return stream, list((builder.config.data_files or {}).get(split or 'train', []))


# Each resolution of a Hub name asks the Hub: once per process. A local directory is read anew
# (in milliseconds), so a long-lived process sees its files change.
_hub_streamed = functools.lru_cache(maxsize=None)(_hf_streamed)


def _streamed(name: str, config: str, split: str):
  return (_hf_streamed if os.path.isdir(name) else _hub_streamed)(name, config, split)


def _check_hf_column(where: str, features, field: str) -> None:
  if features is not None:  # A streamed dataset may know its columns only once read.
    kind = features.get(field)
    formats.check_text_column(where, field, list(features), kind,
                              getattr(kind, 'dtype', None) in ('string', 'large_string'))


def _hf_units(source: Source, field: str, unit_bytes: int) -> list[Unit]:
  """Row ranges of about `unit_bytes` of text of a saved dataset, or a streamed one's shards."""
  kind, path, config = _hf_location(source.hf_name)
  unit = functools.partial(Unit, kind=kind, path=path, config=config, split=source.split,
                           field=field, packing=_packing(source, 'lines'))
  if kind == 'hf_shard':
    stream, _ = _streamed(path, config, source.split)
    _check_hf_column(f'hf:{source.hf_name}', stream.features, field)
    return [unit(start=shard, stop=shard + 1) for shard in range(stream.num_shards)] or [
        unit(start=0, stop=0)]
  dataset = _hf_saved(path, source.split)
  _check_hf_column(f'hf:{source.hf_name}', dataset.features, field)
  rows = max(1, unit_bytes * len(dataset) // max(1, dataset.data.column(field).nbytes))
  return [unit(start=start, stop=min(start + rows, len(dataset)))
          for start in range(0, len(dataset), rows)] or [unit(start=0, stop=0)]


def hf_texts(unit: Unit) -> Iterator[str]:
  """The text of a unit's rows: a row range of a saved dataset, or a streamed shard."""
  name = f'hf:{unit.path}' + (f':{unit.split}' if unit.split else '')
  if unit.kind == 'hf_rows':  # save_to_disk writes the rows a selection holds: the table is them.
    column = _hf_saved(unit.path, unit.split).data.column(unit.field)
    for first in range(unit.start, unit.stop, _READ_CHUNK):
      values = column.slice(first, min(_READ_CHUNK, unit.stop - first)).to_pylist()
      for row, value in enumerate(values, start=first):
        yield formats.checked_text(value, unit.field, f'row {row} of {name}')
    return
  stream, _ = _streamed(unit.path, unit.config, unit.split)
  if unit.stop > unit.start:  # A dataset without shards has one empty unit.
    shard = stream.shard(num_shards=stream.num_shards, index=unit.start, contiguous=True)
    for row, record in enumerate(shard):
      yield formats.checked_text(record.get(unit.field), unit.field,
                                 f'row {row} of shard {unit.start} of {name}')


def hf_identity(unit: Unit) -> dict:
  """What identifies an hf: source's content: name, config, split and data files (a Hub
  dataset's file URLs name the revision they were resolved at)."""
  if unit.kind == 'hf_rows':
    files = [f['filename'] for f in _hf_saved(unit.path, unit.split).cache_files]
  else:
    files = _streamed(unit.path, unit.config, unit.split)[1]
  return {'name': unit.path, 'config': unit.config, 'split': unit.split,
          'files': [_file_identity(f) for f in files]}
