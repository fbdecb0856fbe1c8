"""Corpus sources: text files, JSON Lines files and TFDS datasets, cut into units of work.

A source is one item of the comma-separated `data.sources` (or `data.eval_sources`):

  tfds:NAME[/CONFIG][:VERSION][:SPLIT[:FEATURE]]   a TFDS dataset, e.g. tfds:wikipedia/20230601.en
                                                   (split 'train', feature 'text' by default;
                                                   slices like train[:99%] work)
  PATH_OR_GLOB                                     .txt / .txt.gz / other text files, one sentence
                                                   or paragraph per line, blank line between
                                                   documents; .jsonl / .jsonl.gz, one document
                                                   per line in the field data.text_field

Either may end in @WEIGHT to make the sources a weighted mixture (weights on all or none).

Preparation reads a source as a list of units, each a stretch of documents that one worker
tokenizes and packs into one shard: a ~64 MB byte range of a text file (cut between documents),
a whole .gz file, or a range of a TFDS split. The units, and so the shards and the example ids,
depend only on the data, never on the number of workers.
"""

from collections.abc import Iterator, Sequence
import dataclasses
import json
import os
import re

import numpy as np

from electra_jax.data import text
from electra_jax.data import tfds_source
from electra_jax.data import vocab as vocab_lib
from electra_jax.errors import UsageError

UNIT_BYTES = 64 << 20  # Text per unit of work (and per shard) when a file can be cut.
# Vocabulary sampling stops reading once it has seen this many times the lines it keeps.
_SAMPLE_OVERREAD = 10

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
  split: str = ''
  feature: str = ''


@dataclasses.dataclass(frozen=True)
class Unit:
  """A stretch of one source's documents that one worker reads (picklable for the workers)."""
  kind: str                   # 'text', 'jsonl', 'tfds' (random-access split) or 'tfrecord'
  path: str                   # the file; for 'tfds' and 'tfrecord' the dataset name
  start: int = 0              # byte offset, or first record
  stop: int | None = None     # end offset or record (exclusive); None = to the end
  split: str = ''             # tfds: the split
  field: str = ''             # jsonl: the JSON field; tfds: the feature
  data_dir: str = ''          # tfds: the data_dir ('' = TFDS's default)
  file: str = ''              # tfrecord: the TFRecord file


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


def parse_sources(value: str, setting: str = 'data.sources') -> list[Source]:
  """The sources of a comma-separated spec; `setting` names the config field for messages."""
  sources = []
  for item in (i.strip() for i in value.split(',')):
    if not item:
      continue
    spec, weight = _parse_weight(item, setting)
    if not spec.startswith('tfds:'):
      sources.append(Source(spec=spec, weight=weight, setting=setting))
      continue
    match = _TFDS_SPEC.match(spec)
    if not match:
      raise UsageError(f"cannot parse '{spec}' in {setting}; write tfds:NAME[/CONFIG][:SPLIT"
                       '[:FEATURE]], e.g. tfds:wikipedia/20230601.en:train:text')
    name = match['name'] + (f":{match['version']}" if match['version'] else '')
    sources.append(Source(spec=spec, weight=weight, setting=setting, tfds_name=name,
                          split=match['split'] or 'train', feature=match['feature'] or 'text'))
  if not sources:
    raise UsageError(f'{setting} names no source; pass --config.{setting}=PATH_OR_GLOB or '
                     'tfds:NAME')
  weighted = [s.weight is not None for s in sources]
  if any(weighted) and not all(weighted):
    raise UsageError(f'{setting} gives weights to some sources but not to others; give every '
                     'source an @WEIGHT (a mixture) or none (one concatenated corpus)')
  return sources


def from_config(data_config, split: str) -> list[Source] | None:
  """The sources of 'train' or 'eval' in the config's data section, or None if it names none.

  data.train_files / data.eval_files are the simple path: text files, concatenated.
  """
  files_field = f'{split}_files'
  sources_field = 'sources' if split == 'train' else 'eval_sources'
  files, specs = data_config[files_field], data_config[sources_field]
  if files and specs:
    raise UsageError(f'set config.data.{files_field} or data.{sources_field}, not both')
  if specs:
    return parse_sources(specs, setting=f'data.{sources_field}')
  if files:
    return [Source(spec=p.strip(), weight=None, setting=f'data.{files_field}')
            for p in files.split(',') if p.strip()]
  return None


def _is_jsonl(path: str) -> bool:
  return path.removesuffix('.gz').endswith('.jsonl')


def _file_units(source: Source, text_field: str, unit_bytes: int) -> list[Unit]:
  units = []
  for path in text.resolve_files(source.spec, setting=source.setting):
    kind = 'jsonl' if _is_jsonl(path) else 'text'
    for start, stop in text.line_ranges(path, unit_bytes, by_document=kind == 'text'):
      units.append(Unit(kind=kind, path=path, start=start, stop=stop,
                        field=text_field if kind == 'jsonl' else ''))
  return units


def source_units(source: Source, *, tfds_data_dir: str = '', text_field: str = 'text',
                 unit_bytes: int = UNIT_BYTES) -> list[Unit]:
  """The units of work of one source, in corpus order."""
  if not source.tfds_name:
    return _file_units(source, text_field, unit_bytes)
  return [Unit(kind=kind, path=source.tfds_name, start=start, stop=stop, split=source.split,
               field=source.feature, data_dir=tfds_data_dir, file=file)
          for kind, file, start, stop in tfds_source.split_units(
              source.tfds_name, source.split, source.feature, tfds_data_dir, unit_bytes)]


def _text_of_record(record: str, path: str, field: str, offset: int) -> str:
  try:
    value = json.loads(record)[field]
  except json.JSONDecodeError as e:
    raise UsageError(f"'{path}' holds a line that is not JSON at byte offset {offset} ({e.msg}); "
                     'a .jsonl file needs one JSON object per line') from None
  except (KeyError, TypeError):
    raise UsageError(f"'{path}' holds a record without a string field '{field}' at byte offset "
                     f'{offset}; set --config.data.text_field to the field with the text') from None
  if not isinstance(value, str):
    raise UsageError(f"field '{field}' of the record at byte offset {offset} of '{path}' is "
                     f'{type(value).__name__}, not text; set --config.data.text_field')
  return value


def text_to_document(body: str) -> list[str]:
  """A document's non-empty stripped lines (a JSON or TFDS text holds a whole document)."""
  return [line for line in (raw.strip() for raw in body.splitlines()) if line]


def _jsonl_documents(unit: Unit) -> Iterator[list[str]]:
  for offset, line in text.read_lines_at(unit.path, unit.start, unit.stop):
    if line:
      document = text_to_document(_text_of_record(line, unit.path, unit.field, offset))
      if document:
        yield document


def read_unit(unit: Unit) -> Iterator[list[str]]:
  """Yields the documents of a unit, each as its list of non-empty lines."""
  if unit.kind == 'text':
    return text.documents_of_lines(text.read_lines(unit.path, unit.start, unit.stop))
  if unit.kind == 'jsonl':
    return _jsonl_documents(unit)
  texts = tfds_source.read_texts(unit.kind, unit.path, unit.file, unit.split, unit.field,
                                 unit.data_dir, unit.start, unit.stop)
  return (document for document in map(text_to_document, texts) if document)


def identity(source: Source, units: Sequence[Unit]) -> dict:
  """What the prepared data of a source was made from, to tell when it must be remade."""
  record = {'spec': source.spec, 'weight': source.weight}
  if source.tfds_name:
    record['tfds'] = tfds_source.identity(source.tfds_name, source.split, units[0].data_dir)
    return record
  record['files'] = []
  for path in dict.fromkeys(u.path for u in units):  # Each file once, in order.
    stat = os.stat(path)
    record['files'].append({'path': os.path.abspath(path), 'bytes': stat.st_size,
                            'mtime_ns': stat.st_mtime_ns})
  return record


def describe(sources: Sequence[Source]) -> str:
  return ', '.join(s.spec + (f'@{s.weight:g}' if s.weight is not None else '') for s in sources)


def sample_lines(units: Sequence[Unit], max_lines: int, seed: int) -> list[str]:
  """A random sample of at most `max_lines` lines of the units' text, in bounded memory and time.

  Units are read in a random order (drawn from `seed`) through a reservoir sample; reading
  stops once _SAMPLE_OVERREAD x max_lines lines have passed, so on a huge corpus the sample
  comes from a random subset of its ~64 MB units and on a small one from all of its text.
  """
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
