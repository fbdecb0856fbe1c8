"""Reading text files line by line, and plain corpora: one sentence or paragraph per line.

A plain corpus has a blank line between documents: the input format of google-research/electra's
build_pretraining_dataset.py (formats.py reads books and Wikipedia from the same lines). Big
files are read in byte ranges cut between documents, so several workers can prepare one file.

A line ends at '\n', '\r\n' or a lone '\r' (old Mac files), as in Python's universal newlines, so
mixed endings read as the same lines. Files must be UTF-8 text (a .gz file is decompressed as it
is read). What is not is refused with one error that names the file, the line and the byte
offset, and reading stops there, rather than anything being silently replaced or dropped,
because such text would quietly end up in the vocabulary and the examples:
  - bytes that are not UTF-8 (e.g. Latin-1 text, or random bytes);
  - a NUL byte, which no text holds: the file is binary, or UTF-16/UTF-32 text;
  - a line longer than MAX_LINE_BYTES (16 MiB; a .jsonl record may be a whole book, up to
    sources.MAX_RECORD_BYTES): a file without line breaks, which would otherwise fill memory;
  - a damaged or truncated .gz file (the offset counts uncompressed bytes).
"""

import collections
from collections.abc import Callable, Iterable, Iterator, Sequence
import glob
import gzip
import itertools
import os
import zlib

from electra_jax.common.errors import UsageError

_UTF8_BOM = b'\xef\xbb\xbf'
# The longest line read: far past any sentence or paragraph, and short enough that a file
# without line breaks fails fast instead of filling memory.
MAX_LINE_BYTES = 16 << 20
_BLOCK_BYTES = 1 << 20  # Read at a time.


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
                         f'{files_glob_hint(pattern, matches)}')
      raise UsageError(f"no file matches '{pattern}' ({setting}); check the path or glob")
    files.update(dict.fromkeys(matched_files))
  return list(files)


def files_glob_hint(pattern: str, directories: Sequence[str]) -> str:
  """How to name the files in `directories` (what `pattern` matched): the glob, directly in them
  or one level down (WikiExtractor's AA/wiki_00), by extension, that matches the most files."""
  counts = collections.Counter()
  for depth in ('', '*'):  # a manifest beside folders of text loses to the text
    for d in directories:
      for f in glob.glob(os.path.join(glob.escape(d), depth, '*')):
        if os.path.isfile(f):
          counts[os.path.join(pattern, depth, '*' + os.path.splitext(f)[1])] += 1
  if not counts:
    return 'they hold no files, nor do their subdirectories; name the files to read'
  suggested, count = counts.most_common(1)[0]  # on a tie, the first counted: the shallower
  return f"name the files, e.g. '{suggested}' ({count} file{'s' if count > 1 else ''})"


def describe_files(files: Sequence[str]) -> str:
  """A short name for a list of files in messages: 'a.txt' or 'a.txt' (and 3 more files)."""
  if not files:
    return '(no files)'
  more = f' (and {len(files) - 1} more files)' if len(files) > 1 else ''
  return f"'{files[0]}'{more}"


def _where(line_number: int | None, offset: int) -> str:
  """'line 3, byte offset 57', or only the offset where the line number is not known."""
  return (f'line {line_number}, ' if line_number is not None else '') + f'byte offset {offset}'


def _decode_line(raw: bytes, path: str, line_number: int | None, line_offset: int) -> str:
  try:
    return raw.decode('utf-8')
  except UnicodeDecodeError as e:
    bad = raw[e.start:e.start + 4].hex(' ')
    raise UsageError(
        f"'{path}' is not valid UTF-8: {_where(line_number, line_offset + e.start)} "
        f'(bytes {bad}); convert it with `iconv -f <its encoding> -t utf-8 {path}`') from None


def open_binary(path: str):
  """Opens a corpus file for reading bytes, decompressing it if its name ends in .gz."""
  try:
    return gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')
  except OSError as e:
    raise UsageError(
        f"cannot read '{path}': {e.strerror}; check the path and its permissions") from None


def _raw_lines(f, limit: int) -> Iterator[bytes]:
  """A binary file's lines with their endings: '\n', '\r\n' or a lone '\r' (universal newlines).

  Read in blocks, so memory stays bounded: a line longer than `limit` is returned cut after
  more than `limit` bytes, without its ending, for the caller to refuse.
  """
  pending, held = [], 0  # The start of an unfinished line, in pieces: joined once, when it ends.
  while block := f.read(_BLOCK_BYTES):
    if pending and pending[-1].endswith(b'\r'):  # It ended, with this block's '\n' if it has one.
      if block.startswith(b'\n'):
        pending.append(b'\n')
        block = block[1:]
      yield b''.join(pending)
      pending, held = [], 0
      if not block:
        continue
    lines = block.splitlines(keepends=True)
    last = lines.pop()
    if lines:
      yield b''.join([*pending, lines[0]])
      pending, held = [], 0
      yield from itertools.islice(lines, 1, None)
    pending.append(last)
    held += len(last)
    if last.endswith(b'\n'):
      yield b''.join(pending)
      pending, held = [], 0
    elif held > limit:
      yield b''.join(pending)
      return
  if pending:
    yield b''.join(pending)


def read_lines_at(path: str, start: int = 0, stop: int | None = None,
                  max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
  """Yields (byte offset, line) for the lines of a file or of its bytes [start, stop), stripped.

  A range must begin at the start of a line (see line_ranges); offsets of a .gz file count
  uncompressed bytes, and only a whole .gz file (start 0) can be read. A line may end in
  '\n', '\r\n' or '\r'. Bytes that are not UTF-8 text (see the module doc) stop the reading
  with an error that names the file, the line and the byte offset.
  """
  with open_binary(path) as f:
    if start:
      f.seek(start)
    offset = start
    try:
      for line_number, raw in enumerate(_raw_lines(f, max_line_bytes), start=1):
        if stop is not None and offset >= stop:
          break
        # Line numbers are only known when reading from the start of the file.
        number = line_number if not start else None
        if len(raw) > max_line_bytes:
          raise UsageError(
              f"'{path}' has a line longer than {max_line_bytes >> 20} MiB at "
              f'{_where(number, offset)}: no sentence, paragraph or record is that long, so the '
              'file is not text in lines (a binary file, or text without line breaks); split it '
              'into lines or leave it out')
        if (nul := raw.find(b'\0')) >= 0:
          raise UsageError(
              f"'{path}' holds a NUL byte at {_where(number, offset + nul)}, which no text "
              'holds: it is a binary file, or UTF-16 text (convert that with `iconv -f UTF-16 -t '
              f'UTF-8 {path}`); convert it or leave it out')
        skip = len(_UTF8_BOM) if offset == 0 and raw.startswith(_UTF8_BOM) else 0
        yield offset, _decode_line(raw[skip:], path, number, offset + skip).strip()
        offset += len(raw)
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
      raise UsageError(f"cannot read '{path}' after byte {_position(f, offset)} ({e}); the file "
                       'is damaged or truncated: restore it or leave it out') from None


def _position(f, fallback: int) -> int:
  """How far a file was read (a .gz file: its uncompressed bytes decoded before the damage)."""
  try:
    return f.tell()
  except (OSError, ValueError):
    return fallback


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


def _skip_line(f) -> None:
  """Moves a binary file to the start of its next line, in bounded memory."""
  while (piece := f.readline(_BLOCK_BYTES)) and not piece.endswith(b'\n'):
    pass


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
      _skip_line(f)  # To the start of the first line at or after `nominal`.
      if ends_document or starts_document:
        while line := f.readline(_BLOCK_BYTES):  # To the start of the next document.
          if len(line) == _BLOCK_BYTES and not line.endswith(b'\n'):
            _skip_line(f)  # So long a line is no title, blank line or '</doc>'.
            continue
          if starts_document and starts_document(line):
            f.seek(-len(line), os.SEEK_CUR)
            break
          if ends_document and ends_document(line):
            break
      if f.tell() >= size:
        break
      starts.append(f.tell())
  return list(zip(starts, starts[1:] + [None]))
