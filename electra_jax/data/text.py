"""Text files read line by line (universal newlines, .gz and .zst too), and plain corpora in byte
ranges.

Bytes that are not UTF-8, a NUL byte (binary or UTF-16), a line over MAX_LINE_BYTES or a damaged
.gz or .zst are refused naming the file, line and offset, never replaced or dropped: such text
would quietly end up in the vocabulary and the examples.
"""

import collections
from collections.abc import Callable, Iterable, Iterator, Sequence
import functools
import glob
import gzip
import importlib
import itertools
import os
import zlib

from electra_jax.common.errors import UsageError

_UTF8_BOM = b'\xef\xbb\xbf'
# The longest line read: far past any sentence or paragraph, and short enough that a file
# without line breaks fails fast instead of filling memory.
MAX_LINE_BYTES = 16 << 20
_BLOCK_BYTES = 1 << 20  # Read at a time.
# Compressed files are read whole: neither format can be entered mid-stream.
COMPRESSED = ('.gz', '.zst')
_ZSTD_READ_BYTES = 1 << 18  # Compressed bytes fed at a time: text inflates ~4x, rarely 50x.


def optional_module(name: str, needed_for: str):
  """The module `name` (pyarrow, zstandard, datasets: the 'corpora' extra), imported only where
  a source needs it, or one error that says how to install it."""
  try:
    return importlib.import_module(name)
  except ImportError as e:
    raise UsageError(f"{needed_for} needs the Python package '{name}' ({e}); `pip install {name}`"
                     ", or `pip install 'electra_jax[corpora]'` for every corpus format") from None


def resolve_files(patterns: str | Sequence[str], setting: str = 'data.train_files') -> list[str]:
  """The files of comma-separated (or listed) paths and globs, each once, in the order given.

  Each glob's matches are sorted, so the data does not depend on the file system's order.
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
  """The glob, in `directories` or one level down (WikiExtractor's AA/wiki_00), by extension,
  that matches the most files: how to name what `pattern` meant."""
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
  return (f'line {line_number}, ' if line_number is not None else '') + f'byte offset {offset}'


def _zstd_blocks(f, zstandard) -> Iterator[bytes]:
  """The decompressed bytes of a .zst file's frames, one after another. A frame cut short raises
  EOFError: zstandard's stream reader would end there silently, as if the file were whole."""
  frame = None  # The frame being decompressed; None between frames.
  while data := f.read(_ZSTD_READ_BYTES):
    while data:
      frame = frame or zstandard.ZstdDecompressor().decompressobj()
      if block := frame.decompress(data):
        yield block
      data, frame = (frame.unused_data, None) if frame.eof else (b'', frame)
  if frame is not None:
    raise EOFError('the file ends inside a zstd frame')


def _open_blocks(path: str, start: int, size: int):
  """(the open file, its bytes from `start` in blocks of about `size`, decompressed where its
  name ends in .gz or .zst (read from the start), the errors that mean the file is damaged)."""
  zstandard = optional_module('zstandard', f"reading '{path}'") if path.endswith('.zst') else None
  try:
    f = gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')
  except OSError as e:
    raise UsageError(
        f"cannot read '{path}': {e.strerror}; check the path and its permissions") from None
  damage = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError
  if zstandard:
    return f, _zstd_blocks(f, zstandard), (*damage, zstandard.ZstdError)
  f.seek(start)
  return f, iter(functools.partial(f.read, size), b''), damage


def _damaged(path: str, where: str, error: Exception) -> UsageError:
  return UsageError(f"cannot read '{path}' {where} ({error}); the file is damaged or truncated: "
                    'restore it or leave it out')


def read_blocks(path: str, start: int = 0) -> Iterator[bytes]:
  """A corpus file's bytes from `start` in blocks, decompressed (.gz, .zst: from the start)."""
  f, blocks, damage = _open_blocks(path, start, _BLOCK_BYTES)
  done = start  # Bytes read (decompressed) so far.
  with f:
    try:
      for block in blocks:
        yield block
        done += len(block)
    except damage as e:
      # gzip's position counts what it decoded before the damage; a .zst file's is compressed.
      where = done if path.endswith('.zst') else _position(f, done)
      raise _damaged(path, f'after byte {where}' if where else 'at its start', e) from None


def _position(f, fallback: int) -> int:
  try:
    return f.tell()
  except (OSError, ValueError):
    return fallback


def read_head(path: str, size: int) -> bytes:
  """The first `size` (decompressed) bytes of a corpus file, or all of a shorter one."""
  f, blocks, damage = _open_blocks(path, 0, size)
  head = b''
  with f:
    try:
      while len(head) < size and (block := next(blocks, b'')):
        head += block
    except damage as e:
      raise _damaged(path, 'at its start', e) from None
  return head[:size]


def _raw_lines(blocks: Iterable[bytes], limit: int) -> Iterator[bytes]:
  """The lines of a binary stream with their endings: a line over `limit` bytes comes cut short,
  without its ending, for the caller to refuse (memory stays bounded)."""
  pending, held = [], 0  # The start of an unfinished line, in pieces: joined once, when it ends.
  for block in blocks:
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
  """(byte offset, stripped line) of a file's bytes [start, stop), which begin at a line.

  A .gz or .zst file is read whole (start 0), its offsets counting uncompressed bytes.
  """
  offset = start
  for line_number, raw in enumerate(_raw_lines(read_blocks(path, start), max_line_bytes), start=1):
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
    try:
      line = raw[skip:].decode('utf-8')
    except UnicodeDecodeError as e:
      bad = raw[skip + e.start:skip + e.start + 4].hex(' ')
      raise UsageError(
          f"'{path}' is not valid UTF-8: {_where(number, offset + skip + e.start)} "
          f'(bytes {bad}); convert it with `iconv -f <its encoding> -t utf-8 {path}`') from None
    yield offset, line.strip()
    offset += len(raw)


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
  """Each document of the files as its non-empty stripped lines; none spans two files."""
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
  """A file cut into byte ranges of about `unit_bytes`, (start, stop or None for the end).

  A range starts at a line: where given, after one `ends_document` accepts ('</doc>') or at one
  `starts_document` accepts (a title), so no document is cut in two. A .gz or .zst file is one
  range.
  """
  size = os.path.getsize(path)
  if path.endswith(COMPRESSED) or size <= unit_bytes:
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
