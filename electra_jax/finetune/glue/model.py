"""GLUE's network: ELECTRA's discriminator encoder with a classification head on [CLS].

The head is the original's: [CLS] -> dropout -> one dense layer (labels, or STS-B's score),
Glorot-uniform as TensorFlow's default, no pooler. head='transformers' puts
ElectraForSequenceClassification's dense, exact GELU and dropout before it (its new layer drawn
normal(0.02)), so the model exports as that class; on a 'modern' encoder it is
ModernBertForSequenceClassification's (init.modern_head on the pooled vector). pooling='mean'
reads the top layer's mean over the real tokens: replaced-token detection never asks [CLS]
anything.
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from electra_jax.finetune.init import encode, modern_head


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
    if self.head == 'transformers' and self.config.architecture == 'modern':
      return modern_head(pool(hidden, input_ids, self.pooling), self.num_outputs,
                         self.head_dropout_rate, deterministic)
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
  """[B, H]: the [CLS] vector, or the mean over the real tokens ([CLS] and [SEP] included); an
  all-padding row (a last batch's filler) pools to zeros, not 0/0."""
  if pooling == 'cls':
    return hidden[:, 0]
  if pooling != 'mean':
    raise ValueError(f'pooling={pooling!r}: use one of {POOLINGS}')
  real = (input_ids != 0)[..., None].astype(hidden.dtype)
  return (hidden * real).sum(1) / jnp.maximum(real.sum(1), 1)
