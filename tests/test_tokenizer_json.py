"""tokenizer.json vocabularies: given ones (built here with `tokenizers`, as BERT's, RoBERTa's and
a unigram tokenizer are) and the byte-level BPE and WordPiece ones data.vocab_type trains.

Each is judged by the libraries themselves on WikiText-2: our ids are `tokenizers`' own, the word
starts cut a line into its words, and AutoTokenizer on the export gives the pretraining layout.
"""

import json
import os
import shutil
import subprocess
import sys
import types

os.environ.setdefault('HF_HUB_OFFLINE', '1')  # the exported files must load without a network

import numpy as np
import pytest
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers
import transformers

from conftest import REPO, load_config
from electra_jax.common import config as config_lib
from electra_jax.common.errors import UsageError
from electra_jax.data import store, vocab as vocab_lib
from electra_jax.hf import importing, tokenizer as tokenizer_lib
from electra_jax.training import inputs
from test_tokenizer_export import packed, wikitext_lines

GIVEN = ('bert', 'roberta', 'unigram')
LINES = 2000  # of wiki.test.raw, blank ones included: 1,308 hold text
TRAINED = ('bpe', 'wordpiece')
# The names each given tokenizer uses for the roles, at ids the trained ones do not have.
NAMES = {'bert': {'pad': '[PAD]', 'unk': '[UNK]', 'cls': '[CLS]', 'sep': '[SEP]', 'mask': '[MASK]'},
         'roberta': {'pad': '<pad>', 'unk': '<unk>', 'cls': '<s>', 'sep': '</s>', 'mask': '<mask>'},
         'unigram': {'pad': '<pad>', 'unk': '<unk>', 'cls': '[CLS]', 'sep': '[SEP]',
                     'mask': '[MASK]'}}


def corpus(wikitext, count=2000):
  lines = (wikitext / 'wiki.valid.raw').read_text(encoding='utf-8').split('\n')
  return [line for line in lines if line.strip()][:count]


def given_tokenizer(kind: str, lines) -> tokenizers.Tokenizer:
  """A tokenizer as the Hub has them, trained on `lines`: BERT's WordPiece (uncased, an unused
  piece before [UNK]), RoBERTa's byte-level BPE (its post-processor, no prefix space, truncation,
  padding and dropout set) or a unigram model with Metaspace and no post-processor."""
  if kind == 'bert':
    tokenizer = tokenizers.Tokenizer(models.WordPiece(unk_token='[UNK]'))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    specials = ['[PAD]', '[unused0]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
    tokenizer.train_from_iterator(lines, trainers.WordPieceTrainer(
        vocab_size=800, special_tokens=specials, show_progress=False))
    tokenizer.post_processor = processors.TemplateProcessing(
        single='[CLS] $A [SEP]', pair='[CLS] $A [SEP] $B:1 [SEP]:1',
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in ('[CLS]', '[SEP]')])
  elif kind == 'roberta':
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=800, special_tokens=['<pad>', '<s>', '</s>', '<unk>', '<mask>'],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer.post_processor = processors.RobertaProcessing(('</s>', 2), ('<s>', 1))
    tokenizer.enable_truncation(16)
    tokenizer.enable_padding(length=64)
    tokenizer.model.dropout = 0.5
  else:
    tokenizer = tokenizers.Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(lines, trainers.UnigramTrainer(
        vocab_size=800, special_tokens=['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]'],
        unk_token='<unk>', show_progress=False))
  return tokenizer


def reference(path) -> tokenizers.Tokenizer:
  """The file as `tokenizers` reads it, minus what no training encodes with."""
  tokenizer = tokenizers.Tokenizer.from_file(str(path))
  tokenizer.no_truncation()
  tokenizer.no_padding()
  if isinstance(tokenizer.model, models.BPE):
    tokenizer.model.dropout = None
  return tokenizer


@pytest.fixture(scope='module')
def sample(wikitext):
  return corpus(wikitext)


@pytest.fixture(scope='module', params=GIVEN + TRAINED)
def vocab(request, tmp_path_factory, wikitext, sample):
  directory = tmp_path_factory.mktemp(request.param)
  if request.param in GIVEN:
    given_tokenizer(request.param, sample).save(str(directory / 'tokenizer.json'))
    return vocab_lib.load_vocab(str(directory))  # a directory, as a Hugging Face one
  return vocab_lib.train_vocab([str(wikitext / 'wiki.valid.raw')], 1000, str(directory / 'vocab'),
                               max_sentences=2000, vocab_type=request.param)


def kind_of(vocab):
  return os.path.basename(os.path.dirname(vocab.model_path)).rstrip('0123456789')


def test_ids_are_the_tokenizers_librarys(vocab, wikitext):
  lines = wikitext_lines(wikitext)[:LINES]
  theirs = reference(vocab.model_path).encode_batch(lines, add_special_tokens=False)
  assert vocab.encode(lines) == [encoding.ids for encoding in theirs]
  assert max(map(len, vocab.encode(lines))) > 64  # the file's truncation and padding are off
  offsets = vocab.encode_with_offsets(lines[:50])
  assert [ids for ids, _ in offsets] == vocab.encode(lines[:50])
  assert all(0 <= s <= e <= len(line) for line, (_, spans) in zip(lines, offsets) for s, e in spans)


def test_special_tokens_are_found_by_role(vocab):
  kind = kind_of(vocab)
  found = {'pad': vocab.pad_id, 'unk': vocab.unk_id, 'cls': vocab.cls_id, 'sep': vocab.sep_id,
           'mask': vocab.mask_id}
  if kind in NAMES:
    ids = {role: vocab.tokenizer.token_to_id(name) for role, name in NAMES[kind].items()}
    assert found == ids and ids['pad'] == 0 and len(set(ids.values())) == 5
  else:  # trained: sentencepiece's ids 0-4
    assert found == {'pad': 0, 'unk': 1, 'cls': 2, 'sep': 3, 'mask': 4}
    assert [vocab.specials[role] for role in found] == list(vocab_lib.TRAINED_SPECIALS[kind])
  assert vocab.size == vocab.tokenizer.get_vocab_size()
  # Special-token text in the corpus stays text, as with the other kinds of vocabulary.
  text = f'a {vocab.specials["mask"]} b'
  assert vocab.mask_id not in vocab.encode([text])[0]


def expected_words(vocab, line: str) -> list[str]:
  """A line's words as the tokenizer cuts it: BERT's pre-tokenizer's (punctuation apart), else
  the normalized text's whitespace-separated words."""
  normalized = reference(vocab.model_path).normalizer
  text = normalized.normalize_str(line) if normalized else line
  if vocab.kind == 'wordpiece':
    return [word for word, _ in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(text)]
  return text.split()


def test_word_starts_cut_each_line_into_its_words(vocab, wikitext):
  starts = np.frombuffer(vocab_lib.word_starts(vocab), np.uint8)
  assert len(starts) == vocab.size
  decoder = reference(vocab.model_path)
  lines = [l for l in wikitext_lines(wikitext)[:LINES] if l.strip() and '  ' not in l.strip()]
  agree = checked = 0
  for line, ids in zip(lines, vocab.encode(lines)):
    if vocab.unk_id in ids and vocab.unk_id != vocab.pad_id:
      continue  # an unknown piece decodes to no text
    cuts = [i for i, token in enumerate(ids) if starts[token]] + [len(ids)]
    words = [decoder.decode(ids[a:b]).strip() for a, b in zip(cuts, cuts[1:])]
    words = [word for word in words if word]  # a line's last space is a piece of its own
    checked += 1
    agree += cuts[0] == 0 and words == expected_words(vocab, line)
  print(f'{kind_of(vocab)}: word starts cut {agree} of {checked} lines into their words')
  assert checked > 1000 and agree == checked


def test_export_gives_the_training_ids(vocab, wikitext, tmp_path):
  tokenizer_lib.write_tokenizer(vocab, str(tmp_path), model_max_length=512)
  assert sorted(os.listdir(tmp_path)) == ['special_tokens_map.json', 'tokenizer.json',
                                           'tokenizer_config.json']
  hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
  lines = wikitext_lines(wikitext)[:LINES]
  encoded = hf(lines)
  singles = [packed(vocab, ids, None) for ids in vocab.encode(lines)]
  assert list(zip(encoded['input_ids'], encoded['token_type_ids'])) == singles
  texts = [line for line in lines if line.strip()]  # packing makes no pair with an empty B
  firsts, seconds = texts[:-1:2], texts[1::2]
  encoded = hf(firsts, seconds)
  pairs = [packed(vocab, a, b) for a, b in zip(vocab.encode(firsts), vocab.encode(seconds))]
  assert list(zip(encoded['input_ids'], encoded['token_type_ids'])) == pairs
  assert (hf.pad_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id) == (
      vocab.pad_id, vocab.cls_id, vocab.sep_id, vocab.mask_id)
  assert hf.unk_token_id == vocab.unk_id and hf.model_input_names[1] == 'token_type_ids'
  # Read back (import, fine-tuning from the export): the same vocabulary, the same ids.
  exported = vocab_lib.load_vocab(str(tmp_path))
  assert exported.fingerprint() == vocab.fingerprint()
  assert exported.encode(lines) == vocab.encode(lines)


def test_trained_vocabularies_are_deterministic_and_honour_casing(wikitext, tmp_path):
  files = [str(wikitext / 'wiki.valid.raw')]
  for vocab_type, size in (('wordpiece', 4000), ('bpe', 1000)):
    written = []
    for attempt in range(2):  # WordPiece numbers pieces in hash-map order unless made not to
      vocab_lib.train_vocab(files, size, str(tmp_path / f'{attempt}' / 'vocab'), seed=3,
                            vocab_type=vocab_type)
      written.append((tmp_path / f'{attempt}' / 'tokenizer.json').read_bytes())
    assert written[0] == written[1], vocab_type
    uncased = vocab_lib.train_vocab(files, 800, str(tmp_path / 'uncased' / 'vocab'),
                                    max_sentences=2000, lowercase=True, vocab_type=vocab_type)
    assert uncased.lowercase and uncased.encode(['The Tower']) == uncased.encode(['the tower'])
    cased = vocab_lib.load_vocab(str(tmp_path / '0'))
    assert not cased.lowercase and cased.encode(['The']) != cased.encode(['the'])
    assert vocab_lib.vocab_type_of(cased) == vocab_type


def test_sizes_a_corpus_cannot_give_are_refused(wikitext, tmp_path):
  files = [str(wikitext / 'wiki.valid.raw')]
  cases = [('bpe', 200, 2000, r'needs 261 pieces .*vocab_size=261 or larger'),
           ('wordpiece', 100, 2000, r'needs \d+ pieces for its alphabet'),
           ('bpe', 5000, 20, r'too small for a bpe vocabulary of 5000 pieces \(at most \d+\)'),
           ('wordpiece', 5000, 20, r'too small .* set --config.model.vocab_size=\d+')]
  for vocab_type, size, lines, message in cases:
    with pytest.raises(UsageError, match=message) as error:
      vocab_lib.train_vocab(files, size, str(tmp_path / 'vocab'), max_sentences=lines,
                            vocab_type=vocab_type)
    assert '\n' not in str(error.value)
  assert not (tmp_path / 'tokenizer.json').exists()


def word_level(path, tokens, post_processor=None):
  """A tokenizer.json over `tokens` (id = position) with no training: for the refusals."""
  tokenizer = tokenizers.Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)},
                                                    unk_token=None))
  tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
  tokenizer.add_special_tokens([t for t in tokens if t[0] in '[<'])
  tokenizer.post_processor = post_processor
  tokenizer.save(str(path))
  return str(path)


def test_tokenizers_it_cannot_train_with_are_refused_in_one_line(tmp_path):
  cases = [
      (['[PAD]', '[UNK]', '[CLS]', '[SEP]', 'a'], r"has no mask token \(looked"),
      (['<pad>', '<mask>', 'a'], r'no separator \(SEP/EOS\) and no classification \(CLS/BOS\) '
                                 r'token'),
      (['[PAD]', '[CLS]', '[MASK]', 'a'], r'no separator'),
  ]
  for number, (tokens, message) in enumerate(cases):
    with pytest.raises(UsageError, match=message) as error:
      vocab_lib.load_vocab(word_level(tmp_path / f'{number}.json', tokens))
    assert '\n' not in str(error.value) and 'leave data.vocab_model empty' in str(error.value)
  (tmp_path / 'not.json').write_text('{"model": 1}')
  with pytest.raises(UsageError, match='is not a tokenizers tokenizer.json'):
    vocab_lib.load_vocab(str(tmp_path / 'not.json'))
  os.makedirs(tmp_path / 'empty')
  with pytest.raises(UsageError, match='tokenizer.json.* does not exist'):
    vocab_lib.load_vocab(str(tmp_path / 'empty'))
  # The post-processor names CLS and SEP whatever they are called; no unknown token: pad's id.
  template = processors.TemplateProcessing(single='<go> $A <stop>',
                                           special_tokens=[('<go>', 1), ('<stop>', 2)])
  vocab = vocab_lib.load_vocab(word_level(tmp_path / 'w.json', ['<pad>', '<go>', '<stop>',
                                                                 '<mask>', 'a', 'b'], template))
  assert (vocab.cls_id, vocab.sep_id, vocab.unk_id, vocab.mask_id) == (1, 2, 0, 3)
  assert vocab.encode(['a b'])[0] == [4, 5]
  with pytest.raises(UsageError, match='begin a word.*--config.masking=token'):
    vocab_lib.word_starts(vocab)  # a word-level model marks no word starts


@pytest.mark.parametrize('processor', ['roberta', 'template'])
def test_a_tokenizer_padding_off_id_0_is_read_with_padding_swapped_to_0(tmp_path, processor):
  """RoBERTa pads with 1 (<s> is 0), ModernBERT with 50283: read with the two ids swapped, so
  the attention mask input_ids != 0 holds, and exported so that transformers gives our ids."""
  tokens = ['<s>', '<pad>', '</s>', '<unk>', '<mask>', 'a', 'b', 'c']
  post = (processors.RobertaProcessing(('</s>', 2), ('<s>', 0)) if processor == 'roberta' else
          processors.TemplateProcessing(single='<s> $A </s>',
                                        special_tokens=[('<s>', 0), ('</s>', 2)]))
  path = word_level(tmp_path / 'padded_at_1.json', tokens, post)
  vocab = vocab_lib.load_vocab(path)
  assert (vocab.pad_id, vocab.cls_id, vocab.sep_id, vocab.mask_id, vocab.file_pad_id) == (
      0, 1, 2, 4, 1)
  swap = lambda ids: [{0: 1, 1: 0}.get(i, i) for i in ids]
  original = tokenizers.Tokenizer.from_file(path)
  original.encode_special_tokens = True  # as ours reads "<pad>" in a text: as plain text
  for text in ('a b c', 'c <pad> a', '<s> b'):
    assert vocab.encode([text])[0] == swap(original.encode(text, add_special_tokens=False).ids)
  exported = tokenizers.Tokenizer.from_str(json.dumps(tokenizer_lib.json_tokenizer(vocab)))
  assert exported.encode('a b').ids == [1, 5, 6, 2]
  assert vocab_lib.load_vocab(path).fingerprint() == vocab.fingerprint()  # read the same again


def tiny_config(**data):
  config = config_lib.resolve(load_config('tiny'))
  config.data.update(data)
  return config


def test_a_run_keeps_its_tokenizer_json(wikitext, tmp_path, sample):
  given = tmp_path / 'hf_model'
  os.makedirs(given)
  given_tokenizer('bert', sample).save(str(given / 'tokenizer.json'))
  size = vocab_lib.load_vocab(str(given)).size
  config = tiny_config(train_files=str(wikitext / 'wiki.valid.raw'), vocab_model=str(given))
  config.model.vocab_size = size
  run = tmp_path / 'run'
  os.makedirs(run)  # as train.py makes it
  vocab = inputs.setup_vocab(config, str(run))
  assert (run / 'tokenizer.json').read_bytes() == (given / 'tokenizer.json').read_bytes()
  assert vocab.model_path == str(run / 'tokenizer.json')
  assert inputs.run_vocab_path(str(run)) == str(run / 'tokenizer.json')
  config.data.vocab_model = ''  # resumed without the flag
  again = inputs.setup_vocab(config, str(run))
  assert again.fingerprint() == inputs.load_run_vocab(str(run), str(tmp_path)).fingerprint() \
      == vocab.fingerprint()
  # A prepared directory holding a tokenizer.json gives it to the run.
  prepared = tmp_path / 'prepared'
  os.makedirs(prepared)
  shutil.copy(given / 'tokenizer.json', prepared)
  config = tiny_config(prepared_dir=str(prepared))
  config.model.vocab_size = size
  os.makedirs(tmp_path / 'run2')
  assert inputs.setup_vocab(config, str(tmp_path / 'run2')).fingerprint() == vocab.fingerprint()
  config.data.vocab_type = 'bpe'
  with pytest.raises(UsageError, match=r"vocab_type='bpe', but .* is a wordpiece vocabulary"):
    inputs.setup_vocab(config, str(tmp_path / 'run3'))


def test_vocab_type_is_checked_with_the_config(wikitext):
  config = tiny_config(train_files=str(wikitext / 'wiki.valid.raw'), vocab_type='unigram')
  with pytest.raises(UsageError, match='vocab_type=.unigram.: use one of sentencepiece, bpe'):
    config_lib.validate(config, 1)
  config.data.update(vocab_type='bpe', vocab_model='tokenizer.json')
  with pytest.raises(UsageError, match='trains a vocabulary, and data.vocab_model'):
    config_lib.validate(config, 1)
  assert config_lib.default_config().data.vocab_type == 'sentencepiece'


def test_import_takes_a_directorys_tokenizer_json_after_the_others(tmp_path, sample):
  given_tokenizer('roberta', sample).save(str(tmp_path / 'tokenizer.json'))
  model_dirs = {'discriminator': types.SimpleNamespace(path=str(tmp_path))}
  assert importing.find_vocab(model_dirs, None) == str(tmp_path / 'tokenizer.json')
  assert importing.find_vocab(model_dirs, str(tmp_path)) == str(tmp_path / 'tokenizer.json')
  (tmp_path / 'vocab.txt').write_text('[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n')
  assert importing.find_vocab(model_dirs, None) == str(tmp_path / 'vocab.txt')


def test_pretrain_with_bpe_then_export(tmp_path, wikitext):
  """The README's command at a tiny size with a byte-level BPE vocabulary and whole-word
  masking; AutoTokenizer on the export reads text as the run's examples were tokenized."""
  workdir, out = tmp_path / 'run', tmp_path / 'run' / 'hf'
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}
  for command in (
      ['-m', 'electra_jax.main', f'--config={REPO / "configs" / "tiny.py"}', f'--workdir={workdir}',
       f'--config.data.train_files={wikitext / "wiki.valid.raw"}', '--config.data.vocab_type=bpe',
       '--config.data.vocab_sample_sentences=3000', '--config.masking=whole_word',
       '--config.model.vocab_size=1000', '--config.batch_size=8', '--config.max_seq_length=32',
       '--config.num_train_steps=4', '--config.warmup_steps=2', '--config.log_every=2',
       '--config.save_every=4', '--config.eval_every=0'],
      ['-m', 'electra_jax.export', f'--workdir={workdir}', f'--out={out}']):
    result = subprocess.run([sys.executable, *command], env=env, cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
  assert not (workdir / 'vocab.model').exists()
  vocab = vocab_lib.load_vocab(str(workdir / 'tokenizer.json'))
  assert vocab.kind == 'bpe' and vocab.size == 1000
  manifest = store.read_manifest(str(workdir / 'data' / 'train'))
  assert manifest['key']['vocab_sha256'] == vocab.fingerprint()  # the examples' ids are its
  lines = wikitext_lines(wikitext)
  for network in ('discriminator', 'generator'):
    hf = transformers.AutoTokenizer.from_pretrained(out / network)
    encoded = hf(lines)
    assert list(zip(encoded['input_ids'], encoded['token_type_ids'])) == [
        packed(vocab, ids, None) for ids in vocab.encode(lines)]
  config = json.loads((out / 'discriminator' / 'config.json').read_text())
  assert config['vocab_size'] == 1000 and config['pad_token_id'] == vocab.pad_id
