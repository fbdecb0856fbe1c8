"""Our `model` config section <-> the config.json of a transformers ELECTRA (ElectraConfig).

Import accepts only what our model computes identically (exact GELU, LayerNorm epsilon 1e-12,
absolute positions, an encoder) and refuses anything else by name: silently changing it would
change the model's outputs.
"""

import math
from typing import Any

import ml_collections

from electra_jax.common import config as config_lib
from electra_jax.model import layers
from electra_jax.hf import params as params_lib
from electra_jax.common.errors import UsageError

# HF kind -> its class; the task models (finetune/export.py) are written, never imported.
ARCHITECTURES = {'discriminator': 'ElectraForPreTraining', 'generator': 'ElectraForMaskedLM',
                 'qa': 'ElectraForQuestionAnswering', 'tagger': 'ElectraForTokenClassification',
                 'sequence': 'ElectraForSequenceClassification'}
# ElectraConfig's defaults for fields a hand-written config.json may leave out.
_DEFAULTS = {'hidden_act': 'gelu', 'layer_norm_eps': 1e-12, 'max_position_embeddings': 512,
             'type_vocab_size': 2, 'hidden_dropout_prob': 0.1,
             'attention_probs_dropout_prob': 0.1, 'position_embedding_type': 'absolute',
             'is_decoder': False, 'add_cross_attention': False, 'tie_word_embeddings': True}
_REQUIRED = ('vocab_size', 'embedding_size', 'hidden_size', 'num_hidden_layers',
             'num_attention_heads', 'intermediate_size')
# Fields both networks must agree on: they share the embedding block.
_SHARED = ('vocab_size', 'embedding_size', 'max_position_embeddings', 'type_vocab_size')


def architectures(config: dict) -> list[str]:
  """A config.json's model classes; configs written by hand or by old versions have none."""
  return config.get('architectures') or []


def to_hf(m: ml_collections.ConfigDict, network: str) -> dict[str, Any]:
  """The config.json of `network` ('discriminator', 'generator' or 'mlm', see params.NETWORKS)."""
  if network == 'generator':
    width, depth = config_lib.generator_width(m), config_lib.generator_depth(m)
    heads, ffn = config_lib.generator_heads_and_ffn(m)
  else:
    width, heads, ffn, depth = m.hidden_size, m.num_heads, m.intermediate_size, m.num_layers
  return {
      'architectures': [ARCHITECTURES[params_lib.NETWORKS[network].kind]], 'model_type': 'electra',
      'vocab_size': m.vocab_size, 'embedding_size': m.embedding_size, 'hidden_size': width,
      'num_hidden_layers': depth, 'num_attention_heads': heads, 'intermediate_size': ffn,
      'hidden_act': 'gelu',  # exact erf GELU in transformers, as in our model
      'hidden_dropout_prob': m.dropout_rate,
      'attention_probs_dropout_prob': m.attention_dropout_rate,
      'max_position_embeddings': m.max_position_embeddings, 'type_vocab_size': m.type_vocab_size,
      'initializer_range': 0.02, 'layer_norm_eps': layers.LAYER_NORM_EPS,
      'position_embedding_type': 'absolute',
      'pad_token_id': 0,  # our attention mask is `input_ids != 0`
      'tie_word_embeddings': True, 'dtype': 'float32',
  }


def _field(config: dict, name: str, source: str):
  if name in config:
    return config[name]
  if name in _DEFAULTS:
    return _DEFAULTS[name]
  raise UsageError(f'{source} has no "{name}"; an ELECTRA config.json gives every size field')


def check_supported(config: dict, source: str):
  """Refuses a config whose network would compute something other than ours."""
  kind = config.get('model_type')  # a config.json not written by transformers may lack it
  if kind != 'electra':
    raise UsageError(f'{source} describes a "{kind}" model, not ELECTRA '
                     '(model_type "electra") or BERT ("bert"); point at an ELECTRA or BERT '
                     'checkpoint directory')
  for name in _REQUIRED:
    _field(config, name, source)
  problems = []
  if _field(config, 'hidden_act', source) != 'gelu':
    problems.append(f'hidden_act "{config["hidden_act"]}" (ours is exact "gelu")')
  if not math.isclose(_field(config, 'layer_norm_eps', source), layers.LAYER_NORM_EPS):
    problems.append(f'layer_norm_eps {config["layer_norm_eps"]} (ours is '
                    f'{layers.LAYER_NORM_EPS})')
  if _field(config, 'position_embedding_type', source) != 'absolute':
    problems.append(f'position_embedding_type "{config["position_embedding_type"]}" '
                    '(ours is "absolute")')
  if _field(config, 'is_decoder', source) or _field(config, 'add_cross_attention', source):
    problems.append('a decoder with cross-attention (ours is an encoder)')
  if config['hidden_size'] % config['num_attention_heads']:
    problems.append(f'hidden_size {config["hidden_size"]} not divisible by '
                    f'num_attention_heads {config["num_attention_heads"]}')
  if problems:
    raise UsageError(f'{source} has {"; ".join(problems)}: electra_jax cannot compute this '
                     'model exactly, so it does not import it')


def _check_generator(generator: dict, reference: dict | None, source: str):
  width = generator['hidden_size']
  for name, want in (('num_attention_heads', max(1, width // 64)),
                     ('intermediate_size', 4 * width)):
    if generator[name] != want:
      raise UsageError(f'{source}: the generator has {name}={generator[name]}, but electra_jax '
                       f'builds a generator of width {width} with {name}={want} (heads = '
                       'max(1, width // 64), FFN = 4 x width); it cannot hold these weights')
  if not _field(generator, 'tie_word_embeddings', source):
    raise UsageError(f'{source} sets tie_word_embeddings=false; ELECTRA\'s generator output '
                     'matrix is the word embedding table and electra_jax cannot untie it')
  if reference is None:
    return
  for name in _SHARED:
    ours = _field(reference, name, 'the discriminator config')
    theirs = _field(generator, name, source)
    if ours != theirs:
      raise UsageError(f'{source}: the generator has {name}={theirs} but the discriminator '
                       f'{ours}; both networks of one ELECTRA share it')


def from_hf(discriminator: dict | None, generator: dict | None,
            model_config: ml_collections.ConfigDict, sources: dict[str, str]
            ) -> ml_collections.ConfigDict:
  """`model_config` with every field the given HF configs (read_model_dir has checked them)
  determine replaced by theirs; a generator width or depth its fractions give stays a fraction."""
  if generator is not None:
    _check_generator(generator, discriminator, sources['generator'])
  result = ml_collections.ConfigDict(model_config.to_dict())
  base = discriminator or generator
  result.vocab_size = base['vocab_size']
  result.embedding_size = base['embedding_size']
  result.num_layers = base['num_hidden_layers']
  result.max_position_embeddings = _field(base, 'max_position_embeddings', '')
  result.type_vocab_size = _field(base, 'type_vocab_size', '')
  result.dropout_rate = _field(base, 'hidden_dropout_prob', '')
  result.attention_dropout_rate = _field(base, 'attention_probs_dropout_prob', '')
  if discriminator is not None:
    result.hidden_size = discriminator['hidden_size']
    result.num_heads = discriminator['num_attention_heads']
    result.intermediate_size = discriminator['intermediate_size']
  if generator is not None and config_lib.generator_width(result) != generator['hidden_size']:
    result.generator_hidden_size = generator['hidden_size']
  if generator is not None and discriminator is not None:
    # As a fraction: a count of 1 would read as the fraction 1.0 (every layer).
    depth = generator['num_hidden_layers'] / discriminator['num_hidden_layers']
    if config_lib.generator_depth(result) != generator['num_hidden_layers']:
      result.generator_layers = depth
  return result
