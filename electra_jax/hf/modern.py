"""A 'modern' run's networks <-> transformers' ModernBERT classes (names, config.json).

The discriminator goes out as ModernBertForTokenClassification with one label (its logit is the
replaced-token score; ModernBertModel loads the encoder from the same directory), the generator
and an MLM run's network as ModernBertForMaskedLM, whose decoder is tied to the word table.
"""

from collections.abc import Mapping
from typing import Any

import numpy as np

from electra_jax.common.errors import UsageError
from electra_jax.hf import model_config, params as params_lib
from electra_jax.hf.params import Pair

# HF kind -> the class its config.json names.
ARCHITECTURES = {'discriminator': 'ModernBertForTokenClassification',
                 'generator': 'ModernBertForMaskedLM', 'encoder': 'ModernBertModel',
                 'sequence': 'ModernBertForSequenceClassification',
                 'tagger': 'ModernBertForTokenClassification',
                 'qa': 'ModernBertForQuestionAnswering'}
TASKS = ('sequence', 'tagger', 'qa')  # a fine-tuned network: our head 'head', then 'classifier'

TIED_OUTPUT = 'decoder.weight'
WORD_EMBEDDINGS = 'model.embeddings.tok_embeddings.weight'


def _weight(torch_name: str, path: tuple[str, ...], linear: bool = False) -> Pair:
  return Pair(f'{torch_name}.weight', (*path, 'kernel' if linear else 'scale'), linear)


def name_pairs(encoder: str, head: str, kind: str, num_layers: int) -> list[Pair]:
  """Every tensor of one ModernBERT network and where it lives in our tree. `kind`:
  'discriminator' (token classification), 'generator' (masked LM), 'encoder' (no head), or a
  fine-tuned network of TASKS."""
  pairs = [Pair(WORD_EMBEDDINGS, ('embeddings', 'word_embeddings', 'embedding'), False),
           _weight('model.embeddings.norm', ('embeddings', 'layer_norm'))]
  for i in range(num_layers):
    torch, ours = f'model.layers.{i}', (encoder, f'layer_{i}')
    if i:  # the first layer's attention reads the embeddings' norm directly
      pairs.append(_weight(f'{torch}.attn_norm', (*ours, 'attention_norm')))
    pairs += [_weight(f'{torch}.attn.Wqkv', (*ours, 'attention', 'qkv'), True),
              _weight(f'{torch}.attn.Wo', (*ours, 'attention', 'output'), True),
              _weight(f'{torch}.mlp_norm', (*ours, 'mlp_norm')),
              _weight(f'{torch}.mlp.Wi', (*ours, 'mlp_in'), True),
              _weight(f'{torch}.mlp.Wo', (*ours, 'mlp_out'), True)]
  pairs.append(_weight('model.final_norm', (encoder, 'final_norm')))
  if kind == 'encoder':
    return pairs
  pairs += [_weight('head.dense', (head, 'dense'), True),
            _weight('head.norm', (head, 'layer_norm'))]
  if kind == 'generator':
    return pairs + [Pair('decoder.bias', (head, 'output_bias'), False)]
  classifier = ('classifier',) if kind in TASKS else (head, 'prediction')
  return pairs + [_weight('classifier', classifier, True),
                  Pair('classifier.bias', (*classifier, 'bias'), False)]


def to_hf(params: Mapping[str, Any], encoder: str, head: str, kind: str) -> dict[str, np.ndarray]:
  """The tensors of one ModernBERT network (float32, torch layout), the tied decoder included."""
  pairs = name_pairs(encoder, head, kind, params_lib.num_layers(params, encoder))
  tensors = params_lib.torch_tensors(params, pairs)
  if kind == 'generator':
    tensors[TIED_OUTPUT] = tensors[WORD_EMBEDDINGS]
  return tensors


def from_hf(tensors: Mapping[str, np.ndarray], encoder: str, head: str, kind: str,
            layers: int, source: str) -> dict[str, Any]:
  """Our subtrees (embeddings, `encoder`, `head`) from a ModernBERT network's tensors. A
  tensor the network needs and lacks is one UsageError naming it."""
  pairs = name_pairs(encoder, head, kind, layers)
  for pair in pairs:
    if pair.torch_name not in tensors:
      raise UsageError(f'{source} lacks {pair.torch_name}, which a ModernBERT {kind} with '
                       f'{layers} layers has; the weights do not belong to its config.json')
  return params_lib.our_tree(tensors, pairs)


def hf_config(m, kind: str, layers: int, special: Mapping[str, int]) -> dict[str, Any]:
  """ModernBertConfig's fields for a network of the run's `model` section `m` with `layers`
  layers (the generator's are fewer), and the vocabulary's special ids."""
  config = {
      'architectures': [ARCHITECTURES[kind]], 'model_type': 'modernbert',
      'vocab_size': m.vocab_size, 'hidden_size': m.hidden_size, 'num_hidden_layers': layers,
      'num_attention_heads': m.num_heads, 'intermediate_size': m.intermediate_size,
      'hidden_activation': 'gelu', 'classifier_activation': 'gelu',
      'max_position_embeddings': m.max_position_embeddings, 'norm_eps': 1e-5,
      'norm_bias': False, 'attention_bias': False, 'mlp_bias': False, 'classifier_bias': False,
      'decoder_bias': True, 'tie_word_embeddings': True, 'local_attention': m.local_window,
      'global_attn_every_n_layers': m.global_every, 'global_rope_theta': m.rope_theta,
      'local_rope_theta': m.local_rope_theta, 'embedding_dropout': 0.0, 'mlp_dropout': 0.0,
      'attention_dropout': 0.0, 'classifier_dropout': 0.0, 'initializer_range': 0.02,
      'pad_token_id': special['pad'], 'cls_token_id': special['cls'],
      'sep_token_id': special['sep'], 'bos_token_id': special['cls'],
      'eos_token_id': special['sep'],
  }
  if kind == 'discriminator':
    config.update(num_labels=1, id2label={'0': 'replaced'}, label2id={'replaced': 0})
  return config


# ---- a ModernBERT directory read in -------------------------------------------------------

# The classes a ModernBERT directory may hold -> (our kind, the tensors' layout in name_pairs);
# a ModernBertForTokenClassification of one label is our export's discriminator.
READ_AS = {'ModernBertForMaskedLM': ('generator', 'generator'),
           'ModernBertModel': ('discriminator', 'encoder'),
           'ModernBertForTokenClassification': ('discriminator', 'discriminator')}


def is_modern(config: Mapping[str, Any]) -> bool:
  return 'model_type' in config and config['model_type'] == 'modernbert'


def _value(config: Mapping[str, Any], name: str, source: str):
  if name not in config:
    raise UsageError(f'{source} has no "{name}"; a ModernBERT config.json gives every size field')
  return config[name]


def attention_layout(config: Mapping[str, Any], source: str) -> tuple[int, float, float]:
  """(global_every, global RoPE theta, local RoPE theta) from either form transformers writes:
  global_attn_every_n_layers and *_rope_theta, or layer_types and rope_parameters (v5)."""
  if 'layer_types' in config and 'rope_parameters' in config:
    kinds, rope = config['layer_types'], config['rope_parameters']
    every = next((i for i, kind in enumerate(kinds) if i and kind == 'full_attention'), len(kinds))
    if kinds != ['full_attention' if i % every == 0 else 'sliding_attention'
                 for i in range(len(kinds))]:
      raise UsageError(f'{source}: layer_types {kinds} is not one global layer every n; '
                       'electra_jax places global layers at 0, n, 2n, ...')
    if any(rope[kind]['rope_type'] != 'default' for kind in rope):
      raise UsageError(f'{source}: rope_parameters {rope} scale RoPE, which electra_jax does '
                       "not; it takes rope_type 'default' only")
    return (max(every, 1), float(rope['full_attention']['rope_theta']),
            float(rope['sliding_attention']['rope_theta'] if 'sliding_attention' in rope
                  else rope['full_attention']['rope_theta']))
  return (int(_value(config, 'global_attn_every_n_layers', source)),
          float(_value(config, 'global_rope_theta', source)),
          float(_value(config, 'local_rope_theta', source)))


def check_supported(config: Mapping[str, Any], source: str):
  """Refuses a ModernBERT config.json whose network would compute something other than ours."""
  problems = [f'{name} {config[name]!r} (ours: {want!r})' for name, want in (
      ('hidden_activation', 'gelu'), ('norm_bias', False), ('attention_bias', False),
      ('mlp_bias', False), ('classifier_bias', False), ('decoder_bias', True),
      ('classifier_activation', 'gelu'), ('tie_word_embeddings', True))
      if name in config and config[name] != want]
  if 'norm_eps' in config and not np.isclose(config['norm_eps'], 1e-5):
    problems.append(f"norm_eps {config['norm_eps']} (ours: 1e-05)")
  if _value(config, 'hidden_size', source) % _value(config, 'num_attention_heads', source):
    problems.append('hidden_size not divisible by num_attention_heads')
  if problems:
    raise UsageError(f'{source} has {"; ".join(problems)}: electra_jax cannot compute this '
                     'model exactly, so it does not import it')


def model_section(config: Mapping[str, Any], base, source: str):
  """`base` (a `model` config section) with what a ModernBERT config.json determines (one
  read_model_dir has passed through check_supported)."""
  every, theta, local_theta = attention_layout(config, source)
  model = base.copy_and_resolve_references()
  width = _value(config, 'hidden_size', source)
  model.update(
      architecture='modern', vocab_size=_value(config, 'vocab_size', source),
      embedding_size=width, hidden_size=width,
      num_layers=_value(config, 'num_hidden_layers', source),
      num_heads=config['num_attention_heads'],
      intermediate_size=_value(config, 'intermediate_size', source),
      max_position_embeddings=_value(config, 'max_position_embeddings', source),
      local_window=_value(config, 'local_attention', source), global_every=every,
      rope_theta=theta, local_rope_theta=local_theta, generator_hidden_size=1.0,
      dropout_rate=float(config['mlp_dropout']) if 'mlp_dropout' in config else 0.0,
      attention_dropout_rate=(float(config['attention_dropout'])
                              if 'attention_dropout' in config else 0.0))
  return model


def read_as(config: Mapping[str, Any], tensors: dict[str, np.ndarray], source: str
            ) -> tuple[str, str, dict[str, np.ndarray]]:
  """(our kind, the tensors' layout, the tensors named as in a task class: a bare
  ModernBertModel's lack the 'model.' prefix)."""
  names = model_config.architectures(config)
  known = [a for a in names if a in READ_AS]
  if not known or (known[0] == 'ModernBertForTokenClassification'
                   and 'num_labels' in config and config['num_labels'] != 1):
    raise UsageError(f'{source} holds a {names[0] if names else "ModernBERT without a class"}; '
                     'electra_jax reads a ModernBertForMaskedLM, a ModernBertModel, or the '
                     'discriminator of its own export (ModernBertForTokenClassification, one '
                     'label)')
  if not any(name.startswith('model.') for name in tensors):
    tensors = {f'model.{name}': value for name, value in tensors.items()}
  return (*READ_AS[known[0]], padding_first(tensors, file_pad_id(config)))


def file_pad_id(config: Mapping[str, Any]) -> int:
  """The id a ModernBERT config.json pads with (published ModernBERT: 50283), 0 if it names none."""
  return config['pad_token_id'] if 'pad_token_id' in config and config['pad_token_id'] else 0


def padding_first(tensors: dict[str, np.ndarray], pad: int) -> dict[str, np.ndarray]:
  """The tensors with vocabulary rows 0 and `pad` swapped, as the tokenizer.json of the same
  directory is read (data/vocab.py swap_ids): electra_jax's attention mask is input_ids != 0."""
  if not pad:
    return tensors
  swapped = dict(tensors)
  for name in (WORD_EMBEDDINGS, TIED_OUTPUT, 'decoder.bias'):
    if name in tensors:
      rows = np.array(tensors[name])
      rows[[0, pad]] = rows[[pad, 0]]
      swapped[name] = rows
  return swapped
