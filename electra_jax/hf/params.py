"""Our parameter tree <-> Hugging Face ELECTRA tensors, named as in the PyTorch classes.

One network per call (`NETWORKS`). Each HF network carries its own copy of the shared embedding
block (`electra.embeddings.*`); ours holds it once. The generator's output matrix is the word
table (tied), so only its bias is a tensor of its own.
"""

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from electra_jax.common.errors import UsageError

KINDS = ('discriminator', 'generator')  # the HF layouts: ElectraForPreTraining, ElectraForMaskedLM


class Network(NamedTuple):
  encoder: str  # our encoder's subtree
  head: str     # our head's subtree
  kind: str     # the HF layout its tensors take (one of KINDS)


NETWORKS = {
    'discriminator': Network('discriminator', 'discriminator_head', 'discriminator'),
    'generator': Network('generator', 'generator_head', 'generator'),
    'mlm': Network('discriminator', 'mlm_head', 'generator'),
    # A bare encoder (a BERT checkpoint, hf/bert.py), import only: it has no head.
    'encoder': Network('discriminator', '', 'encoder'),
    # Fine-tuned models (finetune/export.py), export only: the discriminator under a task's head.
    'qa': Network('discriminator', 'qa_outputs', 'qa'),
    'tagger': Network('discriminator', 'classifier', 'tagger'),
    'sequence': Network('discriminator', 'classifier', 'sequence'),
}
# Non-parameter buffers that older transformers versions saved with the weights.
IGNORED = ('electra.embeddings.position_ids', 'electra.embeddings.token_type_ids')
TIED_OUTPUT = 'generator_lm_head.weight'
WORD_EMBEDDINGS = 'electra.embeddings.word_embeddings.weight'


class Pair(NamedTuple):
  torch_name: str
  path: tuple[str, ...]  # keys into our parameter tree
  transposed: bool       # a Linear weight: our kernel transposed


def _linear(torch_prefix, path):
  return [Pair(f'{torch_prefix}.weight', (*path, 'kernel'), True),
          Pair(f'{torch_prefix}.bias', (*path, 'bias'), False)]


def _layer_norm(torch_prefix, path):
  return [Pair(f'{torch_prefix}.weight', (*path, 'scale'), False),
          Pair(f'{torch_prefix}.bias', (*path, 'bias'), False)]


def name_pairs(network: str, num_layers: int, has_projection: bool) -> list[Pair]:
  """Every tensor of one HF network (a name in NETWORKS) and where it lives in our tree."""
  encoder, head, kind = NETWORKS[network]
  pairs = [Pair(f'electra.embeddings.{name}.weight', ('embeddings', name, 'embedding'), False)
           for name in ('word_embeddings', 'position_embeddings', 'token_type_embeddings')]
  pairs += _layer_norm('electra.embeddings.LayerNorm', ('embeddings', 'layer_norm'))
  if has_projection:
    pairs += _linear('electra.embeddings_project', (encoder, 'embeddings_project'))
  for i in range(num_layers):
    torch, ours = f'electra.encoder.layer.{i}', (encoder, f'layer_{i}')
    for name in ('query', 'key', 'value'):
      pairs += _linear(f'{torch}.attention.self.{name}', (*ours, 'attention', name))
    pairs += _linear(f'{torch}.attention.output.dense', (*ours, 'attention_output'))
    pairs += _layer_norm(f'{torch}.attention.output.LayerNorm', (*ours, 'attention_layer_norm'))
    pairs += _linear(f'{torch}.intermediate.dense', (*ours, 'intermediate'))
    pairs += _linear(f'{torch}.output.dense', (*ours, 'output'))
    pairs += _layer_norm(f'{torch}.output.LayerNorm', (*ours, 'output_layer_norm'))
  if kind in ('qa', 'tagger'):  # ElectraForQuestionAnswering's qa_outputs, or the tagger's
    pairs += _linear('qa_outputs' if kind == 'qa' else 'classifier', (head,))
  elif kind == 'sequence':  # ElectraClassificationHead: dense, GELU, out_proj
    pairs += _linear('classifier.dense', ('classifier_dense',))
    pairs += _linear('classifier.out_proj', (head,))
  elif kind == 'discriminator':
    pairs += _linear('discriminator_predictions.dense', (head, 'dense'))
    pairs += _linear('discriminator_predictions.dense_prediction', (head, 'prediction'))
  elif kind == 'generator':
    pairs += _linear('generator_predictions.dense', (head, 'dense'))
    pairs += _layer_norm('generator_predictions.LayerNorm', (head, 'layer_norm'))
    pairs.append(Pair('generator_lm_head.bias', (head, 'output_bias'), False))
  return pairs  # kind 'encoder': no head


def num_layers(params: Mapping[str, Any], encoder: str) -> int:
  return sum(1 for name in params[encoder] if name.startswith('layer_'))


def _structure(params: Mapping[str, Any], network: str) -> tuple[int, bool]:
  """Number of layers and whether the network projects E -> H, read off our tree."""
  encoder = NETWORKS[network].encoder
  return num_layers(params, encoder), 'embeddings_project' in params[encoder]


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def torch_tensors(params: Mapping[str, Any], pairs: list[Pair]) -> dict[str, np.ndarray]:
  """The tensors `pairs` name, read off our tree (float32 numpy arrays, torch layout)."""
  tensors = {}
  for pair in pairs:
    value = np.asarray(_get(params, pair.path), np.float32)
    tensors[pair.torch_name] = np.ascontiguousarray(value.T if pair.transposed else value)
  return tensors


def our_tree(tensors: Mapping[str, np.ndarray], pairs: list[Pair]) -> dict[str, Any]:
  """The tensors `pairs` name as our tree (float32 numpy copies, our layout)."""
  tree = {}
  for pair in pairs:
    value = np.asarray(tensors[pair.torch_name])
    node = tree
    for key in pair.path[:-1]:
      node = node.setdefault(key, {})
    node[pair.path[-1]] = np.array(value.T if pair.transposed else value, np.float32)
  return tree


def to_hf(params: Mapping[str, Any], network: str) -> dict[str, np.ndarray]:
  """The tensors of the HF `network` (float32 numpy arrays, torch layout)."""
  return torch_tensors(params, name_pairs(network, *_structure(params, network)))


def _listing(names, limit=4) -> str:
  names = sorted(names)
  more = f' and {len(names) - limit} more' if len(names) > limit else ''
  return ', '.join(names[:limit]) + more


def from_hf(tensors: Mapping[str, np.ndarray], kind: str, target: Mapping[str, Any],
            source: str) -> dict[str, Any]:
  """Our subtrees (embeddings, the network, its head) from the HF `kind` network's tensors,
  each present with the shape `target` (our tree, arrays or shape structs) implies, and no other;
  `source` names the file in errors."""
  pairs = name_pairs(kind, *_structure(target, kind))
  expected = {pair.torch_name for pair in pairs}
  missing = expected - set(tensors)
  if missing:
    raise UsageError(f'{source} lacks {len(missing)} tensor(s) an ELECTRA {kind} of this config '
                     f'has: {_listing(missing)}; the weights do not belong to its config.json')
  unexpected = set(tensors) - expected - set(IGNORED) - {TIED_OUTPUT}
  if unexpected:
    hint = {'discriminator': 'ForPreTraining', 'generator': 'ForMaskedLM'}.get(kind, 'Model')
    raise UsageError(f'{source} holds {len(unexpected)} tensor(s) an ELECTRA {kind} does not '
                     f'have: {_listing(unexpected)}; is it an Electra{hint} checkpoint matching '
                     'its config.json?')
  for pair in pairs:
    want = tuple(_get(target, pair.path).shape)
    want = want[::-1] if pair.transposed else want
    have = np.shape(tensors[pair.torch_name])
    if have != want:
      raise UsageError(f'{source}: tensor {pair.torch_name} has shape {list(have)} but its '
                       f'config.json implies {list(want)}; the weights do not belong to this '
                       'config')
  if TIED_OUTPUT in tensors and not np.array_equal(tensors[TIED_OUTPUT], tensors[WORD_EMBEDDINGS]):
    raise UsageError(f'{source}: {TIED_OUTPUT} differs from {WORD_EMBEDDINGS}; ELECTRA ties the '
                     "generator's output matrix to the word embeddings and electra_jax cannot "
                     'represent an untied one')
  return our_tree(tensors, pairs)
