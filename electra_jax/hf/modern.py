"""A 'modern' run's networks <-> transformers' ModernBERT classes (names, config.json).

The discriminator goes out as ModernBertForTokenClassification with one label (its logit is the
replaced-token score; ModernBertModel loads the encoder from the same directory), the generator
and an MLM run's network as ModernBertForMaskedLM, whose decoder is tied to the word table.
"""

from collections.abc import Mapping
from typing import Any

import numpy as np

from electra_jax.common.errors import UsageError
from electra_jax.hf.params import Pair

# HF kind -> the class its config.json names.
ARCHITECTURES = {'discriminator': 'ModernBertForTokenClassification',
                 'generator': 'ModernBertForMaskedLM', 'encoder': 'ModernBertModel'}
# Exported network (hf/exporting.py) -> (our encoder, our head, the HF kind).
NETWORKS = {'discriminator': ('discriminator', 'discriminator_head', 'discriminator'),
            'generator': ('generator', 'generator_head', 'generator'),
            'mlm': ('discriminator', 'mlm_head', 'generator')}
TIED_OUTPUT = 'decoder.weight'
WORD_EMBEDDINGS = 'model.embeddings.tok_embeddings.weight'


def _weight(torch_name: str, path: tuple[str, ...], linear: bool = False) -> Pair:
  return Pair(f'{torch_name}.weight', (*path, 'kernel' if linear else 'scale'), linear)


def name_pairs(encoder: str, head: str, kind: str, num_layers: int) -> list[Pair]:
  """Every tensor of one ModernBERT network and where it lives in our tree. `kind`:
  'discriminator' (token classification), 'generator' (masked LM) or 'encoder' (no head)."""
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
  pairs += [_weight('head.dense', (head, 'dense'), True), _weight('head.norm', (head, 'layer_norm'))]
  if kind == 'generator':
    return pairs + [Pair('decoder.bias', (head, 'output_bias'), False)]
  return pairs + [_weight('classifier', (head, 'prediction'), True),
                  Pair('classifier.bias', (head, 'prediction', 'bias'), False)]


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def num_layers(params: Mapping[str, Any], encoder: str) -> int:
  return sum(1 for name in params[encoder] if name.startswith('layer_'))


def to_hf(params: Mapping[str, Any], encoder: str, head: str, kind: str) -> dict[str, np.ndarray]:
  """The tensors of one ModernBERT network (float32, torch layout), the tied decoder included."""
  tensors = {}
  for pair in name_pairs(encoder, head, kind, num_layers(params, encoder)):
    value = np.asarray(_get(params, pair.path), np.float32)
    tensors[pair.torch_name] = np.ascontiguousarray(value.T if pair.transposed else value)
  if kind == 'generator':
    tensors[TIED_OUTPUT] = tensors[WORD_EMBEDDINGS]
  return tensors


def from_hf(tensors: Mapping[str, np.ndarray], encoder: str, head: str, kind: str,
            layers: int, source: str) -> dict[str, Any]:
  """Our subtrees (embeddings, `encoder`, `head`) from a ModernBERT network's tensors. A
  tensor the network needs and lacks is one UsageError naming it."""
  tree = {}
  for pair in name_pairs(encoder, head, kind, layers):
    if pair.torch_name not in tensors:
      raise UsageError(f'{source} lacks {pair.torch_name}, which a ModernBERT {kind} with '
                       f'{layers} layers has; the weights do not belong to its config.json')
    value = np.asarray(tensors[pair.torch_name], np.float32)
    node = tree
    for key in pair.path[:-1]:
      node = node.setdefault(key, {})
    node[pair.path[-1]] = np.array(value.T if pair.transposed else value)
  return tree


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


def export_files(params: Mapping[str, Any], m, network: str,
                 special: Mapping[str, int]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """config.json's fields and the tensors of an exported network (`params` already in the
  network's view: networks.discriminator_view or generator_view)."""
  encoder, head, kind = NETWORKS[network]
  layers = num_layers(params, encoder)
  return hf_config(m, kind, layers, special), to_hf(params, encoder, head, kind)
