"""A BERT checkpoint read as an ELECTRA discriminator's encoder.

ELECTRA's discriminator is BERT's encoder: the same embedding block, the same post-LayerNorm
layers, the same tensor names with `electra.` where BERT has `bert.`. BERT has no projection
from the embeddings to the hidden width, so its embedding size is its hidden size. A pretrained
BERT directory therefore gives an ELECTRA encoder exactly, and can start fine-tuning
(`finetune --config.init_from=DIR`) or, with a fresh generator and replaced-token head,
ELECTRA pretraining (`import_hf --hf_dir=DIR`). Comparing a published BERT with a run of ours
on one task, with one fine-tuning loop and recipe, is what this is for.

What BERT has and ELECTRA does not is left out, and the log says so: the pooler (a tanh dense
layer on [CLS] that BERT's own classifiers read; ELECTRA's head reads [CLS] directly) and the
pretraining heads (`cls.*`: masked LM and next-sentence prediction).
"""

from typing import Any

import numpy as np

from electra_jax.common.errors import UsageError

# Pretrained BERTs; a task model (BertForSequenceClassification, ...) is refused by name.
ARCHITECTURES = ('BertModel', 'BertForMaskedLM', 'BertForPreTraining')
LEFT_OUT = ('pooler.', 'cls.')  # tensor names, once `bert.` is taken off
# TensorFlow-era PyTorch files name a LayerNorm's scale and shift gamma and beta.
_OLD_LAYER_NORM = {'gamma': 'weight', 'beta': 'bias'}


def is_bert(config: dict[str, Any]) -> bool:
  return config.get('model_type') == 'bert'


def electra_config(config: dict[str, Any], source: str) -> dict[str, Any]:
  """The ElectraConfig fields of the encoder that a BERT config.json describes."""
  task_models = [name for name in config.get('architectures') or [] if name not in ARCHITECTURES]
  if task_models:
    raise UsageError(f'{source} describes a {task_models[0]}; of BERT models electra_jax starts '
                     f'from the pretrained ones only ({", ".join(ARCHITECTURES)})')
  if 'hidden_size' not in config:
    raise UsageError(f'{source} has no "hidden_size"; a BERT config.json gives every size field')
  return {**config, 'model_type': 'electra', 'embedding_size': config['hidden_size'],
          'architectures': ['ElectraForPreTraining']}


def _electra_name(bare: str) -> str:
  head, _, last = bare.rpartition('.')
  if head.endswith('LayerNorm') and last in _OLD_LAYER_NORM:
    last = _OLD_LAYER_NORM[last]
  return f'electra.{head}.{last}'


def electra_tensors(tensors: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
  """BERT's encoder tensors under ElectraModel's names, and the names of those left out."""
  renamed, left_out = {}, []
  for name, value in tensors.items():
    bare = name.removeprefix('bert.')
    if bare.startswith(LEFT_OUT):
      left_out.append(name)
    else:
      renamed[_electra_name(bare)] = value
  return renamed, sorted(left_out)
