"""A Hugging Face masked LM directory as a frozen generator (config.generator_init).

training/frozen_generator.py reads our own runs. A Hugging Face directory is read here, with
import's checks (hf/files.py, hf/model_config.py, hf/params.py). hf is the floor above training,
so electra_jax.main hands `read` to train.train_and_evaluate. Two kinds hold what the generator
needs, its embedding block, encoder and MLM head:
  - an ElectraForMaskedLM: our export's generator/ directory, an MLM run's mlm/ directory, or
    google/electra-*-generator;
  - a BertForMaskedLM or BertForPreTraining, whose masked-LM head (`cls.predictions.*`) is our
    generator head at E = H (hf/bert.py maps it); its pooler and next-sentence head are left
    out. A BertModel has no such head and is refused, naming the tensors it lacks.
Import's model_config.check_supported refuses what the generator would not compute exactly
(`hidden_act` other than "gelu", ...). A discriminator (ElectraForPreTraining) is refused too: it predicts no tokens.
"""

import os

import jax
import ml_collections

from electra_jax.common.errors import UsageError
from electra_jax.hf import bert, files, model_config, params as params_lib
from electra_jax.model import networks
from electra_jax.training import frozen_generator

SUPPORTED = ('a Hugging Face ElectraForMaskedLM (our export\'s generator/ or mlm/) or '
             'BertForMaskedLM directory, or the workdir of one of our mlm or electra runs')


def read(directory: str, model: ml_collections.ConfigDict) -> frozen_generator.Source:
  """The masked LM in `directory` under the generator's names, its tensors checked against its
  own config.json (the run's `model` supplies only what the file leaves open)."""
  config = files.read_config(directory)
  model_dir = files.read_model_dir(directory, bert_masked_lm=True)
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
  architecture = (config.get('architectures') or ['BERT masked LM' if bert.is_bert(config)
                                                   else 'ElectraForMaskedLM'])[0]
  return frozen_generator.Source(params, shape, f"the {architecture} in '{directory}'")
