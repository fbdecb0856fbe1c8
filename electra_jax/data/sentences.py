"""Cutting paragraphs into sentences with a small, predictable rule.

Packing collects lines and splits them into segments A and B at line boundaries, and the
original's input has one sentence per line. Books and Wikipedia come as whole paragraphs, so
their paragraphs are cut into sentences first. The rule:

  a sentence ends at a run of '.', '!' or '?', optionally followed by closing quotes or
  brackets, when whitespace and then an uppercase letter (or an opening quote or bracket
  before one) follow;

  a single '.' ends nothing after a common abbreviation (Mr. Mrs. Dr. St. ...), after a
  single capital (an initial, as in "Louisa M. Alcott") or after a word with a period inside
  (e.g. i.e. U.S. a.m.).

It misses a few ends (a sentence that ends in "U.S.") and finds a few false ones (an
abbreviation it does not know); packing only needs lines of sentence size, not a parse.
"""

import re

# Words whose '.' rarely ends a sentence before a capital. 'No' and 'etc' are left out: "No."
# is a whole sentence in dialogue, and "etc." ends sentences about as often as not.
ABBREVIATIONS = frozenset("""
    mr mrs ms messrs mme mlle dr prof rev hon st jr sr esq gen col capt lt sgt maj adm gov sen
    rep mt ft vs cf viz vol vols ch chap fig figs pp jan feb apr aug sept oct nov dec inc ltd
    corp bros""".split())

# A candidate end: punctuation, closers, whitespace, then (looking ahead) openers and a letter.
_END = re.compile(r'''([.!?]+)["')\]’”»]*\s+(?=["'(\[‘“«]*([^\W\d_]))''')
_OPENERS = '"\'([‘“«'


def _ends_sentence(text: str, match: re.Match) -> bool:
  punctuation, next_letter = match.groups()
  if not next_letter.isupper():
    return False
  if punctuation != '.':
    return True  # '!', '?', '...': no abbreviation ends so.
  word = text[text.rfind(' ', 0, match.start()) + 1:match.start()].lstrip(_OPENERS)
  if len(word) == 1 and word.isupper():
    return False  # An initial.
  return '.' not in word and word.lower() not in ABBREVIATIONS


def split_sentences(paragraph: str) -> list[str]:
  """The sentences of a paragraph, stripped, in order; none is empty."""
  sentences, start = [], 0
  for match in _END.finditer(paragraph):
    if _ends_sentence(paragraph, match):
      sentences.append(paragraph[start:match.end()].strip())
      start = match.end()
  sentences.append(paragraph[start:].strip())
  return [s for s in sentences if s]
