"""Corpus file formats (docs/data.md): text files' documents, their sentences and 'auto'
detection; and files of records (JSON lines, parquet), one document in each record's text field.
What is refused, and what is read past (a <doc> without </doc>): docs/data.md, docs/reliability.md.
"""

import collections
from collections.abc import Callable, Iterable, Iterator
import functools
import importlib
import json
import os
import re

from absl import logging

from electra_jax.data import text
from electra_jax.common.errors import UsageError

FORMATS = ('lines', 'gutenberg', 'wikiextractor', 'wikitext')
# JSON lines, also as Dolma (.json.gz), DCLM, the Pile and RedPajama (.jsonl.zst) publish them.
_JSONL = re.compile(r'\.jsonl(\.gz|\.zst)?$|\.json\.(gz|zst)$')
# A JSON record may hold a whole book (a dictionary or a collected works runs to tens of MB), so
# its line may be longer than a text file's (text.MAX_LINE_BYTES).
MAX_RECORD_BYTES = 256 << 20
_ROWS_PER_READ = 1024  # Parquet rows in memory at a time.
_HEAD_BYTES = 8192  # Read to detect a format: a Gutenberg header is 1-2 KB.

_START = re.compile(r'\*{3}\s*START OF\b', re.IGNORECASE)
_END = re.compile(r'\*{3}\s*END OF\b', re.IGNORECASE)
# Paragraphs at a body's ends that are Project Gutenberg's, not the book's: transcriber
# credits and notes after START ("Produced by ...", "Note: Project Gutenberg also has ...")
# and an "End of the Project Gutenberg EBook of ..." line before END.
_CREDITS = re.compile(r'(produced|transcribed|typed|prepared) (by|from)\b|'
                      r'(this )?e-?(text|book) (was )?(prepared|produced|transcribed)|'
                      r'.*project gutenberg', re.IGNORECASE)
_CREDIT_PARAGRAPHS = 3  # Only the body's first paragraphs may be credits.
_TRAILER = re.compile(r"end of (the )?project gutenberg", re.IGNORECASE)
_WHY_GUTENBERG = ("data.text_format is 'gutenberg', or 'auto' and its header names Project "
                  'Gutenberg')
# Control characters (U+007F and U+000C stray in some books) would reach the vocabulary.
_CONTROLS = dict.fromkeys([*range(32), *range(127, 160)], ' ')

# Words whose '.' rarely ends a sentence before a capital. 'No' and 'etc' are left out: "No."
# is a whole sentence in dialogue, and "etc." ends sentences about as often as not.
ABBREVIATIONS = frozenset("""
    mr mrs ms messrs mme mlle dr prof rev hon st jr sr esq gen col capt lt sgt maj adm gov sen
    rep mt ft vs cf viz vol vols ch chap fig figs pp jan feb apr aug sept oct nov dec inc ltd
    corp bros""".split())
# A candidate end: punctuation, closers, whitespace, then (looking ahead) openers and a letter.
_SENTENCE_END = re.compile(r'''([.!?]+)["')\]’”»]*\s+(?=["'(\[‘“«]*([^\W\d_]))''')
_OPENERS = '"\'([‘“«'


def _ends_sentence(paragraph: str, match: re.Match) -> bool:
  punctuation, next_letter = match.groups()
  if not next_letter.isupper():
    return False
  if punctuation != '.':
    return True  # '!', '?', '...': no abbreviation ends so.
  word = paragraph[paragraph.rfind(' ', 0, match.start()) + 1:match.start()].lstrip(_OPENERS)
  if len(word) == 1 and word.isupper():
    return False  # An initial.
  return '.' not in word and word.lower() not in ABBREVIATIONS


def split_sentences(paragraph: str) -> list[str]:
  """The sentences of a paragraph, stripped, in order; none is empty.

  A few ends are missed ("U.S." ending a sentence) and a few found falsely (an unknown
  abbreviation): packing needs lines of sentence size, not a parse.
  """
  sentences, start = [], 0
  for match in _SENTENCE_END.finditer(paragraph):
    if _ends_sentence(paragraph, match):
      sentences.append(paragraph[start:match.end()].strip())
      start = match.end()
  sentences.append(paragraph[start:].strip())
  return [s for s in sentences if s]


def _is_wikitext_title(line: str) -> bool:
  """' = Title = ', exactly one '=' on each side ('= = Section = =' is a heading)."""
  return (line.startswith('= ') and line.endswith(' =') and len(line) > 4 and
          not line.startswith('= =') and not line.endswith('= ='))


def _is_wikitext_heading(line: str) -> bool:
  return line.startswith('= =') and line.endswith('= =')


def _paragraph_sentences(paragraphs: Iterable[str]) -> list[str]:
  return [s for paragraph in paragraphs for s in split_sentences(paragraph.translate(_CONTROLS))]


def _gutenberg_body(path: str) -> Iterator[str]:
  """The lines between the START marker (which may wrap onto more lines) and the END marker."""
  lines = text.read_lines(path)
  for line in lines:
    if _START.match(line):
      break
  else:
    raise UsageError(
        f"'{path}' is read as a Project Gutenberg book ({_WHY_GUTENBERG}) but has no "
        "'*** START OF ...' line, so its text cannot be told from its header; restore that "
        'line, or read the file as plain text with --config.data.text_format=lines')
  if not line.endswith('***'):
    for line in lines:  # The marker goes on to the blank line after it.
      if not line:
        break
  for line in lines:
    if _END.match(line):
      return
    yield line
  raise UsageError(
      f"'{path}' is read as a Project Gutenberg book ({_WHY_GUTENBERG}) but has no "
      "'*** END OF ...' line, so its license cannot be told from its text; restore that line "
      '(or cut the license off and read the file with --config.data.text_format=lines)')


def gutenberg_documents(path: str) -> list[list[str]]:
  """A book's body as one document of sentences (none if the body is empty)."""
  # Hard-wrapped lines joined back into paragraphs; a blank line ends one.
  paragraphs = [' '.join(lines) for lines in text.documents_of_lines(_gutenberg_body(path))]
  first = 0
  while first < min(len(paragraphs), _CREDIT_PARAGRAPHS) and _CREDITS.match(paragraphs[first]):
    first += 1
  last = len(paragraphs)
  while last > first and _TRAILER.match(paragraphs[last - 1]):
    last -= 1
  document = _paragraph_sentences(paragraphs[first:last])
  return [document] if document else []


def wikiextractor_documents(path: str, start: int = 0, stop: int | None = None,
                            notes: collections.Counter | None = None) -> Iterator[list[str]]:
  """Each <doc> as a document of sentences, without its title line; unclosed ones are noted."""
  notes = collections.Counter() if notes is None else notes
  document, title_pending = None, False
  for offset, line in text.read_lines_at(path, start, stop):
    if line.startswith('<doc ') and line.endswith('>'):
      if document is not None:  # The previous <doc> has no </doc>.
        notes['unclosed_docs'] += 1
        if document:
          yield document
      document, title_pending = [], True
    elif line == '</doc>':
      if document:
        yield document
      document = None
    elif not line:
      continue
    elif document is None:
      raise UsageError(
          f"'{path}' holds text outside <doc ...> ... </doc> at byte offset {offset}, so it is "
          'not WikiExtractor output; set --config.data.text_format to its format (e.g. lines)')
    elif title_pending:
      title_pending = False
    else:
      document.extend(_paragraph_sentences([line]))
  if document is not None:  # A shard cut off inside its last <doc>: keep what it holds.
    notes['unclosed_docs'] += 1
    if document:
      yield document


def wikitext_documents(path: str, start: int = 0, stop: int | None = None) -> Iterator[list[str]]:
  """Each ' = Title = ' article as a document of sentences, without title and headings."""
  document = []
  for line in text.read_lines(path, start, stop):
    if _is_wikitext_title(line):
      if document:
        yield document
      document = []
    elif line and not _is_wikitext_heading(line):
      document.extend(_paragraph_sentences([line]))
  if document:
    yield document


def read_documents(path: str, text_format: str, start: int = 0, stop: int | None = None,
                   notes: collections.Counter | None = None) -> Iterator[list[str]]:
  """The documents of a file's byte range [start, stop) in `text_format`, as lists of lines."""
  if text_format == 'lines':
    return text.documents_of_lines(text.read_lines(path, start, stop))
  if text_format == 'gutenberg':
    return iter(gutenberg_documents(path))
  if text_format == 'wikiextractor':
    return wikiextractor_documents(path, start, stop, notes)
  return wikitext_documents(path, start, stop)


# Where a range of a file may begin: after a line `ends` accepts or at one `starts` accepts.
_BOUNDARIES: dict[str, tuple[Callable[[bytes], bool] | None, Callable[[bytes], bool] | None]] = {
    'lines': (lambda line: not line.strip(), None),
    'wikiextractor': (lambda line: line.strip() == b'</doc>', None),
    'wikitext': (None, lambda line: _is_wikitext_title(line.strip().decode('utf-8', 'replace'))),
}


def byte_ranges(path: str, text_format: str, unit_bytes: int) -> list[tuple[int, int | None]]:
  """The file cut into ranges of about `unit_bytes` that start at documents; a book is one."""
  if text_format == 'gutenberg':
    return [(0, None)]  # Its body is known only from the START and END lines.
  ends, starts = _BOUNDARIES[text_format]
  return text.line_ranges(path, unit_bytes, ends_document=ends, starts_document=starts)


def _detect(path: str) -> tuple[str, str]:
  """(format, why) from the file's first bytes."""
  head = text.read_head(path, _HEAD_BYTES).removeprefix(b'\xef\xbb\xbf')
  lines = [line.decode('utf-8', 'replace').strip()
           for line in head.splitlines()]  # Endings as text.py reads them.
  first = next((line for line in lines if line), '')
  if first.startswith('<doc ') and first.endswith('>'):
    return 'wikiextractor', 'opens with <doc ...>'
  if _is_wikitext_title(first):
    return 'wikitext', "opens with a ' = Title = ' line"
  if 'project gutenberg' in first.lower() or any(_START.match(line) for line in lines):
    return 'gutenberg', 'opens with a Project Gutenberg header'
  # A part of a WikiText file cut mid-article opens with a paragraph; its headings still show.
  if any(_is_wikitext_title(line) or _is_wikitext_heading(line) for line in lines):
    return 'wikitext', "holds ' = Title = ' or ' = = Section = = ' lines"
  return 'lines', 'no other format recognized'


@functools.lru_cache(maxsize=None)
def _detected(path: str, size: int, mtime_ns: int) -> tuple[str, str]:
  del size, mtime_ns  # Only the cache key: a changed file is detected again.
  found, why = _detect(path)
  logging.info("text format of '%s': %s (auto: %s)", path, found, why)
  return found, why


def file_format(path: str, text_format: str) -> str:
  """The format a text file is read in: `text_format`, or the detected one for 'auto'."""
  if text_format != 'auto':
    return text_format
  stat = os.stat(path)
  return _detected(path, stat.st_size, stat.st_mtime_ns)[0]


# Records: a JSON lines or parquet file holds one document per record, in its text field.


def is_jsonl(path: str) -> bool:
  return bool(_JSONL.search(path))


def checked_text(value, field: str, where: str) -> str:
  """`value` if it is text; else one error naming the field and `where` (the record, the row)."""
  if not isinstance(value, str):
    kind = 'null' if value is None else type(value).__name__
    raise UsageError(f"field '{field}' of {where} is {kind}, not text; set "
                     '--config.data.text_field to the field with the text')
  return value


def check_text_column(where: str, field: str, columns: list[str], kind, is_text: bool) -> None:
  """Refuses a table (parquet, a dataset) whose column `field` is missing or not of strings."""
  if field not in columns:
    raise UsageError(f"{where} has no column '{field}' (its columns: {', '.join(columns)}); set "
                     '--config.data.text_field to the column with the text')
  if not is_text:
    raise UsageError(f"column '{field}' of {where} holds {kind}, not text (its columns: "
                     f"{', '.join(columns)}); set --config.data.text_field to the column with "
                     'the text')


def jsonl_texts(path: str, field: str, start: int = 0, stop: int | None = None) -> Iterator[str]:
  """The text field of each record of a JSON lines file's byte range [start, stop)."""
  for offset, line in text.read_lines_at(path, start, stop, MAX_RECORD_BYTES):
    if not line:
      continue
    try:
      value = json.loads(line)[field]
    except json.JSONDecodeError as e:
      raise UsageError(f"'{path}' holds a line that is not JSON at byte offset {offset} "
                       f'({e.msg}); a .jsonl file needs one JSON object per line') from None
    except (KeyError, TypeError):
      raise UsageError(f"'{path}' holds a record without a string field '{field}' at byte "
                       f'offset {offset}; set --config.data.text_field to the field with the '
                       'text') from None
    yield checked_text(value, field, f"the record at byte offset {offset} of '{path}'")


def _parquet_file(path: str):
  """(the open file, pyarrow): an optional package, imported only where parquet is read."""
  pyarrow = text.optional_module('pyarrow', f"reading '{path}'")
  importlib.import_module('pyarrow.parquet')
  try:
    return pyarrow.parquet.ParquetFile(path), pyarrow
  except (pyarrow.ArrowException, OSError) as e:
    raise UsageError(f"cannot read '{path}' as parquet ({e}); the file is damaged or not "
                     'parquet: restore it or leave it out') from None


def row_group_ranges(path: str, field: str, unit_bytes: int) -> list[tuple[int, int]]:
  """A parquet file's row groups as ranges [first, end) of about `unit_bytes` of text each."""
  file, pyarrow = _parquet_file(path)
  schema, metadata, types = file.schema_arrow, file.metadata, pyarrow.types
  kind = schema.field(field).type if field in schema.names else None
  check_text_column(f"'{path}'", field, schema.names, kind,
                    kind is not None and (types.is_string(kind) or types.is_large_string(kind)))
  column = [metadata.schema.column(j).path for j in range(metadata.num_columns)].index(field)
  ranges, first, held = [], 0, 0
  for group in range(metadata.num_row_groups):
    held += metadata.row_group(group).column(column).total_uncompressed_size
    if held >= unit_bytes:
      ranges.append((first, group + 1))
      first, held = group + 1, 0
  if first < metadata.num_row_groups or not ranges:  # A file without rows is one empty unit.
    ranges.append((first, metadata.num_row_groups))
  return ranges


def parquet_texts(path: str, field: str, first: int, end: int) -> Iterator[str]:
  """The column `field` of a parquet file's row groups [first, end), _ROWS_PER_READ at a time."""
  file, pyarrow = _parquet_file(path)
  row = sum(file.metadata.row_group(g).num_rows for g in range(first))
  batches = file.iter_batches(_ROWS_PER_READ, row_groups=range(first, end), columns=[field])
  while True:
    try:
      batch = next(batches, None)
    except (pyarrow.ArrowException, OSError) as e:
      raise UsageError(f"cannot read '{path}' after row {row} ({e}); the file is damaged: "
                       'restore it or leave it out') from None
    if batch is None:
      return
    for value in batch.column(0).to_pylist():
      yield checked_text(value, field, f"row {row} of '{path}'")
      row += 1
