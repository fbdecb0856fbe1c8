"""Tokenizer files that make `AutoTokenizer` reproduce our ids, written without transformers.

tokenizer.json holds the whole pipeline (sentencepiece's normalizer and unigram model, or BERT's
WordPiece), so it loads offline. A leading space is kept, not stripped: Metaspace adds no second
'▁', so a segment after a [MASK] in fill-mask input keeps its word boundary, as in training.
tokenizer_config.json names PreTrainedTokenizerFast, since model_type "electra" alone makes
transformers build a WordPiece tokenizer. A tokenizer.json vocabulary goes out as it was loaded,
with a post-processor that adds its own CLS and SEP as packing did.
"""

import base64
import copy
import json
import os
from typing import Any

from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError

METASPACE = '\u2581'
_UNIGRAM = 1  # TrainerSpec.model_type
_PIECE_TYPES = {4: 'user-defined', 5: 'unused', 6: 'byte'}  # 1-3: normal, unknown, control


ROLES = ('pad', 'unk', 'cls', 'sep', 'mask')


def special_tokens(vocab) -> dict[str, str]:
  """Role -> the special token's text: [PAD] ... [MASK], or what a tokenizer.json calls them."""
  if isinstance(vocab, vocab_lib.TokenizerJsonVocab):
    return {role: vocab.specials[role] for role in ROLES if role in vocab.specials}
  return dict(zip(ROLES, vocab_lib.SPECIAL_PIECES))


def special_ids(vocab) -> dict[str, int]:
  return {token: getattr(vocab, f'{role}_id') for role, token in special_tokens(vocab).items()}


def _added_token(token: str, i: int) -> dict[str, Any]:
  return {'id': i, 'content': token, 'single_word': False, 'lstrip': False, 'rstrip': False,
          'normalized': False, 'special': True}


def _added_tokens(vocab) -> list[dict[str, Any]]:
  return [_added_token(token, i)
          for token, i in sorted(special_ids(vocab).items(), key=lambda item: item[1])]


def _post_processor(vocab) -> dict[str, Any]:
  special = lambda token, type_id: {'SpecialToken': {'id': token, 'type_id': type_id}}
  sequence = lambda name, type_id: {'Sequence': {'id': name, 'type_id': type_id}}
  ids, tokens = special_ids(vocab), special_tokens(vocab)
  cls, sep = tokens['cls'], tokens['sep']
  return {
      'type': 'TemplateProcessing',
      'single': [special(cls, 0), sequence('A', 0), special(sep, 0)],
      'pair': [special(cls, 0), sequence('A', 0), special(sep, 0),
               sequence('B', 1), special(sep, 1)],
      'special_tokens': {t: {'id': t, 'ids': [ids[t]], 'tokens': [t]} for t in (cls, sep)},
  }


def _check_convertible(proto, path: str):
  """Refuses sentencepiece features the tokenizer.json below would not reproduce."""
  problems = []
  if proto.trainer_spec.model_type != _UNIGRAM:
    problems.append('it is not a unigram model')
  if proto.trainer_spec.byte_fallback:
    problems.append('it uses byte fallback')
  spec = proto.normalizer_spec
  if not spec.escape_whitespaces or proto.trainer_spec.treat_whitespace_as_suffix:
    problems.append('it does not mark word starts with a leading "▁"')
  odd = sorted({_PIECE_TYPES.get(p.type, str(p.type)) for p in proto.pieces
                if p.type not in (1, 2, 3)})
  if odd:
    problems.append(f'it has {"/".join(odd)} pieces')
  if problems:
    raise UsageError(f"cannot write a Hugging Face tokenizer for '{path}': "
                     f'{"; ".join(problems)}. Export supports unigram vocabularies like those '
                     'electra_jax trains (leave data.vocab_model empty)')


def sentencepiece_tokenizer(vocab: vocab_lib.Vocab) -> dict[str, Any]:
  """tokenizer.json contents equivalent to encoding with the sentencepiece model."""
  proto = vocab_lib.model_proto(vocab)
  _check_convertible(proto, vocab.model_path)
  spec = proto.normalizer_spec
  normalizers = []
  if spec.precompiled_charsmap:
    normalizers.append({'type': 'Precompiled', 'precompiled_charsmap':
                        base64.b64encode(spec.precompiled_charsmap).decode('ascii')})
  if spec.remove_extra_whitespaces:
    # Only ' ' counts: the charsmap has already turned other whitespace into it. \A and \z,
    # since ^ and $ would also match around a newline.
    edges = r' +\z' if spec.add_dummy_prefix else r'\A +| +\z'
    normalizers += [{'type': 'Replace', 'pattern': {'Regex': ' {2,}'}, 'content': ' '},
                    {'type': 'Replace', 'pattern': {'Regex': edges}, 'content': ''}]
  metaspace = {'type': 'Metaspace', 'replacement': METASPACE,
               'prepend_scheme': 'first' if spec.add_dummy_prefix else 'never',
               # One lattice over the whole text, as sentencepiece decodes it.
               'split': False}
  return {
      'version': '1.0', 'truncation': None, 'padding': None,
      'added_tokens': _added_tokens(vocab),
      'normalizer': {'type': 'Sequence', 'normalizers': normalizers},
      'pre_tokenizer': metaspace,
      'post_processor': _post_processor(vocab),
      'decoder': metaspace,
      'model': {'type': 'Unigram', 'unk_id': vocab.unk_id, 'byte_fallback': False,
                'vocab': [[p.piece, p.score] for p in proto.pieces]},
  }


def json_tokenizer(vocab: vocab_lib.TokenizerJsonVocab) -> dict[str, Any]:
  """The loaded tokenizer.json with a post-processor that adds its CLS and SEP as packing did
  (after its ByteLevel offset trimming, if any), every role's token a special added token, and
  no truncation or padding of its own."""
  config = copy.deepcopy(vocab.config)
  trims = [part for part in vocab_lib.components(config['post_processor'])
           if part['type'] == 'ByteLevel']
  template = _post_processor(vocab)
  config['post_processor'] = {'type': 'Sequence', 'processors': [*trims, template]} if trims \
      else template
  config['truncation'] = config['padding'] = None
  added = {t['id']: t for t in config['added_tokens']}
  for token, i in special_ids(vocab).items():
    added[i] = {**(added[i] if i in added else _added_token(token, i)), 'special': True}
  config['added_tokens'] = [added[i] for i in sorted(added)]
  return config


def tokenizer_config(vocab, model_max_length: int, token_types: bool = True) -> dict[str, Any]:
  tokens = special_tokens(vocab)
  config = {
      'tokenizer_class': 'PreTrainedTokenizerFast',
      **{f'{role}_token': tokens[role] for role in ROLES if role in tokens},
      'model_max_length': model_max_length,
      'model_input_names': ['input_ids', *['token_type_ids'] * token_types, 'attention_mask'],
      'padding_side': 'right', 'truncation_side': 'right', 'clean_up_tokenization_spaces': False,
  }
  if isinstance(vocab, vocab_lib.WordPieceVocab):
    config['do_lower_case'] = vocab.lowercase
  return config


def write_tokenizer(vocab, out_dir: str, model_max_length: int, token_types: bool = True):
  """Writes tokenizer.json, tokenizer_config.json and the vocabulary file (vocab.model or
  vocab.txt; for a tokenizer.json vocabulary, special_tokens_map.json) into `out_dir`. Without
  `token_types` (ModernBERT, whose forward takes none) the tokenizer returns no token_type_ids."""
  extra = {}
  if isinstance(vocab, vocab_lib.TokenizerJsonVocab):
    tokenizer = json_tokenizer(vocab)
    extra['special_tokens_map.json'] = json.dumps(
        {f'{role}_token': token for role, token in special_tokens(vocab).items()},
        indent=2).encode() + b'\n'
  elif isinstance(vocab, vocab_lib.WordPieceVocab):
    tokenizer = {**json.loads(vocab.tokenizer.to_str()),  # BERT's, the one we encode with
                 'added_tokens': _added_tokens(vocab), 'post_processor': _post_processor(vocab)}
    extra['vocab.txt'] = ''.join(p + '\n' for p in vocab.pieces).encode()
  else:
    tokenizer = sentencepiece_tokenizer(vocab)
    extra['vocab.model'] = vocab.processor.serialized_model_proto()
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, 'tokenizer.json'), 'w', encoding='utf-8') as f:
    json.dump(tokenizer, f, ensure_ascii=False, indent=2)
  with open(os.path.join(out_dir, 'tokenizer_config.json'), 'w') as f:
    json.dump(tokenizer_config(vocab, model_max_length, token_types), f, indent=2)
    f.write('\n')
  for name, data in extra.items():
    with open(os.path.join(out_dir, name), 'wb') as f:
      f.write(data)
