"""Text of TFDS datasets, read without TensorFlow.

A random-access split (array_record, parquet) is read through `tfds.data_source`; a TFRecord
split (gs://tfds-data's prebuilt datasets) is framed here and decoded by TFDS's NumPy parser.
gs:// paths go through etils.epath, which needs gcsfs without TensorFlow.
"""

from collections.abc import Iterator, Sequence
import functools
import importlib
import struct

from electra_jax.common.errors import UsageError

_READ_CHUNK = 1024            # Records fetched per data-source call (each call has overhead).
_DEFAULT_RECORD_BYTES = 4096  # Assumed record size where a split does not record its size.


def _tfds():
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  (slow to import)
  return tfds


def _where(data_dir: str) -> str:
  return f"data_dir '{data_dir}'" if data_dir else 'the default TFDS data_dir'


@functools.lru_cache(maxsize=None)
def builder(name: str, data_dir: str):
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
  splits = list(builder(name, data_dir).info.splits)
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
def data_source(name: str, split: str, data_dir: str):
  """A random-access source of the split, or None for a split stored as TFRecord files."""
  tfds_builder = builder(name, data_dir)
  try:
    return tfds_builder.as_data_source(split=split)
  except NotImplementedError:  # No random-access files: TFRecord, or nothing at all.
    if not tfds_builder.is_prepared():
      raise NotPrepared(name, data_dir) from None
    tfds_builder.info.splits[split]  # pylint: disable=pointless-statement  (checks the split)
    return None
  except (ValueError, KeyError) as e:
    if 'split' in str(e).lower():
      raise _missing_split(name, split, data_dir, e) from None
    raise
  except FileNotFoundError:
    raise NotPrepared(name, data_dir) from None


def _check_feature(name: str, feature: str, data_dir: str):
  features = builder(name, data_dir).info.features
  texts = sorted(k for k, v in features.items() if isinstance(v, _tfds().features.Text))
  if feature not in texts:
    raise UsageError(f"TFDS dataset '{name}' has no text feature '{feature}' (its text features: "
                     f'{texts}); name one as tfds:{name}:SPLIT:FEATURE')


def _tfrecord_units(name: str, split: str, data_dir: str) -> list[tuple[str, str, int, int]]:
  try:
    instructions = builder(name, data_dir).info.splits[split].file_instructions
  except (ValueError, KeyError) as e:
    raise _missing_split(name, split, data_dir, e) from None
  return [('tfrecord', i.filename, i.skip, i.skip + i.take) for i in instructions if i.take]


def _range_units(source, name: str, split: str, data_dir: str,
                 unit_bytes: int) -> list[tuple[str, str, int, int]]:
  try:
    info = builder(name, data_dir).info.splits[split]
    record_bytes = max(1, int(info.num_bytes) // max(1, info.num_examples))
  except (ValueError, KeyError, TypeError):  # Sizes unknown (e.g. under tfds.testing.mock_data).
    record_bytes = _DEFAULT_RECORD_BYTES
  per_unit = max(1, unit_bytes // record_bytes)
  return [('tfds', '', start, min(start + per_unit, len(source)))
          for start in range(0, len(source), per_unit)]


def split_units(name: str, split: str, feature: str, data_dir: str,
                unit_bytes: int) -> list[tuple[str, str, int, int]]:
  """The units of a split as (kind, TFRecord file or '', first record, end record): record
  ranges of about `unit_bytes`, or one per TFRecord file read (TFDS's, slice applied)."""
  source = data_source(name, split, data_dir)
  _check_feature(name, feature, data_dir)
  units = (_tfrecord_units(name, split, data_dir) if source is None else
           _range_units(source, name, split, data_dir, unit_bytes))
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


def _decode(value, name: str, index: int) -> str:
  if isinstance(value, bytes):
    try:
      return value.decode('utf-8')
    except UnicodeDecodeError as e:
      raise UsageError(f"record {index} of TFDS dataset '{name}' is not valid UTF-8 ({e}); "
                       'choose another text feature') from None
  return str(value)


def read_texts(kind: str, name: str, file: str, split: str, feature: str, data_dir: str,
               start: int, stop: int) -> Iterator[str]:
  """The text feature of records [start, stop) of a unit made by split_units."""
  if kind == 'tfds':
    source = data_source(name, split, data_dir)
    for first in range(start, stop, _READ_CHUNK):
      keys = range(first, min(first + _READ_CHUNK, stop))
      for key, record in zip(keys, _get_records(source, keys)):
        yield _decode(record[feature], name, key)
    return
  features = builder(name, data_dir).info.features
  for index, raw in enumerate(_tfrecords(file, start, stop), start=start):
    yield _decode(features.deserialize_example_np(raw)[feature], name, index)


def identity(name: str, split: str, data_dir: str) -> dict:
  """What identifies the split's content: dataset, version, data_dir and size."""
  tfds_builder = builder(name, data_dir)
  source = data_source(name, split, data_dir)
  size = len(source) if source is not None else tfds_builder.info.splits[split].num_examples
  return {'name': name, 'split': split, 'data_dir': data_dir,
          'version': str(tfds_builder.info.version), 'num_examples': int(size)}


def read_records(name: str, split: str, data_dir: str) -> Iterator[dict]:
  """Every record of the split with all its features, decoded by TFDS (text as bytes)."""
  source = data_source(name, split, data_dir)
  if source is not None:
    for first in range(0, len(source), _READ_CHUNK):
      yield from _get_records(source, range(first, min(first + _READ_CHUNK, len(source))))
    return
  features = builder(name, data_dir).info.features
  for _, file, start, stop in _tfrecord_units(name, split, data_dir):
    for raw in _tfrecords(file, start, stop):
      yield features.deserialize_example_np(raw)
