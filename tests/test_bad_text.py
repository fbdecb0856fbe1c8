"""Bad text in a corpus: every case ends in its documented behaviour, never in a traceback.

Refused, with one error that names the file and where in it (text.py, formats.py): random
bytes, NUL bytes (binary or UTF-16 files), a 50 MB line, a truncated or damaged .gz, a
Gutenberg book without its END line, lines too long to train a vocabulary on. A refused
preparation changes nothing already prepared, even with --overwrite and a new vocabulary.
Read past, and counted in the preparation summary: an empty file among good ones, a <doc>
without </doc>. Mixed line endings read as the same lines.
"""

import collections
import gzip
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, error_line, load_config, tree_digest
from electra_jax.common import cli
from electra_jax.data import formats, preparation, sources, store
from electra_jax.common.errors import UsageError
from test_finetune import sentences, write_vocab

BOOK = ('The Project Gutenberg EBook of A Test, by Nobody\n\n'
        '*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***\n\n'
        'It was a dark night. The cat sat on the mat.\n\nThe dog ran fast.\n\n'
        '*** END OF THIS PROJECT GUTENBERG EBOOK A TEST ***\n\nThe license.\n')
WIKI = ('<doc id="1" url="u1" title="Cat">\nCat\n\nThe cat sat on the mat.\n</doc>\n'
        '<doc id="2" url="u2" title="Dog">\nDog\n\nThe dog ran fast. It was good.\n</doc>\n')


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """Good text files, two vocabularies, and a directory prepared from the files."""
  root = tmp_path_factory.mktemp('bad_text')
  write_vocab(root / 'vocab.txt')
  (root / 'other_vocab.txt').write_text((root / 'vocab.txt').read_text() + 'extra\n')
  rng = np.random.default_rng(0)
  good = []
  for i in range(3):
    good.append(root / f'good_{i}.txt')
    good[-1].write_text('\n\n'.join('\n'.join(sentences(rng, 5)) for _ in range(20)) + '\n')
  prepared = root / 'prepared'
  preparation.prepare_dataset(config_for(good, root / 'vocab.txt', eval_files=good[:1]),
                               str(prepared))
  return root, good, prepared


def config_for(files, vocab=None, eval_files=()):
  config = load_config('tiny')
  config.max_seq_length = 32
  config.data.update(train_files=','.join(map(str, files)),
                     eval_files=','.join(map(str, eval_files)),
                     vocab_model=str(vocab or ''), vocab_sample_sentences=1000,
                     prepare_workers=1)
  return config


def documents(path, text_format='auto'):
  """(documents, notes) of a file read as preparation reads it."""
  notes = collections.Counter()
  units = sources.source_units(sources.Source(spec=str(path), weight=None,
                                              text_format=text_format))
  return [d for unit in units for d in sources.read_unit(unit, notes)], notes


# ---- refused: one error naming the file and the position; nothing prepared changes -----------

def write_random(path):
  path.write_bytes(np.random.default_rng(1).bytes(4000))


def write_nul(path):
  path.write_bytes(b'A good line.\nA line with \x00 in it.\n')


def write_utf16(path):
  path.write_bytes('The cat sat on the mat.\n'.encode('utf-16-le'))


def write_one_long_line(path):
  """A good line, then a 50 MB line (text without line breaks), written a block at a time."""
  block = b'the cat sat ' * (1 << 16)
  with path.open('wb') as f:
    f.write(b'A good line.\n')
    for _ in range(50_000_000 // len(block) + 1):
      f.write(block)


def write_no_end(path):
  path.write_text(BOOK[:BOOK.index('*** END')])


def compressible_lines():
  return '\n'.join(sentences(np.random.default_rng(2), 3000)).encode() + b'\n'


def write_truncated_gz(path):
  data = gzip.compress(compressible_lines())
  path.write_bytes(data[:len(data) * 2 // 3])


def write_damaged_gz(path):
  data = bytearray(gzip.compress(compressible_lines()))
  data[len(data) // 2] ^= 0xff
  path.write_bytes(bytes(data))


def write_gz_cut_in_its_head(path):
  path.write_bytes(gzip.compress(compressible_lines())[:100])


REFUSED = {
    'random.txt': (write_random, r"(is not valid UTF-8: |holds a NUL byte at )line \d+, byte "
                                 r'offset \d+'),
    'random.txt.gz': (write_random, r"at its start \(Not a gzipped file"),
    'nul.txt': (write_nul, 'holds a NUL byte at line 2, byte offset 25'),
    'utf16.txt': (write_utf16, r'holds a NUL byte at line 1, byte offset 1,.*UTF-16'),
    'long_line.txt': (write_one_long_line, 'has a line longer than 16 MiB at line 2, byte offset '
                                           '13'),
    'truncated.txt.gz': (write_truncated_gz, r'after byte \d+ \(Compressed file ended.*truncated'),
    'damaged.txt.gz': (write_damaged_gz, r'after byte \d+ \(.*damaged'),
    'cut_head.txt.gz': (write_gz_cut_in_its_head, r'at its start \(Compressed file ended'),
    'no_end.txt': (write_no_end, r"has no '\*\*\* END OF \.\.\.' line.*text_format=lines"),
}


@pytest.mark.parametrize('name', REFUSED)
def test_unreadable_text_is_refused_and_nothing_prepared_changes(corpus, tmp_path, name):
  root, good, prepared = corpus
  write, message = REFUSED[name]
  bad = tmp_path / name
  write(bad)
  with pytest.raises(UsageError, match=f"'{re.escape(str(bad))}'.*{message}"):
    documents(bad)

  # Preparing it over the prepared directory, with --overwrite and another vocabulary: the
  # good files are packed first, then the bad one stops everything.
  before = tree_digest(prepared)
  config = config_for([*good, bad], root / 'other_vocab.txt', eval_files=good[:1])
  with pytest.raises(SystemExit) as stop:
    cli.run(preparation.prepare_dataset, config, str(prepared), overwrite=True)
  line = str(stop.value.code)
  assert line.startswith('electra_jax: error: ') and '\n' not in line
  assert re.search(f"'{re.escape(str(bad))}'.*{message}", line), line
  assert tree_digest(prepared) == before
  assert not [n for n in os.listdir(root) if n.startswith('prepared.')]  # nor anything beside


def test_lines_too_long_for_a_vocabulary_are_refused(corpus, tmp_path):
  long = tmp_path / 'paragraphs.txt'
  long.write_text('\n'.join(' '.join(sentences(np.random.default_rng(3), 500)) for _ in range(3)))
  with pytest.raises(UsageError, match=r'every line sampled from corpus .*paragraphs\.txt.* is '
                                       r'longer than the 4192 bytes sentencepiece trains on'):
    preparation.prepare_dataset(config_for([long]), str(tmp_path / 'out'))
  assert not (tmp_path / 'out' / 'vocab.model').exists()


def test_the_prepare_command_refuses_in_one_line(corpus, tmp_path):
  root, good, prepared = corpus
  before = tree_digest(prepared)
  bad = tmp_path / 'nul.txt'
  write_nul(bad)
  result = subprocess.run(
      [sys.executable, '-m', 'electra_jax.prepare', f'--config={REPO / "configs" / "tiny.py"}',
       f'--out={prepared}', '--overwrite', '--config.max_seq_length=32',
       f'--config.data.train_files={",".join(map(str, [*good, bad]))}',
       f'--config.data.vocab_model={root / "other_vocab.txt"}', '--config.data.prepare_workers=1'],
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'}, cwd=REPO, capture_output=True, text=True,
      timeout=300)
  assert 'NUL byte at line 2' in error_line(result)
  assert tree_digest(prepared) == before


# ---- fuzz: whatever the bytes, text or one error naming the file -----------------------------

def random_text(rng, size) -> str:
  """Random characters with what breaks readers over-represented: line breaks of every kind,
  control characters, NUL, a BOM, format markers (<doc, ' = ', '***'), non-BMP characters."""
  pieces = ['\n', '\r', '\r\n', '\t', ' ', '\x00', '\x0c', '\x7f', '\x85', '\u2028', '\ufeff',
            '<doc id="1">', '</doc>', ' = T = ', '*** START OF X ***', '*** END OF X ***',
            'Project Gutenberg', 'é', '字', '\U0001f600', 'The cat. ', 'a.b. Mr. X? ']
  return ''.join(rng.choice(pieces) if rng.random() < 0.5 else chr(rng.integers(32, 0x3000))
                 for _ in range(size))


def fuzz_files(directory):
  rng = np.random.default_rng(0)
  for i in range(40):
    size = int(rng.integers(0, 2000))
    kind = ('bytes', 'text', 'text', 'gz')[i % 4]
    path = directory / (f'fuzz_{i}.txt' + ('.gz' if kind == 'gz' else ''))
    data = rng.bytes(size) if kind == 'bytes' else random_text(rng, size).encode()
    path.write_bytes(gzip.compress(data) if kind == 'gz' else data)
    yield path


def test_fuzz_any_bytes_read_as_text_or_refused_naming_the_file(tmp_path):
  outcomes = collections.Counter()
  for path in fuzz_files(tmp_path):
    for text_format in ('auto', *formats.FORMATS):
      try:
        docs, _ = documents(path, text_format)
      except UsageError as e:
        assert f"'{path}'" in str(e)
        outcomes['refused'] += 1
        continue
      outcomes['read'] += 1
      for line in (line for doc in docs for line in doc):
        assert line and line == line.strip() and not set(line) & {'\n', '\r', '\x00'}
  print(f'fuzz outcomes: {dict(outcomes)}')
  assert outcomes['read'] > 20 and outcomes['refused'] > 20  # both paths were taken


# ---- read past, counted in the summary; line endings --------------------------------------

def test_empty_files_and_unclosed_docs_are_counted_and_named(corpus, tmp_path, caplog):
  root, good, prepared = corpus
  (tmp_path / 'empty.txt').write_bytes(b'')
  (tmp_path / 'blank.txt').write_text('\n  \n\r\n')
  (tmp_path / 'empty.txt.gz').write_bytes(gzip.compress(b''))
  unclosed = tmp_path / 'unclosed.txt'
  # The first <doc> runs into the next one, the last into the end of the file.
  unclosed.write_text(WIKI.replace('</doc>\n', '', 1) + WIKI.removesuffix('</doc>\n'))
  docs, notes = documents(unclosed)
  assert notes == {'unclosed_docs': 2}
  assert docs == [['The cat sat on the mat.'], ['The dog ran fast.', 'It was good.']] * 2

  empties = [tmp_path / n for n in ('empty.txt', 'blank.txt', 'empty.txt.gz')]
  with caplog.at_level(logging.WARNING):
    manifests = preparation.prepare_dataset(
        config_for([*good, *empties, unclosed], root / 'vocab.txt'), str(tmp_path / 'out'))
  counts = manifests['train']['counts']
  assert counts['files_without_text'] == 3 and counts['unclosed_docs'] == 2
  assert '3 file(s) hold no text' in caplog.text and str(empties[1]) in caplog.text
  assert '2 <doc> without </doc>' in caplog.text and str(unclosed) in caplog.text
  # The good files' documents are all there, and the empty files add nothing.
  good_counts = store.read_manifest(str(prepared / 'train'))['counts']
  assert counts['documents'] == good_counts['documents'] + 4


@pytest.mark.parametrize('text_format, content', [
    ('lines', 'One line.\nTwo lines.\n\nA second document.\n\n\nA third.\n'),
    ('gutenberg', BOOK),
    ('wikiextractor', WIKI),
    ('wikitext', ' = Cat = \n\n The cat sat . \n = = Mat = = \n The mat . \n = Dog = \n Ran . \n'),
])
@pytest.mark.parametrize('ending', ['\r\n', '\r', 'mixed'])
def test_mixed_line_endings_read_as_the_same_lines(tmp_path, text_format, content, ending):
  plain = tmp_path / 'plain.txt'
  plain.write_text(content)
  lines = content.split('\n')[:-1]
  # Mixed: a blank line ends in '\r\n', so that it never follows a lone '\r' with a '\n'.
  ends = lambda i, line: ending if ending != 'mixed' else '\r\n' if not line else (
      '\r\n', '\r', '\n')[i % 3]
  other = tmp_path / 'other.txt'
  other.write_bytes(''.join(line + ends(i, line) for i, line in enumerate(lines)).encode())
  expected, _ = documents(plain, text_format)
  assert expected and documents(other, text_format)[0] == expected
  assert formats.file_format(str(other), 'auto') == formats.file_format(str(plain), 'auto')
