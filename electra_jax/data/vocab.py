"""The vocabulary: SentencePiece (trained here on the corpus) or BERT's WordPiece vocab.txt.

Ids 0-4 of a sentencepiece model are [PAD], [UNK], [CLS], [SEP], [MASK], the last three control
symbols that sentencepiece never produces from text, so a corpus holding "[MASK]" cannot forge a
mask. A vocab.txt keeps the ids of Google's released checkpoints; Hugging Face's `tokenizers`
encodes it, as transformers does, so ids agree with theirs by construction.
"""

from collections.abc import Iterable, Sequence
import dataclasses
import hashlib
import io
import itertools
import json
import math
import os
import re
from typing import TypeVar

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2
import tokenizers
from tokenizers import decoders, normalizers, pre_tokenizers

from electra_jax.data import text
from electra_jax.common.errors import UsageError

T = TypeVar('T')

SPECIAL_PIECES = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
# BERT's limit: a longer whitespace-separated word becomes one [UNK].
MAX_CHARS_PER_WORD = 100


@dataclasses.dataclass(frozen=True)
class Vocab:
  """A loaded sentencepiece model and the fixed ids of its special tokens."""
  processor: spm.SentencePieceProcessor
  model_path: str
  size: int
  pad_id: int = 0
  unk_id: int = 1
  cls_id: int = 2
  sep_id: int = 3
  mask_id: int = 4

  def encode(self, lines: Sequence[str]) -> list[list[int]]:
    """Token ids of each line (sentencepiece encodes the batch on all cores)."""
    return self.processor.encode(list(lines), out_type=int)

  def encode_with_offsets(self, lines: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Token ids of each line and each token's [start, end) character span in that line (empty
    for a piece that stands for no character, a lone word-initial '▁')."""
    encoded = []
    for line, proto in zip(lines, self.processor.encode(list(lines), out_type='proto')):
      char_at = _byte_to_char(line)
      encoded.append(([p.id for p in proto.pieces],
                      [(char_at[p.begin], char_at[p.end]) for p in proto.pieces]))
    return encoded

  @property
  def lowercase(self) -> bool:
    """Whether the model's normalizer folds case (trained with data.vocab_lowercase)."""
    return model_proto(self).normalizer_spec.name.endswith('_cf')

  def fingerprint(self) -> str:
    """sha256 of the loaded proto (the .model's bytes): a file replaced after loading cannot make
    it disagree with the ids in use."""
    return hashlib.sha256(self.processor.serialized_model_proto()).hexdigest()


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


def model_proto(vocab: Vocab) -> sentencepiece_model_pb2.ModelProto:
  """The loaded model as its proto: trainer and normalizer settings, every piece and score."""
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(vocab.processor.serialized_model_proto())
  return proto


def _byte_to_char(text: str) -> list[int] | range:
  """For each UTF-8 byte offset into `text` (and its end), the character offset it falls in."""
  if text.isascii():
    return range(len(text) + 1)
  char_at = [i for i, c in enumerate(text) for _ in c.encode('utf-8')]
  return char_at + [len(text)]


def reservoir_sample(items: Iterable[T], size: int, rng: np.random.Generator) -> list[T]:
  """A uniform random sample of `size` items (all if fewer) in O(size) memory: Algorithm L (Li,
  1994) draws the gap to the next item kept, so n items cost O(size * log(n / size)) draws."""
  items = iter(items)
  sample = list(itertools.islice(items, size))
  if len(sample) < size:
    return sample
  uniform = lambda: 1.0 - rng.random()  # In (0, 1], so its log is finite.
  weight = math.exp(math.log(uniform()) / size)
  next_index = size + math.floor(math.log(uniform()) / math.log1p(-weight))
  for index, item in enumerate(items, start=size):
    if index == next_index:
      sample[rng.integers(size)] = item
      weight *= math.exp(math.log(uniform()) / size)
      next_index += math.floor(math.log(uniform()) / math.log1p(-weight)) + 1
  return sample


def sample_lines(files: Sequence[str], max_lines: int, seed: int) -> list[str]:
  """A uniform random sample of at most `max_lines` non-blank lines of the corpus.

  Not sentencepiece's `input_sentence_size`: its sampling differs between runs even with
  `set_random_generator_seed` and one thread.
  """
  lines = (line for document in text.read_documents(files) for line in document)
  return reservoir_sample(lines, max_lines, np.random.default_rng(seed))


def _raise_for_vocab_size(error: RuntimeError, vocab_size: int, corpus: str) -> None:
  """Turns sentencepiece's complaints about vocab_size or the lines into a UsageError."""
  message = str(error)
  too_high = re.search(r'Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)',
                       message)
  if too_high:
    limit = too_high.group(2)
    raise UsageError(
        f'corpus {corpus} is too small for a vocabulary of {vocab_size} pieces (at most {limit}); '
        f'set --config.model.vocab_size={limit} (or smaller) or add text') from None
  too_low = re.search(r'Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)', message)
  if too_low:
    needed = int(too_low.group(2)) + 1
    raise UsageError(
        f'corpus {corpus} has more distinct characters than a vocabulary of {vocab_size} pieces '
        f'can hold; set --config.model.vocab_size={needed} or larger') from None
  if '!sentences_.empty()' in message:  # It skips lines longer than 4192 bytes.
    raise UsageError(f'every line sampled from corpus {corpus} is longer than the 4192 bytes '
                     'sentencepiece trains on, so no vocabulary can be trained; put one '
                     'sentence or paragraph per line') from None


def _write_atomically(path: str, data: bytes) -> None:
  tmp_path = f'{path}.tmp{os.getpid()}'
  with open(tmp_path, 'wb') as f:
    f.write(data)
  os.replace(tmp_path, path)


def train_vocab(files: Sequence[str], vocab_size: int, out_prefix: str, *,
                max_sentences: int = 1_000_000, seed: int = 0,
                model_type: str = 'unigram', lowercase: bool = False) -> Vocab:
  """Trains a vocabulary on the files and writes `out_prefix.model` and `out_prefix.vocab`.

  Byte-identical for the same corpus, size, seed and sentencepiece: the lines are sampled here,
  and the proto is written here, so it does not record `out_prefix` as sentencepiece would.
  """
  check_sample_size(max_sentences)
  return train_vocab_on_sentences(sample_lines(files, max_sentences, seed), vocab_size,
                                  out_prefix, text.describe_files(files), model_type=model_type,
                                  lowercase=lowercase)


def check_sample_size(max_sentences: int) -> None:
  if max_sentences <= 0:
    raise UsageError(f'the vocabulary sample size must be positive, got {max_sentences}; '
                     'set --config.data.vocab_sample_sentences to e.g. 1000000')


def train_vocab_on_sentences(sentences: Sequence[str], vocab_size: int, out_prefix: str,
                             corpus: str, *, model_type: str = 'unigram',
                             lowercase: bool = False) -> Vocab:
  """Trains on sampled lines of `corpus` (its name, for messages); see train_vocab.

  With `lowercase` the model itself folds case (nmt_nfkc_cf), so every encoder of it, the
  exported tokenizer.json too, reads "The" as "the", like BERT's uncased vocabularies.
  """
  if not sentences:
    raise UsageError(f'corpus {corpus} holds no text (only blank lines); '
                     'check data.train_files')
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        normalization_rule_name='nmt_nfkc_cf' if lowercase else 'nmt_nfkc',
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        pad_piece=SPECIAL_PIECES[0], unk_piece=SPECIAL_PIECES[1],
        control_symbols=list(SPECIAL_PIECES[2:]),
        minloglevel=1)  # Warnings only; sentencepiece's INFO log is hundreds of lines.
  except RuntimeError as e:
    _raise_for_vocab_size(e, vocab_size, corpus)
    raise
  out_dir = os.path.dirname(out_prefix)
  if out_dir:
    os.makedirs(out_dir, exist_ok=True)
  _write_atomically(out_prefix + '.model', model.getvalue())
  vocab = load_vocab(out_prefix + '.model')
  # The human-readable listing sentencepiece would write: piece, tab, score.
  listing = ''.join(f'{vocab.processor.id_to_piece(i)}\t{vocab.processor.get_score(i):g}\n'
                    for i in range(vocab.size))
  _write_atomically(out_prefix + '.vocab', listing.encode('utf-8'))
  return vocab


def load_vocab(model_path: str) -> Vocab | WordPieceVocab:
  """Loads a sentencepiece .model (checking that ids 0-4 are the specials) or a WordPiece .txt."""
  if model_path.endswith('.txt'):
    return load_wordpiece(model_path)
  if not os.path.isfile(model_path):
    raise UsageError(f"vocabulary model '{model_path}' does not exist; check data.vocab_model, "
                     'or leave it empty to train a vocabulary on data.train_files')
  processor = spm.SentencePieceProcessor()
  try:
    processor.load(model_path)
  except (RuntimeError, OSError) as e:
    raise UsageError(f"'{model_path}' is not a sentencepiece model ({e}); "
                     'point data.vocab_model at a .model file') from None
  size = processor.get_piece_size()
  found = tuple(processor.id_to_piece(i) for i in range(min(size, len(SPECIAL_PIECES))))
  # [UNK] must be the unknown piece and the others control pieces; a user-defined "[MASK]"
  # would be produced from text.
  proper_types = found == SPECIAL_PIECES and processor.is_unknown(1) and all(
      processor.is_control(i) for i in (0, 2, 3, 4))
  if not proper_types:
    raise UsageError(
        f"vocabulary '{model_path}' has {list(found)} as ids 0-{len(found) - 1}, not "
        f'{list(SPECIAL_PIECES)} as control symbols ([UNK] as unknown); the vocabulary must be '
        'trained with those specials (leave data.vocab_model empty to train one)')
  return Vocab(processor=processor, model_path=model_path, size=size)


def is_uncased(pieces: Sequence[str]) -> bool:
  """Whether no piece but the [SPECIALS] holds an uppercase letter: vocab.txt does not record
  its casing, and this tells Google's uncased and cased vocabularies apart."""
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
  missing = [t for t in SPECIAL_PIECES if t not in ids]
  if missing:
    raise UsageError(f"'{path}' lacks the special tokens {missing}; a BERT/ELECTRA vocab.txt "
                     f'holds all of {list(SPECIAL_PIECES)}')
  if ids['[PAD]'] != 0:
    # The model's attention mask is `input_ids != 0`.
    raise UsageError(f"'{path}' has [PAD] at id {ids['[PAD]']}; electra_jax needs it at id 0 "
                     '(line 1), as in BERT and ELECTRA vocabularies')
  if lowercase is None:
    lowercase = is_uncased(pieces)
  pad, unk, cls, sep, mask = (ids[t] for t in SPECIAL_PIECES)
  return WordPieceVocab(tokenizer=bert_tokenizer(pieces, lowercase), pieces=tuple(pieces),
                        lowercase=lowercase, model_path=path, size=len(pieces), pad_id=pad,
                        unk_id=unk, cls_id=cls, sep_id=sep, mask_id=mask)


def check_casing(vocab: Vocab | WordPieceVocab, lowercase: bool) -> None:
  """Refuses data.vocab_lowercase=True over a cased vocabulary already on disk: the run would
  silently train on its cased pieces."""
  if lowercase and not vocab.lowercase:
    raise UsageError(f'data.vocab_lowercase=True, but {vocab.model_path} is a cased vocabulary '
                     'that this run would keep using; prepare into a new directory (or use a new '
                     '--workdir) so that a lowercased vocabulary is trained, or drop '
                     '--config.data.vocab_lowercase')


def vocab_fingerprint(vocab: Vocab | WordPieceVocab) -> str:
  """What identifies the vocabulary's ids, recorded with prepared data (see Vocab.fingerprint)."""
  return vocab.fingerprint()


WORD_START = '\u2581'  # sentencepiece's mark of a piece that begins a word


def word_starts(vocab: Vocab | WordPieceVocab) -> bytes:
  """One byte per id, 1 where the piece begins a word: what whole-word and span masking read.

  Control pieces are words of their own; sentencepiece's [UNK] and byte pieces continue the
  word they stand in (after '▁' when they begin it), while WordPiece's [UNK] is a whole word.
  """
  if isinstance(vocab, WordPieceVocab):
    starts = [not piece.startswith('##') for piece in vocab.pieces]
  else:
    processor = vocab.processor
    starts = [processor.id_to_piece(i).startswith(WORD_START) or processor.is_control(i)
              or processor.is_unused(i) for i in range(vocab.size)]
  return np.asarray(starts, np.uint8).tobytes()
