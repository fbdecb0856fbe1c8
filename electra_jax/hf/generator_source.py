"""A Hugging Face ElectraForMaskedLM directory as a frozen generator (config.generator_init).

training/frozen_generator.py reads our own runs. A Hugging Face directory is read here, with
import's checks (hf/files.py, hf/model_config.py, hf/params.py). hf is the floor above training,
so electra_jax.main hands `read` to train.train_and_evaluate. An ElectraForMaskedLM holds what
the generator needs: its embedding block, encoder and MLM head. That is our export's generator/
directory, an MLM run's mlm/ directory, or google/electra-*-generator. A BERT directory is
refused. hf/bert.py reads a BERT as an encoder only, without its masked-LM head (`cls.*`). A
discriminator (ElectraForPreTraining) is refused too: it predicts no tokens.
"""

import os

import jax
import ml_collections

from electra_jax.common.errors import UsageError
from electra_jax.hf import bert, files, model_config, params as params_lib
from electra_jax.model import networks
from electra_jax.training import frozen_generator

SUPPORTED = ('a Hugging Face ElectraForMaskedLM directory (our export\'s generator/ or mlm/), or '
             'the workdir of one of our mlm or electra runs')


def read(directory: str, model: ml_collections.ConfigDict) -> frozen_generator.Source:
  """The ElectraForMaskedLM in `directory` under the generator's names, its tensors checked
  against its own config.json (the run's `model` supplies only what the file leaves open)."""
  config = files.read_config(directory)
  if bert.is_bert(config):
    raise UsageError(f"config.generator_init='{directory}' is a BERT checkpoint "
                     f"({', '.join(config.get('architectures') or ['BERT'])}), whose masked-LM "
                     f'head electra_jax does not read; pass {SUPPORTED}')
  model_dir = files.read_model_dir(directory)
  if model_dir.kind != 'generator':
    raise UsageError(f"config.generator_init='{directory}' holds an ElectraForPreTraining (a "
                     f'discriminator), which predicts no tokens; pass {SUPPORTED}')
  base = ml_collections.ConfigDict(model.to_dict())
  base.generator_layers = 1.0  # from_hf sets num_layers to the generator's depth
  derived = model_config.from_hf(None, model_dir.config, base,
                                 {'generator': os.path.join(directory, 'config.json')})
  target = jax.eval_shape(lambda: networks.init_params(networks.Electra(derived),
                                                       jax.random.PRNGKey(0), 1))
  tree = params_lib.from_hf(model_dir.tensors, 'generator', target,
                            os.path.join(directory, files.WEIGHTS))
  hf = model_dir.config
  shape = frozen_generator.Shape(
      hf['hidden_size'], hf['num_attention_heads'], hf['intermediate_size'],
      hf['num_hidden_layers'], derived.embedding_size, derived.vocab_size,
      derived.max_position_embeddings, derived.type_vocab_size)
  params = {new: tree[old] for old, new in frozen_generator.RENAMED['electra'].items()}
  return frozen_generator.Source(params, shape, f"the ElectraForMaskedLM in '{directory}'")
