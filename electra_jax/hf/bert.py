"""A BERT checkpoint read as an ELECTRA discriminator's encoder, or as a generator.

ELECTRA's encoder is BERT's under `electra.` names, with embedding size = hidden size (no
projection); the pooler and next-sentence head are left out, and the log says so. BERT's
masked-LM head (dense H -> H, activation, LayerNorm, tied decoder) is our generator head at
E = H, so a BertForMaskedLM or BertForPreTraining serves as a frozen generator.
"""

from typing import Any

import numpy as np

from electra_jax.common.errors import UsageError
from electra_jax.hf import model_config

# Pretrained BERTs; a task model (BertForSequenceClassification, ...) is refused by name.
ARCHITECTURES = ('BertModel', 'BertForMaskedLM', 'BertForPreTraining')
LEFT_OUT = ('pooler.', 'cls.')  # tensor names, once `bert.` is taken off
# BertLMPredictionHead's modules -> ElectraForMaskedLM's. The decoder's weight is the tied word
# table; its bias is `cls.predictions.bias`, in older files `cls.predictions.decoder.bias` too.
MASKED_LM_HEAD = {'cls.predictions.transform.dense': 'generator_predictions.dense',
                  'cls.predictions.transform.LayerNorm': 'generator_predictions.LayerNorm',
                  'cls.predictions.decoder': 'generator_lm_head',
                  'cls.predictions': 'generator_lm_head'}
# What a masked LM cannot lack.
_HEAD_REQUIRED = ('cls.predictions.transform.dense.weight', 'cls.predictions.transform.dense.bias',
                  'cls.predictions.transform.LayerNorm.weight',
                  'cls.predictions.transform.LayerNorm.bias', 'cls.predictions.bias')
# TensorFlow-era PyTorch files name a LayerNorm's scale and shift gamma and beta.
_OLD_LAYER_NORM = {'gamma': 'weight', 'beta': 'bias'}


def is_bert(config: dict[str, Any]) -> bool:
  return config.get('model_type') == 'bert'


def electra_config(config: dict[str, Any], source: str,
                   architecture: str = 'ElectraForPreTraining') -> dict[str, Any]:
  """The ElectraConfig fields of the network that a BERT config.json describes, as the ELECTRA
  `architecture` (ElectraForMaskedLM to keep the masked-LM head)."""
  task_models = [name for name in model_config.architectures(config)
                 if name not in ARCHITECTURES]
  if task_models:
    raise UsageError(f'{source} describes a {task_models[0]}; of BERT models electra_jax starts '
                     f'from the pretrained ones only ({", ".join(ARCHITECTURES)})')
  if 'hidden_size' not in config:
    raise UsageError(f'{source} has no "hidden_size"; a BERT config.json gives every size field')
  return {**config, 'model_type': 'electra', 'embedding_size': config['hidden_size'],
          'architectures': [architecture]}


def _split(name: str) -> tuple[str, str]:
  """(module, parameter) of a tensor name, a TensorFlow-era LayerNorm's gamma/beta renamed."""
  head, _, last = name.rpartition('.')
  if head.endswith('LayerNorm') and last in _OLD_LAYER_NORM:
    last = _OLD_LAYER_NORM[last]
  return head, last


def electra_tensors(tensors: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
  """BERT's encoder tensors under ElectraModel's names, and the names of those left out."""
  renamed, left_out = {}, []
  for name, value in tensors.items():
    bare = name.removeprefix('bert.')
    if bare.startswith(LEFT_OUT):
      left_out.append(name)
    else:
      renamed['electra.' + '.'.join(_split(bare))] = value
  return renamed, sorted(left_out)


def _head_name(name: str) -> str:
  """ElectraForMaskedLM's name of one tensor of BERT's masked-LM head (unknown ones unchanged,
  for params.from_hf to name)."""
  module, last = _split(name)
  return f'{MASKED_LM_HEAD[module]}.{last}' if module in MASKED_LM_HEAD else name


def masked_lm_tensors(tensors: dict[str, np.ndarray], source: str
                      ) -> tuple[dict[str, np.ndarray], list[str]]:
  """A BertForMaskedLM's (or BertForPreTraining's) encoder and masked-LM head under
  ElectraForMaskedLM's names, and the names left out: the pooler and next-sentence head."""
  renamed, left_out = electra_tensors(tensors)
  head = [name for name in left_out if name.startswith('cls.predictions.')]
  origin = {}
  for name in head:
    new = _head_name(name)
    if new in origin and not np.array_equal(renamed[new], tensors[name]):
      raise UsageError(f'{source}: {origin[new]} and {name} differ, and both are {new}; a '
                       'BERT masked LM adds one output bias, so electra_jax cannot tell which')
    renamed[new], origin[new] = tensors[name], name
  missing = [name for name in _HEAD_REQUIRED if _head_name(name) not in renamed]
  if missing:
    raise UsageError(f"{source} has no masked-LM head: it lacks {', '.join(missing)} (a BertModel "
                     'is the encoder alone and predicts no tokens); pass a BertForMaskedLM or '
                     'BertForPreTraining directory')
  return renamed, [name for name in left_out if name not in head]
