"""WordPiece vocabularies (BERT's vocab.txt), so Google's released ELECTRA checkpoints keep theirs.

A `WordPieceVocab` offers what the trainer and the data pipeline use of a sentencepiece `Vocab`
(encode, size, the special ids, model_path, fingerprint), so either kind can drive a run.

Tokenization is BERT's: clean control characters, put spaces around CJK characters, lowercase
and strip accents (uncased vocabularies only), split on whitespace and punctuation, then greedy
longest-match-first pieces with '##' marking a continuation. It runs in Hugging Face's
`tokenizers` (Rust) rather than in Python: it is the implementation `transformers` itself uses
for these vocabularies, so ids agree with theirs by construction, and it encodes a corpus in
parallel at a speed a Python loop cannot approach.
"""

from collections.abc import Sequence
import dataclasses
import hashlib
import json
import os

import tokenizers
from tokenizers import decoders, normalizers, pre_tokenizers

from electra_jax.common.errors import UsageError

SPECIAL_TOKENS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
# BERT's limit: a longer whitespace-separated word becomes one [UNK].
MAX_CHARS_PER_WORD = 100


@dataclasses.dataclass(frozen=True)
class WordPieceVocab:
  """A loaded vocab.txt, its tokenizer and the ids of its special tokens."""
  tokenizer: tokenizers.Tokenizer  # without special tokens added around the text
  pieces: tuple[str, ...]          # the vocabulary in id order
  lowercase: bool
  model_path: str
  size: int
  pad_id: int
  unk_id: int
  cls_id: int
  sep_id: int
  mask_id: int

  def encode(self, lines: Sequence[str]) -> list[list[int]]:
    """Token ids of each line ([CLS]/[SEP] are added by packing, not here)."""
    encodings = self.tokenizer.encode_batch(list(lines), add_special_tokens=False)
    return [encoding.ids for encoding in encodings]

  def encode_with_offsets(self, lines: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Token ids of each line and each token's [start, end) character span in that line."""
    encodings = self.tokenizer.encode_batch(list(lines), add_special_tokens=False)
    return [(encoding.ids, [tuple(o) for o in encoding.offsets]) for encoding in encodings]

  def fingerprint(self) -> str:
    """sha256 over the pieces and the casing: what decides the ids of a text."""
    return hashlib.sha256(json.dumps([self.lowercase, self.pieces]).encode()).hexdigest()


def is_uncased(pieces: Sequence[str]) -> bool:
  """Whether a vocabulary was built from lowercased text: no piece holds an uppercase letter.

  vocab.txt does not record the casing; this is the rule that tells Google's uncased and cased
  BERT/ELECTRA vocabularies apart (bracketed specials like [UNK] are left out of the test).
  """
  return not any(p != p.lower() for p in pieces if not (p.startswith('[') and p.endswith(']')))


def bert_tokenizer(pieces: Sequence[str], lowercase: bool) -> tokenizers.Tokenizer:
  """BERT's WordPiece tokenizer over `pieces` (id = position), without special tokens added."""
  model = tokenizers.models.WordPiece({p: i for i, p in enumerate(pieces)}, unk_token='[UNK]',
                                      max_input_chars_per_word=MAX_CHARS_PER_WORD)
  tokenizer = tokenizers.Tokenizer(model)
  # strip_accents=None: accents are stripped exactly when lowercasing, as in BERT.
  tokenizer.normalizer = normalizers.BertNormalizer(
      clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
  tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tokenizer.decoder = decoders.WordPiece(prefix='##')
  return tokenizer


def read_pieces(path: str) -> list[str]:
  """The lines of a vocab.txt, one piece each (the line number is the id)."""
  try:
    with open(path, encoding='utf-8') as f:
      return [line.rstrip('\r\n') for line in f]
  except (OSError, UnicodeDecodeError) as e:
    raise UsageError(f"cannot read WordPiece vocabulary '{path}' ({e}); "
                     'point at a UTF-8 vocab.txt with one piece per line') from None


def load_wordpiece(path: str, lowercase: bool | None = None) -> WordPieceVocab:
  """Loads a vocab.txt; `lowercase=None` infers the casing from the pieces (see is_uncased)."""
  if not os.path.isfile(path):
    raise UsageError(f"WordPiece vocabulary '{path}' does not exist; check the path")
  pieces = read_pieces(path)
  ids = {}
  for i, piece in enumerate(pieces):
    if piece in ids:
      raise UsageError(f"'{path}' lists '{piece}' twice (lines {ids[piece] + 1} and {i + 1}); "
                       'a vocab.txt must hold each piece once')
    ids[piece] = i
  missing = [t for t in SPECIAL_TOKENS if t not in ids]
  if missing:
    raise UsageError(f"'{path}' lacks the special tokens {missing}; a BERT/ELECTRA vocab.txt "
                     f'holds all of {list(SPECIAL_TOKENS)}')
  if ids['[PAD]'] != 0:
    # The model's attention mask is `input_ids != 0`.
    raise UsageError(f"'{path}' has [PAD] at id {ids['[PAD]']}; electra_jax needs it at id 0 "
                     '(line 1), as in BERT and ELECTRA vocabularies')
  if lowercase is None:
    lowercase = is_uncased(pieces)
  pad, unk, cls, sep, mask = (ids[t] for t in SPECIAL_TOKENS)
  return WordPieceVocab(tokenizer=bert_tokenizer(pieces, lowercase), pieces=tuple(pieces),
                        lowercase=lowercase, model_path=path, size=len(pieces), pad_id=pad,
                        unk_id=unk, cls_id=cls, sep_id=sep, mask_id=mask)
