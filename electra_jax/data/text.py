"""Reading plain-text corpora: one sentence or paragraph per line, a blank line between documents.

This is the input format of google-research/electra's build_pretraining_dataset.py. Files must
be UTF-8; a bad byte is reported with its file, line and byte offset rather than silently
replaced, because replaced text would quietly end up in the vocabulary and the examples.
"""

from collections.abc import Iterable, Iterator, Sequence
import glob
import os

from electra_jax.errors import UsageError

_UTF8_BOM = b'\xef\xbb\xbf'


def resolve_files(patterns: str | Sequence[str], setting: str = 'data.train_files') -> list[str]:
  """Expands comma-separated (or listed) paths and globs into a list of files.

  Each pattern's matches are sorted, so the order (and with it the data) does not depend on the
  file system; patterns keep the order they were given in and a file is listed once.
  `setting` names the config field the patterns came from, for error messages.
  """
  if isinstance(patterns, str):
    patterns = patterns.split(',')
  patterns = [p.strip() for p in patterns if p.strip()]
  if not patterns:
    raise UsageError(f'{setting} names no file; pass --config.{setting}=PATH_OR_GLOB')
  files = {}  # An insertion-ordered set.
  for pattern in patterns:
    matches = sorted(glob.glob(os.path.expanduser(pattern)))
    matched_files = [m for m in matches if os.path.isfile(m)]
    if not matched_files:
      if matches:  # Only directories matched: a common slip, so say so.
        raise UsageError(f"'{pattern}' ({setting}) matches only directories; "
                         f"name the files, e.g. '{os.path.join(pattern, '*.txt')}'")
      raise UsageError(f"no file matches '{pattern}' ({setting}); check the path or glob")
    files.update(dict.fromkeys(matched_files))
  return list(files)


def describe_files(files: Sequence[str]) -> str:
  """A short name for a list of files in messages: 'a.txt' or 'a.txt' (and 3 more files)."""
  if not files:
    return '(no files)'
  more = f' (and {len(files) - 1} more files)' if len(files) > 1 else ''
  return f"'{files[0]}'{more}"


def _decode_line(raw: bytes, path: str, line_number: int, line_offset: int) -> str:
  try:
    return raw.decode('utf-8')
  except UnicodeDecodeError as e:
    bad = raw[e.start:e.start + 4].hex(' ')
    raise UsageError(
        f"'{path}' is not valid UTF-8: line {line_number}, byte offset {line_offset + e.start} "
        f'(bytes {bad}); convert it with `iconv -f <its encoding> -t utf-8 {path}`') from None


def _read_lines(path: str) -> Iterator[str]:
  """Yields the decoded lines of one file, without line endings or surrounding whitespace."""
  try:
    f = open(path, 'rb')
  except OSError as e:
    raise UsageError(
        f"cannot read '{path}': {e.strerror}; check the path and its permissions") from None
  with f:
    offset = 0  # Byte offset of the current line in the file, for error messages.
    for line_number, raw in enumerate(f, start=1):
      skip = len(_UTF8_BOM) if line_number == 1 and raw.startswith(_UTF8_BOM) else 0
      yield _decode_line(raw[skip:], path, line_number, offset + skip).strip()
      offset += len(raw)


def read_documents(files: Iterable[str]) -> Iterator[list[str]]:
  """Yields each document as its list of non-empty, stripped lines.

  A whitespace-only line ends a document, and so does the end of a file (documents never span
  files). Runs of blank lines do not produce empty documents.
  """
  for path in files:
    document = []
    for line in _read_lines(path):
      if line:
        document.append(line)
      elif document:
        yield document
        document = []
    if document:
      yield document
