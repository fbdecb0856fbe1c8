"""Real corpora as they come: Gutenberg books, WikiExtractor shards, WikiText; packing 'fill'.

The reference texts here are computed from the raw files with plain string operations, so the
readers are checked against what the files say, not against themselves.
"""

import gzip
import logging
import math
import re

import numpy as np
import pytest

from conftest import SHARED_DATA, WIKITEXT, load_config
from electra_jax.data import formats, packing, preparation, sources
from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError
from test_data import ScriptedRng, assert_well_formed

CORPUS = SHARED_DATA / 'pretraining-text'
BOOKS = [CORPUS / 'gutenberg' / name for name in (
    'conrad--the-secret-sharer.txt', 'kipling--the-new-army-in-training.txt')]
SHARD = CORPUS / 'enwiki' / 'AA_wiki_36.txt'
CLS, SEP = 2, 3


@pytest.fixture(scope='module')
def corpus():
  if not CORPUS.is_dir() or not WIKITEXT.is_dir():
    pytest.skip(f'real data not found at {SHARED_DATA} (../shared beside the checkout)')
  return CORPUS


def documents(path, text_format='auto', unit_bytes=sources.UNIT_BYTES):
  units = sources.source_units(sources.Source(spec=str(path), weight=None,
                                              text_format=text_format), unit_bytes=unit_bytes)
  return [d for unit in units for d in sources.read_unit(unit)], units


# ----------------------------------------------------------------------------- sentences


@pytest.mark.parametrize('paragraph, expected', [
    ('Mr. Smith met Dr. Watson in St. Louis. They talked.',
     ['Mr. Smith met Dr. Watson in St. Louis.', 'They talked.']),
    ('Louisa M. Alcott wrote it, e.g. Little Women. The U.S. Army did not.',
     ['Louisa M. Alcott wrote it, e.g. Little Women.', 'The U.S. Army did not.']),
    ('"Where?" he asked. "Here!" She ran... Then it was 5 p.m. and late.',
     ['"Where?" he asked.', '"Here!"', 'She ran...', 'Then it was 5 p.m. and late.']),
    ('It was 3 ft. long. (That was all.) and a lower case start. No.',
     ['It was 3 ft. long.', '(That was all.) and a lower case start.', 'No.']),
    ('The lobster is blue . It lives ( in the sea ) . Fine', [
        'The lobster is blue .', 'It lives ( in the sea ) .', 'Fine']),
])
def test_sentences_end_at_punctuation_before_a_capital_but_not_after_abbreviations(
    paragraph, expected):
  assert formats.split_sentences(paragraph) == expected


# ----------------------------------------------------------------------------- formats


def test_formats_are_detected_from_the_first_bytes_and_logged(corpus, tmp_path, caplog):
  plain = tmp_path / 'plain.txt'
  plain.write_text('One sentence.\n\nA Project Gutenberg fan wrote this line.\n')
  header_only = tmp_path / 'header.txt.gz'
  with gzip.open(header_only, 'wt') as f:
    f.write('\ufeff\r\nThe Project Gutenberg EBook of Nothing\r\n')
  cut = tmp_path / 'cut.raw'  # WikiText cut mid-article: it opens with a paragraph
  cut.write_text(''.join((WIKITEXT / 'wiki.valid.raw').read_text().splitlines(True)[3:]))
  cases = {BOOKS[0]: 'gutenberg', SHARD: 'wikiextractor', WIKITEXT / 'wiki.valid.raw': 'wikitext',
           cut: 'wikitext', plain: 'lines', header_only: 'gutenberg'}
  with caplog.at_level(logging.INFO):
    for path, expected in cases.items():
      assert formats.file_format(str(path), 'auto') == expected
      assert formats.file_format(str(path), 'lines') == 'lines'  # Declared: no detection.
  assert f"text format of '{plain}': lines (auto:" in caplog.text
  assert (f"text format of '{cut}': wikitext (auto: holds ' = Title = ' or ' = = Section = = ' "
          'lines)') in caplog.text
  assert (f"text format of '{header_only}': gutenberg (auto: opens with a Project Gutenberg "
          'header)') in caplog.text  # Once per file: a file read earlier was logged then.


def test_a_gutenberg_book_is_its_body_with_paragraphs_rejoined(corpus):
  for book in BOOKS:
    [document], units = documents(book)
    assert [(u.text_format, u.packing, u.start, u.stop) for u in units] == [
        ('gutenberg', 'fill', 0, None)]
    raw = book.read_text(encoding='utf-8').splitlines()
    start = next(i for i, line in enumerate(raw) if line.startswith('*** START OF'))
    end = next(i for i, line in enumerate(raw) if line.startswith('*** END OF'))
    paragraphs = re.split(r'\n\s*\n', '\n'.join(raw[start + 1:end]).strip())
    body = [line.strip() for paragraph in paragraphs for line in paragraph.split('\n')
            if not paragraph.startswith(('Produced by', 'End of the Project Gutenberg',
                                         "End of Project Gutenberg's"))]
    assert ' '.join(document) == ' '.join(body)  # Nothing lost, nothing of the header.
    assert not any('Gutenberg' in line or '***' in line for line in document)
    # Wrapped lines often end in a comma, sentences never: the lines were joined.
    assert sum(line.endswith(',') for line in body) > 40
    assert sum(line.endswith(',') for line in document) == 0
  [conrad], _ = documents(BOOKS[0])
  assert conrad[:3] == ['THE SECRET SHARER', 'By Joseph Conrad', 'I']
  assert conrad[3] == (
      'On my right hand there were lines of fishing stakes resembling a mysterious system of '
      'half-submerged bamboo fences, incomprehensible in its division of the domain of tropical '
      'fishes, and crazy of aspect as if abandoned forever by some nomad tribe of fishermen now '
      'gone to the other end of the ocean; for there was no sign of human habitation as far as '
      'the eye could reach.')


def test_a_wikiextractor_doc_is_a_document_without_its_title(corpus):
  whole, units = documents(SHARD)
  assert [(u.text_format, u.packing) for u in units] == [('wikiextractor', 'fill')]
  raw = SHARD.read_text(encoding='utf-8')
  expected = []
  for chunk in raw.split('</doc>')[:-1]:
    header, title, *body = chunk.strip().split('\n')
    assert header.startswith('<doc ') and f'title="{title}"' in header
    if any(body):
      expected.append(' '.join(line.strip() for line in body if line.strip()))
  assert [' '.join(d) for d in whole] == expected
  assert not any(line.startswith(('<doc', '</doc')) for d in whole for line in d)
  # Cut into ranges at </doc>, read by several workers, it gives the same documents.
  parts, units = documents(SHARD, unit_bytes=100_000)
  assert len(units) > 5 and parts == whole
  with open(SHARD, 'rb') as f:
    for unit in units:
      f.seek(unit.start)
      assert f.readline().startswith(b'<doc ')


def test_wikitext_articles_are_documents_without_titles_and_headings(corpus):
  whole, units = documents(WIKITEXT / 'wiki.valid.raw')
  assert [(u.text_format, u.packing) for u in units] == [('wikitext', 'fill')]
  raw = (WIKITEXT / 'wiki.valid.raw').read_text(encoding='utf-8')
  articles = re.split(r'^ = [^=].* = $', raw, flags=re.MULTILINE)[1:]
  assert len(whole) == len(articles) == 60
  for document, article in zip(whole, articles):
    body = [line.strip() for line in article.split('\n')
            if line.strip() and not line.startswith(' = = ')]
    assert ' '.join(document) == ' '.join(body)
  assert whole[0][0] == ('Homarus gammarus , known as the European lobster or common lobster , '
                         'is a species of clawed lobster from the eastern Atlantic Ocean , '
                         'Mediterranean Sea and parts of the Black Sea .')
  parts, units = documents(WIKITEXT / 'wiki.valid.raw', unit_bytes=100_000)
  assert len(units) > 5 and parts == whole


def test_a_plain_file_is_read_as_before(tmp_path):
  path = tmp_path / 'plain.txt'
  path.write_text('A first line. A second sentence.\nMore.\n\nOther doc.\n')
  docs, units = documents(path)
  assert docs == [['A first line. A second sentence.', 'More.'], ['Other doc.']]
  assert [(u.text_format, u.packing) for u in units] == [('lines', 'original')]
  # Its identity, and so the key of data prepared from it, is what it was before formats.
  assert set(sources.identity(sources.Source(str(path), None), units)['files'][0]) == {
      'path', 'bytes', 'mtime_ns'}


@pytest.mark.parametrize('content, text_format, message', [
    ('Title: A book\n\nIt has no markers.\n', 'gutenberg', r"'\*\*\* START OF \.\.\.' line"),
    ('The Project Gutenberg EBook of X\n\nNo marker here.\n', 'auto',
     r"'\*\*\* START OF \.\.\.' line"),
    ('The Project Gutenberg EBook of X\n*** START OF X ***\nText.\n', 'auto',
     r"'\*\*\* END OF \.\.\.' line"),
    ('Plain text.\n', 'wikiextractor', 'outside <doc'),
])
def test_a_file_not_in_its_format_is_refused_with_the_fix(tmp_path, content, text_format,
                                                            message):
  path = tmp_path / 'bad.txt'
  path.write_text(content)
  with pytest.raises(UsageError, match=f"'{re.escape(str(path))}'.*{message}.*text_format"):
    documents(path, text_format)


def test_bad_format_and_packing_settings_are_refused():
  config = load_config('tiny')
  config.data.train_files = 'a.txt'
  config.data.text_format = 'book'
  with pytest.raises(UsageError, match="data.text_format='book' is not one of auto, lines"):
    sources.from_config(config.data, 'train')
  with pytest.raises(UsageError, match="data.packing='tight' is not one of auto, original"):
    sources.parse_sources('a.txt', packing='tight')


# ----------------------------------------------------------------------------- packing 'fill'


def fill(documents, max_seq_length, rng):
  return [(p.first, p.second, p.target_length, p.single_segment)
          for p in packing.filled_pairs(documents, max_seq_length, rng)]


def test_fill_carries_what_does_not_fit_into_the_next_example():
  doc = [[10] * 6, [20] * 5, [30] * 9]  # As in test_data: 'original' drops the last 7 tokens.
  rng = ScriptedRng([0.5, 0.9, 0.5])  # Not single; next target L; the last example's draw.
  assert fill([doc], 16, rng) == [([10] * 6, [20] * 5 + [30] * 2, 16, False),
                                  ([30] * 7, [], 16, False)]
  assert rng.exhausted()


def test_fill_completes_a_document_end_with_the_next_document_as_segment_b():
  docs = [[[1] * 20], [[2] * 4, [3] * 10]]
  # Example 1: a line longer than A's target fills A alone (no room for B) and is cut there.
  # Example 2: the rest of document 1 is A, document 2 is B; its single-segment draw (0.05)
  # is ignored, since the document boundary is the A/B boundary.
  rng = ScriptedRng([0.5, 0.9, 0.05, 0.9, 0.5])
  assert fill(docs, 16, rng) == [([1] * 14, [], 16, False),
                                 ([1] * 6, [2] * 4 + [3] * 3, 16, False),
                                 ([3] * 7, [], 16, False)]
  assert rng.exhausted()


def test_fill_never_puts_a_document_end_inside_segment_a():
  docs = [[[1] * 29], [[2] * 20]]  # Document 1 leaves 15 tokens: more than A can hold with B.
  rng = ScriptedRng([0.5, 0.9, 0.5, 0.9, 0.5, 0.9, 0.5])
  assert fill(docs, 16, rng) == [([1] * 14, [], 16, False), ([1] * 14, [], 16, False),
                                 ([1], [2] * 12, 16, False), ([2] * 8, [], 16, False)]
  assert rng.exhausted()


def test_fill_keeps_every_token_in_order_and_fills_every_full_length_example():
  rng = np.random.default_rng(7)
  # Document d holds only token 5 + d; lines of 1-60 tokens, some longer than an example.
  docs = [[[5 + d] * int(n) for n in rng.integers(1, 60, rng.integers(1, 30))] for d in range(300)]
  docs[10] = [[15] * 400]
  length = 64
  pairs = list(packing.filled_pairs(docs, length, np.random.default_rng(0)))
  packed = [t for p in pairs for t in p.first + p.second]
  assert packed == [t for d in docs for line in d for t in line]
  sizes = [len(p.first) + len(p.second) + 2 + bool(p.second) for p in pairs]
  assert all(size >= length - 1 for p, size in zip(pairs[:-1], sizes) if p.target_length == length)
  assert sum(size == length for size in sizes) > 0.9 * len(pairs)
  for p in pairs:
    assert len(set(p.first)) == 1  # A never spans documents.
    if set(p.second) - set(p.first):  # Another document: it starts B, and A ends its own.
      assert p.first[0] not in p.second and p.second == sorted(p.second)
  rows = packing.pack_examples(docs, length, CLS, SEP, seed=0, packing='fill')
  assert rows['input_ids'].shape == (len(pairs), length)
  assert_well_formed(rows['input_ids'], rows['segment_ids'])


@pytest.fixture(scope='module')
def prepared(corpus, tmp_path_factory):
  """The two books and the shard prepared at length 128 as a user would, through the config."""
  config = load_config('tiny')
  config.data.sources = ','.join(str(p) for p in [*BOOKS, SHARD])
  config.max_seq_length = 128
  config.data.prepare_workers = 1
  config.data.vocab_sample_sentences = 20_000
  out = tmp_path_factory.mktemp('corpora')
  return preparation.prepare_dataset(config, str(out))['train'], out


def test_fill_keeps_the_body_and_pads_little_at_length_128(prepared):
  manifest, _ = prepared
  counts = manifest['counts']
  assert manifest['vocab_size'] == 4096 and counts['documents'] == 2 + 48
  assert counts['kept_fraction'] >= 0.90 and counts['padding_fraction'] <= 0.03
  assert counts['kept_fraction'] == pytest.approx(counts['tokens_in_examples'] / counts['tokens'])
  files = [f for source in manifest['key']['sources'] for f in source['files']]
  assert [(f['format'], f['packing']) for f in files] == [
      ('gutenberg', 'fill'), ('gutenberg', 'fill'), ('wikiextractor', 'fill')]


def test_fill_keeps_the_electra_draws(prepared):
  _, out = prepared
  vocab = vocab_lib.load_vocab(str(out / 'vocab.model'))
  docs = [vocab.encode(d) for path in [*BOOKS, SHARD] for d in documents(path)[0]]
  pairs = list(packing.filled_pairs(docs, 128, np.random.default_rng(0)))
  n = len(pairs)
  short_share = np.mean([p.target_length < 128 for p in pairs])
  assert abs(short_share - 0.05) < 4 * math.sqrt(0.05 * 0.95 / n)
  single_share = np.mean([p.single_segment for p in pairs])  # A few, at documents' ends, not.
  assert abs(single_share - 0.1) < 4 * math.sqrt(0.1 * 0.9 / n)
