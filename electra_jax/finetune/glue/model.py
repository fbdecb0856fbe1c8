"""GLUE's network: ELECTRA's discriminator encoder with a classification head on [CLS].

Its parameter tree holds `embeddings` and `discriminator` as pretraining names them
(finetune/model.py's encode), plus `classifier`, the new head: [CLS] vector -> dropout -> one
dense layer (num_labels logits, or 1 score for a regression task). As in the original there is no
pooler, and the head is initialised with Glorot-uniform (TensorFlow's default for a dense layer
given no initializer). `head='transformers'` puts transformers' ElectraForSequenceClassification
head there instead (dense H -> H, exact GELU, dropout, then the dense layer above), so that the
fine-tuned model exports as that class (finetune/export.py); its new layer is drawn as
transformers draws it, normal(0.02). `pooling='mean'` reads the mean of the top layer over the
real tokens instead of [CLS]: replaced-token detection never asks [CLS] anything, so a small
encoder's sentence information may sit in its tokens.
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from electra_jax.finetune.model import encode


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
