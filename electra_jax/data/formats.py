"""Corpus file formats (docs/data.md): documents, their sentences, and 'auto' detection.

A book without its START or END line is refused (its header or license would be trained on as
text), and so is text outside <doc> ... </doc>. A <doc> without </doc> is kept as if closed and
counted ('unclosed_docs'): a shard cut short by an interrupted copy has lost one end tag, not its
text, and refusing it would drop thousands of good articles over one line.
"""

import collections
from collections.abc import Callable, Iterable, Iterator
import functools
import os
import re
import zlib

from absl import logging

from electra_jax.data import text
from electra_jax.common.errors import UsageError

FORMATS = ('lines', 'gutenberg', 'wikiextractor', 'wikitext')
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


def _head_lines(path: str) -> list[str]:
  with text.open_binary(path) as f:
    try:
      head = f.read(_HEAD_BYTES)
    except (OSError, EOFError, zlib.error) as e:  # A .gz file damaged near its start.
      raise UsageError(f"cannot read '{path}' at its start ({e}); the file is damaged or "
                       'truncated: restore it or leave it out') from None
  return [line.decode('utf-8', 'replace').strip() for line in
          head.removeprefix(b'\xef\xbb\xbf').splitlines()]  # Endings as text.py reads them.


def _detect(path: str) -> tuple[str, str]:
  """(format, why) from the file's first bytes."""
  lines = _head_lines(path)
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
