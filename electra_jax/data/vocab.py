"""The vocabulary: SentencePiece (trained here on the corpus), BERT's WordPiece vocab.txt, or a
Hugging Face tokenizer.json (given, or a byte-level BPE or WordPiece one trained here).

Ids 0-4 of a sentencepiece model are [PAD], [UNK], [CLS], [SEP], [MASK], the last three control
symbols that sentencepiece never produces from text, so a corpus holding "[MASK]" cannot forge a
mask. A vocab.txt keeps the ids of Google's released checkpoints; Hugging Face's `tokenizers`
encodes it, as transformers does, so ids agree with theirs by construction. A tokenizer.json is
encoded by `tokenizers` too, its special tokens found by their role whatever they are called, and
their text in the input read as plain text, as the other kinds read it.
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
import time
from typing import TypeVar

from absl import logging
import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2
import tokenizers
from tokenizers import decoders, normalizers, pre_tokenizers, processors, trainers

from electra_jax.data import text
from electra_jax.common.errors import UsageError

T = TypeVar('T')

SPECIAL_PIECES = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
TOKENIZER_JSON = 'tokenizer.json'
# What a workdir or prepared directory keeps its vocabulary in, one of them by kind.
VOCAB_NAMES = ('vocab.model', 'vocab.txt', TOKENIZER_JSON)
# BERT's limit: a longer whitespace-separated word becomes one [UNK].
MAX_CHARS_PER_WORD = 100


@dataclasses.dataclass(frozen=True, kw_only=True)
class _LoadedVocab:
  """A loaded vocabulary's file, size and special ids (the defaults: SPECIAL_PIECES' order)."""
  model_path: str
  size: int
  pad_id: int = 0
  unk_id: int = 1
  cls_id: int = 2
  sep_id: int = 3
  mask_id: int = 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class Vocab(_LoadedVocab):
  """A loaded sentencepiece model (load_vocab checks that ids 0-4 are the specials)."""
  processor: spm.SentencePieceProcessor

  def encode(self, lines: Sequence[str]) -> list[list[int]]:
    """Token ids of each line (sentencepiece encodes the batch on all cores)."""
    return self.processor.encode(list(lines), out_type=int)

  def encode_with_offsets(self, lines: Sequence[str]
                          ) -> list[tuple[list[int], list[tuple[int, int]]]]:
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class _TokenizersVocab(_LoadedVocab):
  """A vocabulary that `tokenizers` encodes."""
  tokenizer: tokenizers.Tokenizer  # adds no special tokens; reads their text as plain text
  lowercase: bool

  def encode(self, lines: Sequence[str]) -> list[list[int]]:
    # _fast skips the character offsets: the same ids for 15-20% less CPU (tokenizers >= 0.20).
    return [e.ids for e in self.tokenizer.encode_batch_fast(list(lines), add_special_tokens=False)]

  def encode_with_offsets(self, lines: Sequence[str]
                          ) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Token ids of each line and each token's [start, end) character span in that line."""
    return [(e.ids, [tuple(o) for o in e.offsets])
            for e in self.tokenizer.encode_batch(list(lines), add_special_tokens=False)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WordPieceVocab(_TokenizersVocab):
  """A loaded vocab.txt."""
  pieces: tuple[str, ...]  # the vocabulary in id order

  def fingerprint(self) -> str:
    """sha256 over the pieces and the casing: what decides the ids of a text."""
    return hashlib.sha256(json.dumps([self.lowercase, self.pieces]).encode()).hexdigest()


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerJsonVocab(_TokenizersVocab):
  """A loaded tokenizer.json, its special tokens found by role (unk_id is pad_id where the
  tokenizer has no unknown token)."""
  config: dict              # its JSON as tokenizers writes it: what export writes back
  specials: dict[str, str]  # 'pad', 'unk' (if it has one), 'cls', 'sep', 'mask' -> token
  kind: str                 # the model: 'bpe', 'wordpiece', 'unigram', ...
  file_pad_id: int          # the file's padding id: swapped with id 0 where it is not 0

  def fingerprint(self) -> str:
    """sha256 over what decides the ids of a text and the special ids; not the post-processor,
    so an export's tokenizer.json (which adds CLS/SEP) reads as the run's vocabulary."""
    config = self.config
    deciding = [config['normalizer'], config['pre_tokenizer'], config['model'],
                [t for t in config['added_tokens'] if not t['special']],
                [self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id]]
    return hashlib.sha256(json.dumps(deciding, sort_keys=True).encode()).hexdigest()


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
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  tmp_path = f'{path}.tmp{os.getpid()}'
  with open(tmp_path, 'wb') as f:
    f.write(data)
  os.replace(tmp_path, path)


def train_vocab(files: Sequence[str], vocab_size: int, out_prefix: str, *,
                max_sentences: int = 1_000_000, seed: int = 0,
                model_type: str = 'unigram', lowercase: bool = False,
                vocab_type: str = 'sentencepiece') -> 'AnyVocab':
  """Trains a vocabulary on the files and writes `trained_files(out_prefix, vocab_type)`.

  Byte-identical for the same corpus, size, seed and sentencepiece: the lines are sampled here
  (a uniform sample of the non-blank lines; sentencepiece's `input_sentence_size` differs between
  runs even with `set_random_generator_seed` and one thread), and the proto is written here, so
  it does not record `out_prefix` as sentencepiece would.
  """
  check_sample_size(max_sentences)
  lines = (line for document in text.read_documents(files) for line in document)
  sample = reservoir_sample(lines, max_sentences, np.random.default_rng(seed))
  return train_vocab_on_sentences(sample, vocab_size, out_prefix, text.describe_files(files),
                                  model_type=model_type, lowercase=lowercase,
                                  vocab_type=vocab_type)


def trained_files(out_prefix: str, vocab_type: str) -> list[str]:
  """The files training writes, the vocabulary itself last: sentencepiece's `out_prefix.vocab`
  and `.model`, or a tokenizer.json in `out_prefix`'s directory."""
  if vocab_type == 'sentencepiece':
    return [out_prefix + '.vocab', out_prefix + '.model']
  return [os.path.join(os.path.dirname(out_prefix), TOKENIZER_JSON)]


def check_sample_size(max_sentences: int) -> None:
  if max_sentences <= 0:
    raise UsageError(f'the vocabulary sample size must be positive, got {max_sentences}; '
                     'set --config.data.vocab_sample_sentences to e.g. 1000000')


# Seconds per MB of sampled text each trainer took on a busy 2-core CPU (16 MB of Wikipedia,
# 30,522 pieces): a rough estimate for the start line, as sentencepiece reports no progress.
SECONDS_PER_MB = {'sentencepiece': 2.3, 'bpe': 0.6, 'wordpiece': 1.2}


def train_vocab_on_sentences(sentences: Sequence[str], vocab_size: int, out_prefix: str,
                             corpus: str, *, model_type: str = 'unigram',
                             lowercase: bool = False,
                             vocab_type: str = 'sentencepiece') -> 'AnyVocab':
  """Trains on sampled lines of `corpus` (its name, for messages); see train_vocab.

  With `lowercase` the model itself folds case (nmt_nfkc_cf), so every encoder of it, the
  exported tokenizer.json too, reads "The" as "the", like BERT's uncased vocabularies.
  `vocab_type` 'bpe' or 'wordpiece' trains with `tokenizers` instead (train_tokenizer_json).
  """
  if not sentences:
    raise UsageError(f'corpus {corpus} holds no text (only blank lines); '
                     'check data.train_files')
  if vocab_type not in SECONDS_PER_MB:
    raise UsageError(f'data.vocab_type={vocab_type!r}: use one of {", ".join(SECONDS_PER_MB)}')
  megabytes = sum(len(line.encode('utf-8')) for line in sentences) / 1e6
  kind = f'sentencepiece {model_type}' if vocab_type == 'sentencepiece' else vocab_type
  seconds = max(1, round(SECONDS_PER_MB[vocab_type] * megabytes))
  logging.info(f'vocabulary: training a {kind} vocabulary of {vocab_size:,} pieces on '
               f'{len(sentences):,} lines ({megabytes:.1f} MB) sampled from {corpus}; it reports '
               f'no progress: roughly {seconds} s on a 2-core CPU')
  started = time.perf_counter()
  if vocab_type != 'sentencepiece':
    vocab = train_tokenizer_json(sentences, vocab_type, vocab_size,
                                 trained_files(out_prefix, vocab_type)[-1], corpus,
                                 lowercase=lowercase)
  else:
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
    _write_atomically(out_prefix + '.model', model.getvalue())
    vocab = load_vocab(out_prefix + '.model')
    # The human-readable listing sentencepiece would write: piece, tab, score.
    listing = ''.join(f'{vocab.processor.id_to_piece(i)}\t{vocab.processor.get_score(i):g}\n'
                      for i in range(vocab.size))
    _write_atomically(out_prefix + '.vocab', listing.encode('utf-8'))
  logging.info('vocabulary: trained in %.1f s (%s pieces)', time.perf_counter() - started,
               f'{vocab.size:,}')
  return vocab


# The special tokens of the vocabularies trained with `tokenizers`, as ids 0-4 in sentencepiece's
# order: padding first, since the model's attention mask is `input_ids != 0` (RoBERTa's <s> is 0).
TRAINED_SPECIALS = {'bpe': ('<pad>', '<unk>', '<s>', '</s>', '<mask>'),
                    'wordpiece': SPECIAL_PIECES}
BYTE_LEVEL_SPACE = '\u0120'  # 'Ġ': byte-level BPE's mark of a piece that begins with a space


def byte_level_bpe(lowercase: bool) -> tokenizers.Tokenizer:
  """RoBERTa's byte-level BPE pipeline, untrained, with a space before each line's first word too:
  a line's first word then has the pieces (and the word start) it has mid-line."""
  tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
  if lowercase:
    tokenizer.normalizer = normalizers.Lowercase()
  tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
  tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)  # spans without the space
  tokenizer.decoder = decoders.ByteLevel()
  return tokenizer


def _trained_wordpiece(sentences: Sequence[str], vocab_size: int,
                       lowercase: bool) -> tokenizers.Tokenizer:
  """BERT's tokenizer over WordPiece pieces trained on `sentences`, the specials ids 0-4.

  The trainer numbers the '##' forms of characters in hash-map order, and breaks ties between
  equally frequent merges by those numbers; a first pass lists them so that the second, given
  them sorted, is deterministic.
  """
  specials = list(TRAINED_SPECIALS['wordpiece'])
  probe = bert_tokenizer(specials, lowercase)
  probe.train_from_iterator(sentences, trainers.WordPieceTrainer(
      vocab_size=0, special_tokens=specials, show_progress=False))
  continuations = sorted(p for p in probe.get_vocab() if p.startswith('##'))
  tokenizer = bert_tokenizer(specials, lowercase)
  tokenizer.train_from_iterator(sentences, trainers.WordPieceTrainer(
      vocab_size=vocab_size, special_tokens=specials + continuations, show_progress=False))
  ids = tokenizer.get_vocab()
  tokenizer = bert_tokenizer(sorted(ids, key=ids.get), lowercase)
  tokenizer.add_special_tokens(specials)
  return tokenizer


def train_tokenizer_json(sentences: Sequence[str], vocab_type: str, vocab_size: int,
                         out_path: str, corpus: str, *,
                         lowercase: bool = False) -> TokenizerJsonVocab:
  """Trains a byte-level BPE (RoBERTa's) or a WordPiece (BERT's) vocabulary of exactly
  `vocab_size` pieces on `sentences` with `tokenizers`, writes it to `out_path` (a
  tokenizer.json) and loads it. Deterministic: the same lines give the same file."""
  if vocab_type == 'bpe':
    tokenizer = byte_level_bpe(lowercase)
    specials = [tokenizers.AddedToken(t, special=True, normalized=False,
                                      lstrip=t == '<mask>')  # RoBERTa's: " <mask>" is one token
                for t in TRAINED_SPECIALS['bpe']]
    tokenizer.train_from_iterator(sentences, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  else:
    tokenizer = _trained_wordpiece(sentences, vocab_size, lowercase)
  size = tokenizer.get_vocab_size()
  if size < vocab_size:
    raise UsageError(
        f'corpus {corpus} is too small for a {vocab_type} vocabulary of {vocab_size} pieces (at '
        f'most {size}); set --config.model.vocab_size={size} (or smaller) or add text')
  if size > vocab_size:
    raise UsageError(
        f'a {vocab_type} vocabulary of corpus {corpus} needs {size} pieces for its alphabet '
        f'and special tokens alone; set --config.model.vocab_size={size} or larger')
  _write_atomically(out_path, tokenizer.to_str(pretty=True).encode('utf-8'))
  return load_tokenizer_json(out_path)


def load_vocab(model_path: str) -> 'AnyVocab':
  """Loads a sentencepiece .model (checking that ids 0-4 are the specials), a WordPiece .txt, or
  a tokenizer.json (or a directory that holds one)."""
  if model_path.endswith('.txt'):
    return load_wordpiece(model_path)
  if model_path.endswith('.json') or os.path.isdir(model_path):
    return load_tokenizer_json(model_path)
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


def load_wordpiece(path: str, lowercase: bool | None = None) -> WordPieceVocab:
  """Loads a vocab.txt, a piece per line (the line number is the id); `lowercase=None` reads it
  as uncased where no piece but the [SPECIALS] holds an uppercase letter: vocab.txt does not
  record its casing, and this tells Google's uncased and cased vocabularies apart."""
  if not os.path.isfile(path):
    raise UsageError(f"WordPiece vocabulary '{path}' does not exist; check the path")
  try:
    with open(path, encoding='utf-8') as f:
      pieces = [line.rstrip('\r\n') for line in f]
  except (OSError, UnicodeDecodeError) as e:
    raise UsageError(f"cannot read WordPiece vocabulary '{path}' ({e}); "
                     'point at a UTF-8 vocab.txt with one piece per line') from None
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
    lowercase = not any(p != p.lower() for p in pieces
                        if not (p.startswith('[') and p.endswith(']')))
  pad, unk, cls, sep, mask = (ids[t] for t in SPECIAL_PIECES)
  return WordPieceVocab(tokenizer=bert_tokenizer(pieces, lowercase), pieces=tuple(pieces),
                        lowercase=lowercase, model_path=path, size=len(pieces), pad_id=pad,
                        unk_id=unk, cls_id=cls, sep_id=sep, mask_id=mask)


# The names a special token goes by, in each role: BERT's, RoBERTa's, then rarer spellings.
SPECIAL_NAMES = {'pad': ('[PAD]', '<pad>'), 'unk': ('[UNK]', '<unk>'),
                 'cls': ('[CLS]', '<s>', '<cls>', '[BOS]', '<bos>'),
                 'sep': ('[SEP]', '</s>', '<sep>', '[EOS]', '<eos>'),
                 'mask': ('[MASK]', '<mask>')}
_ROLES = {'mask': 'mask', 'sep': 'separator (SEP/EOS)', 'cls': 'classification (CLS/BOS)',
          'pad': 'padding'}


def vocab_file(path: str) -> str:
  """The vocabulary file `path` names: itself, or a directory's tokenizer.json (as a Hugging Face
  model directory holds it)."""
  return os.path.join(path, TOKENIZER_JSON) if path and os.path.isdir(path) else path


def vocab_name(path: str) -> str:
  """The name a copy of the vocabulary file `path` takes in a workdir or prepared directory."""
  if path.endswith('.txt'):
    return 'vocab.txt'
  return TOKENIZER_JSON if path.endswith('.json') else 'vocab.model'


def components(node: dict | None) -> list[dict]:
  """A normalizer, pre-tokenizer or post-processor and, within a Sequence, each member."""
  if not node:
    return []
  members = [m for key in ('normalizers', 'pretokenizers', 'processors') if key in node
             for m in node[key]]
  return [node] + [part for member in members for part in components(member)]


def _special_ids(tokenizer: tokenizers.Tokenizer, config: dict) -> dict[str, int]:
  """Role -> id: CLS and SEP as the post-processor adds them around one text, the unknown token
  as the model names it, the rest by name among the special added tokens, then all tokens."""
  found = {}
  for part in components(config['post_processor']):
    if part['type'] in ('BertProcessing', 'RobertaProcessing'):
      found.update(cls=part['cls'][1], sep=part['sep'][1])
    elif part['type'] == 'TemplateProcessing' and part['single']:
      for role, piece in (('cls', part['single'][0]), ('sep', part['single'][-1])):
        ids = part['special_tokens'][piece['SpecialToken']['id']]['ids'] \
            if 'SpecialToken' in piece else []
        if len(ids) == 1:
          found[role] = ids[0]
  model = config['model']
  if model['type'] == 'Unigram':
    unk = model['unk_id']
  else:  # BPE, WordPiece and WordLevel name it
    unk = tokenizer.token_to_id(model['unk_token']) if model['unk_token'] else None
  if unk is not None:
    found['unk'] = unk
  special = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special}
  every = tokenizer.get_vocab(with_added_tokens=True)
  for role, names in SPECIAL_NAMES.items():
    for table in (special, every):
      name = next((n for n in names if n in table), None)
      if role not in found and name:
        found[role] = table[name]
  return found


def _check_specials(ids: dict[str, int], tokenizer: tokenizers.Tokenizer, path: str) -> None:
  """Refuses what packing and masking cannot use: a missing role, or an id shared by two."""
  missing = [role for role in _ROLES if role not in ids]
  if missing:
    looked = '; '.join(f'{_ROLES[r]}: {", ".join(SPECIAL_NAMES[r])}' for r in missing)
    raise UsageError(
        f"tokenizer '{path}' has no {' and no '.join(_ROLES[r] for r in missing)} token "
        f"(looked in its post-processor and for the names {looked}); add them with "
        "tokenizer.add_special_tokens([...]) and save it again, or leave data.vocab_model empty "
        'to train a vocabulary (--config.data.vocab_type=bpe or wordpiece)')
  shared = [(a, b) for a, b in itertools.combinations(_ROLES, 2)
            if ids[a] == ids[b] and {a, b} != {'cls', 'sep'}]
  if shared:
    a, b = shared[0]
    raise UsageError(f"tokenizer '{path}' uses {tokenizer.id_to_token(ids[a])!r} as both its "
                     f'{_ROLES[a]} and its {_ROLES[b]} token; give each role a token of its own')


def _encoder_of(config: dict) -> tokenizers.Tokenizer:
  """The tokenizer of a tokenizer.json's JSON, as training encodes: whole lines, no padding."""
  tokenizer = tokenizers.Tokenizer.from_str(json.dumps(config))
  tokenizer.no_truncation()
  tokenizer.no_padding()
  tokenizer.encode_special_tokens = True  # "[MASK]" in the text is text, as for the other kinds
  return tokenizer


def load_tokenizer_json(path: str) -> TokenizerJsonVocab:
  """Loads a tokenizer.json (or a directory's) and finds its special tokens by role."""
  path = vocab_file(path)
  if not os.path.isfile(path):
    raise UsageError(f"tokenizer '{path}' does not exist; check data.vocab_model (a "
                     'tokenizer.json, or a directory that holds one)')
  try:
    with open(path, encoding='utf-8') as f:
      tokenizer = tokenizers.Tokenizer.from_str(f.read())
  except Exception as e:  # pylint: disable=broad-except  (tokenizers raises plain Exception)
    detail = ' '.join(str(e).split())
    raise UsageError(f"'{path}' is not a tokenizers tokenizer.json ({detail}); point "
                     'data.vocab_model at the tokenizer.json a Hugging Face tokenizer saves'
                     ) from None
  # Read back as tokenizers writes it: every field present, whoever wrote the file.
  config = json.loads(tokenizer.to_str())
  if config['model']['type'] == 'BPE' and config['model']['dropout']:
    config['model']['dropout'] = None  # BPE dropout segments each call anew; training reads one
  tokenizer = _encoder_of(config)
  ids = _special_ids(tokenizer, config)
  _check_specials(ids, tokenizer, path)
  file_pad_id = ids['pad']
  if file_pad_id:  # RoBERTa's and ModernBERT's: the attention mask is input_ids != 0
    config = swap_ids(config, 0, file_pad_id)
    tokenizer = _encoder_of(config)
    ids = _special_ids(tokenizer, config)
    logging.info("tokenizer '%s' pads with id %d: read with ids 0 and %d swapped, as its "
                 'imported weights are; an export writes the swapped tokenizer', path,
                 file_pad_id, file_pad_id)
  lowercase = any(part['type'] == 'Lowercase' or part['type'] == 'BertNormalizer' and
                  part['lowercase'] for part in components(config['normalizer']))
  return TokenizerJsonVocab(
      tokenizer=tokenizer, config=config,
      specials={role: tokenizer.id_to_token(i) for role, i in ids.items()},
      kind=config['model']['type'].lower(), lowercase=lowercase, model_path=path,
      size=max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1,
      pad_id=ids['pad'], unk_id=ids['unk'] if 'unk' in ids else ids['pad'], cls_id=ids['cls'],
      sep_id=ids['sep'], mask_id=ids['mask'], file_pad_id=file_pad_id)


def swap_ids(config: dict, a: int, b: int) -> dict:
  """A tokenizer.json (as tokenizers writes it) in which ids `a` and `b` trade places: in the
  model's vocabulary, the added tokens and the post-processor, the ids a text can take."""
  config = json.loads(json.dumps(config))
  other = lambda i: b if i == a else a if i == b else i
  model = config['model']
  if model['type'] == 'Unigram':
    pieces = model['vocab']
    pieces[a], pieces[b] = pieces[b], pieces[a]
    model['unk_id'] = None if model['unk_id'] is None else other(model['unk_id'])
  else:
    model['vocab'] = {piece: other(i) for piece, i in model['vocab'].items()}
  for token in config['added_tokens']:
    token['id'] = other(token['id'])
  for part in components(config['post_processor']):
    if part['type'] in ('BertProcessing', 'RobertaProcessing'):
      for role in ('cls', 'sep'):
        part[role][1] = other(part[role][1])
    elif part['type'] == 'TemplateProcessing':
      for special in part['special_tokens'].values():
        special['ids'] = [other(i) for i in special['ids']]
  config['padding'] = None
  return config


def word_marks(vocab: TokenizerJsonVocab) -> tuple[str, bool] | None:
  """(mark, begins): a piece starting with `mark` begins a word (byte-level 'Ġ', Metaspace's
  '▁') or, where `begins` is False, continues one (WordPiece's '##'); None if neither is known."""
  model = vocab.config['model']
  if model['type'] in ('BPE', 'WordPiece') and model['continuing_subword_prefix']:
    return model['continuing_subword_prefix'], False
  if model['type'] == 'BPE' and model['end_of_word_suffix']:
    return None  # a piece begins a word after one that ends with the suffix: not per piece
  for part in (components(vocab.config['pre_tokenizer']) +
               components(vocab.config['normalizer'])):
    if part['type'] == 'ByteLevel':
      return BYTE_LEVEL_SPACE, True
    if part['type'] == 'Metaspace':
      return part['replacement'], True
    if part['type'] == 'Prepend':  # Llama's normalizer: '▁' before the text, for its spaces
      return part['prepend'], True
  return None


AnyVocab = Vocab | WordPieceVocab | TokenizerJsonVocab


def check_casing(vocab: AnyVocab, lowercase: bool) -> None:
  """Refuses data.vocab_lowercase=True over a cased vocabulary already on disk: the run would
  silently train on its cased pieces."""
  if lowercase and not vocab.lowercase:
    raise UsageError(f'data.vocab_lowercase=True, but {vocab.model_path} is a cased vocabulary '
                     'that this run would keep using; prepare into a new directory (or use a new '
                     '--workdir) so that a lowercased vocabulary is trained, or drop '
                     '--config.data.vocab_lowercase')


def vocab_type_of(vocab: AnyVocab) -> str:
  """'sentencepiece', 'wordpiece', or a tokenizer.json's model ('bpe', 'unigram', ...)."""
  if isinstance(vocab, TokenizerJsonVocab):
    return vocab.kind
  return 'wordpiece' if isinstance(vocab, WordPieceVocab) else 'sentencepiece'


def check_type(vocab: AnyVocab, vocab_type: str) -> None:
  """Refuses a data.vocab_type other than the default over a vocabulary of another kind already
  on disk: the run would silently keep using it."""
  kind = vocab_type_of(vocab)
  if vocab_type != 'sentencepiece' and kind != vocab_type:
    raise UsageError(f'data.vocab_type={vocab_type!r}, but {vocab.model_path} is a {kind} '
                     'vocabulary that this run would keep using; prepare into a new directory (or '
                     f'use a new --workdir) so that a {vocab_type} vocabulary is trained, or drop '
                     '--config.data.vocab_type')


def vocab_fingerprint(vocab: AnyVocab) -> str:
  """What identifies the vocabulary's ids, recorded with prepared data (see Vocab.fingerprint)."""
  return vocab.fingerprint()


WORD_START = '\u2581'  # sentencepiece's mark of a piece that begins a word


def word_starts(vocab: AnyVocab) -> bytes:
  """One byte per id, 1 where the piece begins a word: what whole-word and span masking read.

  Control pieces are words of their own; sentencepiece's [UNK] and byte pieces continue the
  word they stand in (after '▁' when they begin it), while WordPiece's [UNK] is a whole word.
  A tokenizer.json's added tokens but the unknown one are words of their own; its other pieces
  are read by word_marks.
  """
  if isinstance(vocab, WordPieceVocab):
    starts = [not piece.startswith('##') for piece in vocab.pieces]
  elif isinstance(vocab, TokenizerJsonVocab):
    marks = word_marks(vocab)
    if marks is None:
      raise UsageError(
          f"cannot tell which pieces of '{vocab.model_path}' begin a word: its {vocab.kind} model "
          'has no continuing-subword prefix, and no ByteLevel or Metaspace step marks word starts; '
          'use --config.masking=token')
    mark, begins = marks
    added = vocab.tokenizer.get_added_tokens_decoder()
    pieces = (vocab.tokenizer.id_to_token(i) for i in range(vocab.size))
    starts = [i in added and i != vocab.unk_id or piece is None or
              piece.startswith(mark) == begins for i, piece in enumerate(pieces)]
  else:
    processor = vocab.processor
    starts = [processor.id_to_piece(i).startswith(WORD_START) or processor.is_control(i)
              or processor.is_unused(i) for i in range(vocab.size)]
  return np.asarray(starts, np.uint8).tobytes()
