"""One Hugging Face model directory on disk: config.json plus the weights.

Pickled weights (pytorch_model.bin) are refused unless the caller allows pickle, since
unpickling can run code; even then torch (not a dependency) loads them with `weights_only`.
"""

import json
import os
from typing import Any, NamedTuple

from absl import logging
import numpy as np
import safetensors.numpy

from electra_jax.common import config as config_lib
from electra_jax.common.errors import UsageError
from electra_jax.hf import bert, model_config, modern, params as params_lib

WEIGHTS = 'model.safetensors'
WEIGHTS_INDEX = 'model.safetensors.index.json'
PICKLED_WEIGHTS = 'pytorch_model.bin'


class ModelDir(NamedTuple):
  path: str
  kind: str                      # 'discriminator' or 'generator'
  config: dict[str, Any]         # the parsed config.json (a BERT's as ElectraConfig's fields)
  tensors: dict[str, np.ndarray]
  # The tensors' layout (params.NETWORKS, or modern.name_pairs' kinds for a ModernBERT): the
  # kind's, or 'encoder' for a bare encoder.
  network: str


def write_model_dir(path: str, config: dict[str, Any], tensors: dict[str, np.ndarray]):
  """Writes config.json and model.safetensors (metadata format "pt", as transformers expects)."""
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'config.json'), 'w') as f:
    json.dump(config, f, indent=2, sort_keys=True)
    f.write('\n')
  safetensors.numpy.save_file(tensors, os.path.join(path, WEIGHTS), metadata={'format': 'pt'})


def read_config(path: str) -> dict[str, Any]:
  config_path = os.path.join(path, 'config.json')
  if not os.path.isdir(path):
    raise UsageError(f"'{path}' is not a directory; point at a Hugging Face model directory "
                     '(config.json + model.safetensors)')
  if not os.path.isfile(config_path):
    raise UsageError(f"'{path}' has no config.json, so it is not a Hugging Face model "
                     'directory; point at one, e.g. a local copy of '
                     'google/electra-small-discriminator')
  return config_lib.read_json_object(config_path)


def _read_safetensors(files: list[str]) -> dict[str, np.ndarray]:
  tensors = {}
  for file in files:
    try:
      tensors.update(safetensors.numpy.load_file(file))
    except (OSError, ValueError, RuntimeError) as e:
      raise UsageError(f"cannot read '{file}' as safetensors ({e})") from None
  return tensors


def _read_pickled(file: str) -> dict[str, np.ndarray]:
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise UsageError(f"reading '{file}' needs PyTorch, which electra_jax does not install; "
                     'pip install torch, or convert the weights to model.safetensors') from None
  try:
    state = torch.load(file, map_location='cpu', weights_only=True)
  except Exception as e:  # pylint: disable=broad-except  (torch raises many kinds)
    raise UsageError(f"cannot load '{file}' with torch.load(weights_only=True) ({e})") from None
  return {name: value.float().numpy() for name, value in state.items()}


def read_tensors(path: str, allow_pickle: bool = False) -> dict[str, np.ndarray]:
  """All weight tensors of the model directory `path`, as numpy arrays."""
  index_path = os.path.join(path, WEIGHTS_INDEX)
  if os.path.isfile(os.path.join(path, WEIGHTS)):
    return _read_safetensors([os.path.join(path, WEIGHTS)])
  if os.path.isfile(index_path):
    with open(index_path) as f:
      shards = sorted(set(json.load(f)['weight_map'].values()))
    return _read_safetensors([os.path.join(path, shard) for shard in shards])
  pickled = os.path.join(path, PICKLED_WEIGHTS)
  if os.path.isfile(pickled):
    if not allow_pickle:
      raise UsageError(f"'{path}' holds only pickled weights ({PICKLED_WEIGHTS}); unpickling "
                       'can run code hidden in the file, so it is refused. Pass --allow_pickle '
                       'if you trust its source, or convert it to model.safetensors')
    return _read_pickled(pickled)
  raise UsageError(f"'{path}' has a config.json but no weights ({WEIGHTS}); "
                   'download the model files too')


def _kind(config: dict[str, Any], tensors: dict[str, np.ndarray], path: str) -> str:
  """Discriminator or generator: from config.json's architectures, else from the tensors."""
  architectures = model_config.architectures(config)
  kinds = [kind for kind in params_lib.KINDS if model_config.ARCHITECTURES[kind] in architectures]
  if not kinds:  # the heads' tensors: discriminator_predictions.* or generator_predictions.*
    kinds = [k for k in params_lib.KINDS
             if any(name.startswith(f'{k}_predictions.') for name in tensors)]
  if len(kinds) != 1:
    raise UsageError(f"'{path}' is not an ElectraForPreTraining (discriminator) or "
                     f'ElectraForMaskedLM (generator) checkpoint (architectures: '
                     f'{architectures or "none"}); export those two, not a fine-tuned model')
  return kinds[0]


def read_model_dir(path: str, allow_pickle: bool = False, bert_masked_lm: bool = False
                   ) -> ModelDir:
  """Reads and checks one ELECTRA model directory (config and weights, not the vocabulary), or
  a BERT one (hf/bert.py): as the discriminator's encoder, or, with `bert_masked_lm`, as an
  ElectraForMaskedLM (a generator) with its masked-LM head."""
  config, source = read_config(path), os.path.join(path, 'config.json')
  if modern.is_modern(config):
    modern.check_supported(config, source)
    kind, network, tensors = modern.read_as(config, read_tensors(path, allow_pickle), source)
    return ModelDir(path, kind, config, tensors, network)
  if bert.is_bert(config):
    kind = 'generator' if bert_masked_lm else 'discriminator'
    config = bert.electra_config(config, source, model_config.ARCHITECTURES[kind])
    model_config.check_supported(config, source)
    tensors = read_tensors(path, allow_pickle)
    if bert_masked_lm:
      tensors, left_out = bert.masked_lm_tensors(tensors, f"'{path}'")
      read_as, what = 'an ElectraForMaskedLM (a generator)', 'pooler and next-sentence head'
    else:
      tensors, left_out = bert.electra_tensors(tensors)
      read_as, what = "an ELECTRA discriminator's encoder", 'pooler and pretraining heads'
    logging.info("'%s' is a BERT checkpoint, read as %s; left out: %d tensors of its %s (%s)",
                 path, read_as, len(left_out), what, ', '.join(left_out) or 'none')
    return ModelDir(path, kind, config, tensors, 'generator' if bert_masked_lm else 'encoder')
  model_config.check_supported(config, source)
  tensors = read_tensors(path, allow_pickle)
  kind = _kind(config, tensors, path)
  return ModelDir(path, kind, config, tensors, kind)
