"""Reading text files line by line, and plain corpora: one sentence or paragraph per line.

A plain corpus has a blank line between documents: the input format of google-research/electra's
build_pretraining_dataset.py (formats.py reads books and Wikipedia from the same lines). Files
must be UTF-8 (a .gz file is decompressed as it is read); a bad byte is reported with its file,
line and byte offset rather than silently replaced, because replaced text would quietly end up
in the vocabulary and the examples. Big files are read in byte ranges cut between documents, so
several workers can prepare one file.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
import glob
import gzip
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


def _decode_line(raw: bytes, path: str, line_number: int | None, line_offset: int) -> str:
  try:
    return raw.decode('utf-8')
  except UnicodeDecodeError as e:
    bad = raw[e.start:e.start + 4].hex(' ')
    where = f'line {line_number}, ' if line_number is not None else ''
    raise UsageError(
        f"'{path}' is not valid UTF-8: {where}byte offset {line_offset + e.start} "
        f'(bytes {bad}); convert it with `iconv -f <its encoding> -t utf-8 {path}`') from None


def open_binary(path: str):
  """Opens a corpus file for reading bytes, decompressing it if its name ends in .gz."""
  try:
    return gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')
  except OSError as e:
    raise UsageError(
        f"cannot read '{path}': {e.strerror}; check the path and its permissions") from None


def read_lines_at(path: str, start: int = 0,
                  stop: int | None = None) -> Iterator[tuple[int, str]]:
  """Yields (byte offset, line) for the lines of a file or of its bytes [start, stop), stripped.

  A range must begin at the start of a line (see line_ranges); offsets of a .gz file count
  uncompressed bytes, and only a whole .gz file (start 0) can be read.
  """
  with open_binary(path) as f:
    if start:
      f.seek(start)
    offset = start
    try:
      for line_number, raw in enumerate(f, start=1):
        if stop is not None and offset >= stop:
          break
        skip = len(_UTF8_BOM) if offset == 0 and raw.startswith(_UTF8_BOM) else 0
        # Line numbers are only known when reading from the start of the file.
        yield offset, _decode_line(raw[skip:], path, line_number if not start else None,
                                   offset + skip).strip()
        offset += len(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
      raise UsageError(f"cannot read '{path}' after byte {offset} ({e}); the file is damaged or "
                       'truncated: restore it or leave it out') from None


def read_lines(path: str, start: int = 0, stop: int | None = None) -> Iterator[str]:
  """The lines of read_lines_at without their offsets."""
  return (line for _, line in read_lines_at(path, start, stop))


def documents_of_lines(lines: Iterable[str]) -> Iterator[list[str]]:
  """Groups stripped lines into documents: a blank line ends one; no document is empty."""
  document = []
  for line in lines:
    if line:
      document.append(line)
    elif document:
      yield document
      document = []
  if document:
    yield document


def read_documents(files: Iterable[str]) -> Iterator[list[str]]:
  """Yields each document as its list of non-empty, stripped lines.

  A whitespace-only line ends a document, and so does the end of a file (documents never span
  files). Runs of blank lines do not produce empty documents.
  """
  for path in files:
    yield from documents_of_lines(read_lines(path))


def line_ranges(path: str, unit_bytes: int, *,
                ends_document: Callable[[bytes], bool] | None = None,
                starts_document: Callable[[bytes], bool] | None = None
                ) -> list[tuple[int, int | None]]:
  """Cuts a file into byte ranges of about `unit_bytes` that start at a line (or document).

  With `ends_document` a range starts only after a line it accepts (a blank line, '</doc>'),
  with `starts_document` only at a line it accepts (a title), so no document is cut in two;
  without either, at any line. Reading the ranges one after another gives the documents of
  the whole file. A .gz file cannot be entered in the middle and is one range. `None` as the
  end means the end of file.
  """
  size = os.path.getsize(path)
  if path.endswith('.gz') or size <= unit_bytes:
    return [(0, None)]
  starts = [0]
  with open(path, 'rb') as f:
    for nominal in range(unit_bytes, size, unit_bytes):
      if nominal <= starts[-1]:
        continue  # The previous cut already passed this point (a long document).
      f.seek(nominal - 1)
      f.readline()  # To the start of the first line at or after `nominal`.
      if ends_document or starts_document:
        while line := f.readline():  # To the start of the next document.
          if starts_document and starts_document(line):
            f.seek(-len(line), os.SEEK_CUR)
            break
          if ends_document and ends_document(line):
            break
      if f.tell() >= size:
        break
      starts.append(f.tell())
  return list(zip(starts, starts[1:] + [None]))
