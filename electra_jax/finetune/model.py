"""What every fine-tuning network shares: ELECTRA's discriminator encoder, and fresh parameters.

A task family's network (glue/model.py's Classifier, squad/model.py's QuestionAnswerer,
tagging/model.py's Tagger) calls `encode` in its compact call: its parameter tree then holds
`embeddings` and `discriminator` exactly as the pretraining model `Electra` names them, so a
pretrained checkpoint's subtrees drop in unchanged, beside the family's new head.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from electra_jax.model.layers import Embeddings, Encoder


def encode(module: nn.Module, input_ids, segment_ids, deterministic: bool):
  """The discriminator's sequence output [B, L, H], built inside `module`'s compact call, whose
  `config`, `dtype` and `attention` fields it reads: its parameters are module's `embeddings`
  and `discriminator`, the names pretraining gives them, for every task family's model."""
  c = module.config
  embedded = Embeddings(c.vocab_size, c.embedding_size, c.max_position_embeddings,
                        c.type_vocab_size, c.dropout_rate, module.dtype, name='embeddings')(
                            input_ids, segment_ids, deterministic)
  return Encoder(hidden_size=c.hidden_size, num_layers=c.num_layers, num_heads=c.num_heads,
                 intermediate_size=c.intermediate_size, dropout_rate=c.dropout_rate,
                 attention_dropout_rate=c.attention_dropout_rate, dtype=module.dtype,
                 attention=module.attention, name='discriminator')(
                     embedded, input_ids != 0, deterministic)


def init_params(model: nn.Module, rng, max_seq_length: int):
  """Fresh parameters of a fine-tuning network from `rng`, by one program compiled once per
  model and length.

  Run op by op, the initialisers dispatch hundreds of small computations, each compiled on
  first use: seconds of CPU per process. The compiled program draws the same numbers.
  """
  frozen = model.clone(config=ml_collections.FrozenConfigDict(model.config))  # hashable
  return _init_program(frozen, max_seq_length)(rng)


@functools.lru_cache(maxsize=16)
def _init_program(model: nn.Module, max_seq_length: int):
  def init(rng):
    ids = jnp.zeros((1, max_seq_length), jnp.int32)
    return model.init({'params': rng}, ids, ids)['params']
  return jax.jit(init)


def param_shapes(model: nn.Module, max_seq_length: int):
  return jax.eval_shape(lambda: init_params(model, jax.random.PRNGKey(0), max_seq_length))
