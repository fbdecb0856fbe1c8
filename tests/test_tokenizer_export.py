"""AutoTokenizer on an exported directory gives our ids, segment ids and special tokens.

"Ours" is what pretraining feeds the model: the vocabulary's encode() of each line, laid out
by packing.fill_example as [CLS] A [SEP] (B [SEP]) with segment ids 0 then 1.
"""

import csv
import os

os.environ.setdefault('HF_HUB_OFFLINE', '1')  # the exported files must load without a network

import numpy as np
import pytest
import tokenizers
import transformers

from conftest import SHARED_DATA
from electra_jax.data import packing, vocab as vocab_lib
from electra_jax.common.errors import UsageError
from electra_jax.finetune.glue import features, data as glue_data, tasks
from electra_jax.hf import tokenizer as tokenizer_lib

UNUSUAL_TEXTS = [
    '', ' ', '   ', '\t', 'a\tb', '  Hello   World  ', 'new\nline', 'ab\r\ncd', 'x\u2028y',
    'ｆｕｌｌ\u3000ｗｉｄｔｈ', 'café naïve Ⅻ ﬁ', '😀😀 abc 😀', 'ŋŋŋ ŋ', 'x\u200by', 'x\u00a0y',
    '\u3000lead', 'trail\u3000', 'Ω ω', '$$$ %%% @-@', '東京は日本の首都です', '"quoted" (x)',
]


def google_vocab(path, wikitext, lowercase=True):
  """A vocab.txt laid out like Google's: [PAD], [unused0-98], [UNK], [CLS], [SEP], [MASK], ..."""
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token='[UNK]'))
  tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=lowercase)
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
  specials = ['[PAD]', *[f'[unused{i}]' for i in range(99)], '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  tokenizer.train([str(wikitext / 'wiki.valid.raw')],
                  tokenizers.trainers.WordPieceTrainer(vocab_size=1000, special_tokens=specials))
  ids = tokenizer.get_vocab()
  path.write_text(''.join(f'{piece}\n' for piece in sorted(ids, key=ids.get)))
  return path


def exported_tokenizer(vocab, directory):
  tokenizer_lib.write_tokenizer(vocab, str(directory), model_max_length=512)
  return transformers.AutoTokenizer.from_pretrained(directory)


@pytest.fixture(scope='module', params=['sentencepiece', 'sentencepiece-lowercase', 'wordpiece'])
def vocab_and_tokenizer(request, tmp_path_factory, wikitext):
  directory = tmp_path_factory.mktemp(request.param)
  if request.param.startswith('sentencepiece'):
    # The lowercase model folds case in its normalizer, which tokenizer.json must carry.
    vocab = vocab_lib.train_vocab([str(wikitext / 'wiki.valid.raw')], 1000,
                                  str(directory / 'source'),
                                  lowercase=request.param.endswith('lowercase'))
  else:
    vocab = vocab_lib.load_vocab(str(google_vocab(directory / 'source.txt', wikitext)))
  return vocab, exported_tokenizer(vocab, directory / 'export')


def wikitext_lines(wikitext):
  # Raw lines, leading space and all, blank lines included: 4,358 of them.
  return (wikitext / 'wiki.test.raw').read_text(encoding='utf-8').split('\n')[:-1]


def mrpc_pairs():
  pairs = []
  for split in ('train', 'dev'):
    with open(SHARED_DATA / 'glue' / 'MRPC' / f'{split}.tsv', encoding='utf-8-sig') as f:
      rows = list(csv.reader(f, delimiter='\t', quoting=csv.QUOTE_NONE))[1:]
    pairs += [(row[3], row[4]) for row in rows]
  return pairs


def packed(vocab, first, second):
  """Our pretraining layout of one pair (or one text when `second` is None)."""
  pair = packing.SegmentPair(first, second or [], 0, second is None)
  length = len(first) + (len(second) + 3 if second is not None else 2)
  input_ids, segment_ids = np.zeros(length, np.int32), np.zeros(length, np.int32)
  packing.fill_example(pair, input_ids, segment_ids, vocab.cls_id, vocab.sep_id)
  return input_ids.tolist(), segment_ids.tolist()


def test_single_texts_on_wikitext(vocab_and_tokenizer, wikitext):
  vocab, tokenizer = vocab_and_tokenizer
  lines = wikitext_lines(wikitext)
  encoded = tokenizer(lines)
  agree = 0
  for ids, line, hf_ids, hf_types, hf_mask in zip(vocab.encode(lines), lines,
                                                   encoded['input_ids'], encoded['token_type_ids'],
                                                   encoded['attention_mask']):
    expected_ids, expected_types = packed(vocab, ids, None)
    agree += (hf_ids, hf_types) == (expected_ids, expected_types) and all(hf_mask)
  print(f'{type(vocab).__name__}: AutoTokenizer equals ours on {agree} of {len(lines)} '
        'wiki.test.raw lines')
  assert len(lines) >= 1000 and agree == len(lines)


def test_sentence_pairs_on_mrpc(vocab_and_tokenizer):
  vocab, tokenizer = vocab_and_tokenizer
  pairs = mrpc_pairs()
  firsts, seconds = zip(*pairs)
  encoded = tokenizer(list(firsts), list(seconds))
  ours = [packed(vocab, a, b) for a, b in zip(vocab.encode(firsts), vocab.encode(seconds))]
  agree = sum((ids, types) == expected for ids, types, expected in zip(
      encoded['input_ids'], encoded['token_type_ids'], ours))
  print(f'{type(vocab).__name__}: AutoTokenizer equals ours on {agree} of {len(pairs)} MRPC '
        'pairs (ids and segment ids)')
  assert len(pairs) == 4076 and agree == len(pairs)


def test_fine_tuning_inputs_are_the_pretraining_layout(vocab_and_tokenizer):
  """What fine-tuning feeds the encoder is what pretraining fed it: SST-2 and MRPC dev as the
  GLUE reader and features.encode make them, row for row the layout of packing.fill_example,
  then padding. A pretrained encoder read through another layout (specials, segment ids) would
  start from features it never saw, and only pretrained starts would pay for it."""
  vocab, _ = vocab_and_tokenizer
  for name in ('SST-2', 'MRPC'):
    dev = glue_data.load(tasks.get_task(name), str(SHARED_DATA / 'glue'), '', '',
                         with_test=False).dev[name]
    encoded = features.encode(dev, vocab, 512)  # long enough that no pair is truncated
    firsts = vocab.encode(dev.text_a)
    seconds = vocab.encode(dev.text_b) if dev.text_b is not None else [None] * len(firsts)
    for row, (first, second) in enumerate(zip(firsts, seconds)):
      ids, types = packed(vocab, first, second)
      assert encoded['input_ids'][row, :len(ids)].tolist() == ids, (name, row)
      assert encoded['segment_ids'][row, :len(ids)].tolist() == types, (name, row)
      assert not encoded['input_ids'][row, len(ids):].any()
      assert not encoded['segment_ids'][row, len(ids):].any()
    assert len(firsts) == {'SST-2': 872, 'MRPC': 408}[name]


def test_special_tokens_and_padding(vocab_and_tokenizer):
  vocab, tokenizer = vocab_and_tokenizer
  assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id,
          tokenizer.sep_token_id, tokenizer.mask_token_id) == (
              vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id)
  assert tokenizer.model_input_names == ['input_ids', 'token_type_ids', 'attention_mask']
  batch = tokenizer(['a short one', 'a somewhat longer line of text'], ['b', 'c'], padding=True,
                    return_tensors='np')
  padded = batch['attention_mask'] == 0
  assert padded[0].any() and not padded[1].any()
  assert (batch['input_ids'][padded] == vocab.pad_id).all()
  assert (batch['token_type_ids'][padded] == 0).all()


def test_unusual_text(vocab_and_tokenizer):
  vocab, tokenizer = vocab_and_tokenizer
  hf_ids = tokenizer(UNUSUAL_TEXTS, add_special_tokens=False)['input_ids']
  assert dict(zip(UNUSUAL_TEXTS, hf_ids)) == dict(zip(UNUSUAL_TEXTS, vocab.encode(UNUSUAL_TEXTS)))
  # The one designed difference: transformers maps special-token text to the special id (so
  # fill-mask input works); our encoders read it as plain characters.
  assert vocab.mask_id in tokenizer('a [MASK] b', add_special_tokens=False)['input_ids']
  assert vocab.mask_id not in vocab.encode(['a [MASK] b'])[0]


def test_casing_of_wordpiece_vocabularies(tmp_path, wikitext):
  uncased = vocab_lib.load_vocab(str(google_vocab(tmp_path / 'uncased.txt', wikitext)))
  cased = vocab_lib.load_vocab(str(google_vocab(tmp_path / 'cased.txt', wikitext,
                                                lowercase=False)))
  assert uncased.lowercase and not cased.lowercase
  tokenizer = exported_tokenizer(cased, tmp_path / 'export')
  lines = wikitext_lines(wikitext)[:300]
  assert tokenizer(lines, add_special_tokens=False)['input_ids'] == cased.encode(lines)
  assert cased.encode(['The']) != cased.encode(['the'])


def test_wordpiece_vocab_mistakes(tmp_path):
  (tmp_path / 'no_specials.txt').write_text('[PAD]\nhello\n')
  with pytest.raises(UsageError, match=r"lacks the special tokens \['\[UNK\]'"):
    vocab_lib.load_wordpiece(str(tmp_path / 'no_specials.txt'))
  (tmp_path / 'pad_late.txt').write_text('[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n')
  with pytest.raises(UsageError, match='id 0'):
    vocab_lib.load_wordpiece(str(tmp_path / 'pad_late.txt'))


def test_bpe_sentencepiece_is_refused(tmp_path, wikitext):
  bpe = vocab_lib.train_vocab([str(wikitext / 'wiki.valid.raw')], 300, str(tmp_path / 'bpe'),
                              max_sentences=2000, model_type='bpe')
  with pytest.raises(UsageError, match='not a unigram model'):
    tokenizer_lib.write_tokenizer(bpe, str(tmp_path / 'export'), 512)
