"""The fine-tuning network: ELECTRA's discriminator encoder with a task head on [CLS].

Its parameter tree holds `embeddings` and `discriminator` exactly as the pretraining model
`Electra` names them, so a pretrained checkpoint's subtrees drop in unchanged, plus `classifier`,
the new head: [CLS] vector -> dropout -> one dense layer (num_labels logits, or 1 score for a
regression task). As in the original there is no pooler, and the head is initialised with
Glorot-uniform (TensorFlow's default for a dense layer given no initializer). `head='transformers'`
puts transformers' ElectraForSequenceClassification head there instead (dense H -> H, exact
GELU, dropout, then the dense layer above), so that the fine-tuned model exports as that class
(finetune/export.py); its new layer is drawn as transformers draws it, normal(0.02). `pooling='mean'`
reads the mean of the top layer over the real tokens instead of [CLS]: replaced-token detection
never asks [CLS] anything, so a small encoder's sentence information may sit in its tokens.
"""

import functools
from typing import Any

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


class Classifier(nn.Module):
  config: ml_collections.ConfigDict  # a pretraining run's `model` section
  num_outputs: int
  head_dropout_rate: float = 0.1
  dtype: Any = jnp.float32
  attention: str = 'auto'  # layers.SelfAttention.implementation, used where attention dropout is off
  pooling: str = 'cls'  # POOLINGS: what the head reads of the sequence output
  head: str = 'electra'  # HEADS: the original's one dense layer, or transformers' two

  @nn.compact
  def __call__(self, input_ids, segment_ids, deterministic: bool = True):
    hidden = encode(self, input_ids, segment_ids, deterministic)
    dropout = nn.Dropout(self.head_dropout_rate)
    pooled = dropout(pool(hidden, input_ids, self.pooling), deterministic=deterministic)
    if self.head == 'transformers':
      pooled = nn.Dense(self.config.hidden_size, kernel_init=nn.initializers.normal(0.02),
                        dtype=jnp.float32, name='classifier_dense')(pooled)
      pooled = dropout(nn.gelu(pooled, approximate=False), deterministic=deterministic)
    elif self.head != 'electra':
      raise ValueError(f'head={self.head!r}: use one of {HEADS}')
    return nn.Dense(self.num_outputs, kernel_init=nn.initializers.glorot_uniform(),
                    dtype=jnp.float32, name='classifier')(pooled)


POOLINGS = ('cls', 'mean')
HEADS = ('electra', 'transformers')


def pool(hidden, input_ids, pooling: str):
  """[B, H] of the sequence output [B, L, H]: its first ([CLS]) vector, or its mean over the
  real tokens ([CLS] and [SEP] included, padding (id 0) not). An all-padding row (the filler
  of a last evaluation batch) pools to zeros, not 0/0."""
  if pooling == 'cls':
    return hidden[:, 0]
  if pooling != 'mean':
    raise ValueError(f'pooling={pooling!r}: use one of {POOLINGS}')
  real = (input_ids != 0)[..., None].astype(hidden.dtype)
  return (hidden * real).sum(1) / jnp.maximum(real.sum(1), 1)


def init_params(model: Classifier, rng, max_seq_length: int):
  """Fresh parameters from `rng`, by one program compiled once per model and length.

  Run op by op, the initialisers dispatch hundreds of small computations, each compiled on
  first use: seconds of CPU per process. The compiled program draws the same numbers.
  """
  frozen = model.clone(config=ml_collections.FrozenConfigDict(model.config))  # hashable
  return _init_program(frozen, max_seq_length)(rng)


@functools.lru_cache(maxsize=16)
def _init_program(model: Classifier, max_seq_length: int):
  def init(rng):
    ids = jnp.zeros((1, max_seq_length), jnp.int32)
    return model.init({'params': rng}, ids, ids)['params']
  return jax.jit(init)


def param_shapes(model: Classifier, max_seq_length: int):
  return jax.eval_shape(lambda: init_params(model, jax.random.PRNGKey(0), max_seq_length))


class Tagger(nn.Module):
  """Per-token label logits [B, L, num_labels]: one dense layer over the sequence output.

  The task reads the logits of each word's first sub-token (chunk_data); the original had no
  dropout of its own before this layer, only the encoder's.
  """
  config: ml_collections.ConfigDict
  num_labels: int
  dtype: Any = jnp.float32
  attention: str = 'auto'

  @nn.compact
  def __call__(self, input_ids, segment_ids, deterministic: bool = True):
    hidden = encode(self, input_ids, segment_ids, deterministic)
    return nn.Dense(self.num_labels, kernel_init=nn.initializers.glorot_uniform(),
                    dtype=jnp.float32, name='classifier')(hidden)
