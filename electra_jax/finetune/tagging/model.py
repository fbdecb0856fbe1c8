"""The tagging network: ELECTRA's discriminator encoder with a per-token label layer."""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from electra_jax.finetune.model import encode


class Tagger(nn.Module):
  """Per-token label logits [B, L, num_labels]: one dense layer over the sequence output.

  The task reads the logits of each word's first sub-token (tagging/data.py); the original had
  no dropout of its own before this layer, only the encoder's.
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
