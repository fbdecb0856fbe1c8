"""The transformer's building blocks as Flax Linen modules: embeddings, attention, layers, the
encoder and the two output heads. model/networks.py assembles them into the pretraining networks,
finetune/ into the fine-tuning ones.

The encoder is BERT's post-LayerNorm transformer with the original's numerics: exact (erf) GELU,
LayerNorm epsilon 1e-12, additive large-negative padding mask, truncated-normal(0.02) init.
Parameters are float32; `dtype` sets the computation dtype (float32 or bfloat16). Softmax,
LayerNorm statistics and the output logits stay in float32.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

# BERT's initializer: a normal(0, 0.02) truncated at two standard deviations.
_init = nn.initializers.truncated_normal(stddev=0.02)
# The original initialised the embedding projection and the discriminator's output layer with
# Glorot-uniform (TensorFlow's default for dense layers it did not give an initializer).
glorot_init = nn.initializers.glorot_uniform()
LAYER_NORM_EPS = 1e-12


def gelu(x):
  # Exact erf GELU as in BERT/ELECTRA; jax.nn.gelu defaults to the tanh approximation.
  return jax.nn.gelu(x, approximate=False)


def layer_norm(name: str) -> nn.LayerNorm:
  return nn.LayerNorm(epsilon=LAYER_NORM_EPS, dtype=jnp.float32, name=name)


class Embeddings(nn.Module):
  """Word + position + token-type embeddings, LayerNorm and dropout, all in width E."""
  vocab_size: int
  embedding_size: int
  max_position_embeddings: int
  type_vocab_size: int
  dropout_rate: float
  dtype: Any = jnp.float32

  def setup(self):
    self.word_embeddings = nn.Embed(
        self.vocab_size, self.embedding_size, embedding_init=_init, name='word_embeddings')
    self.position_embeddings = nn.Embed(
        self.max_position_embeddings, self.embedding_size, embedding_init=_init,
        name='position_embeddings')
    self.token_type_embeddings = nn.Embed(
        self.type_vocab_size, self.embedding_size, embedding_init=_init,
        name='token_type_embeddings')
    self.layer_norm = layer_norm('layer_norm')
    self.dropout = nn.Dropout(self.dropout_rate)

  def __call__(self, input_ids, segment_ids, deterministic: bool, word_delta=None):
    """`word_delta` [V, E] (GDES): the words come from stop_gradient(table) + word_delta."""
    positions = jnp.arange(input_ids.shape[-1])[None, :]
    if word_delta is None:
      words = self.word_embeddings(input_ids)
    else:
      table = jax.lax.stop_gradient(self.word_embeddings.embedding) + word_delta
      words = jnp.take(table, input_ids, axis=0)
    x = (words + self.position_embeddings(positions)
         + self.token_type_embeddings(segment_ids))
    x = self.layer_norm(x)
    return self.dropout(x, deterministic=deterministic).astype(self.dtype)

  def attend(self, hidden):
    """Logits against the word-embedding table (the generator's tied output matrix)."""
    table = self.word_embeddings.embedding.astype(self.dtype)
    return jnp.einsum('...e,ve->...v', hidden.astype(self.dtype), table,
                      preferred_element_type=jnp.float32)


ATTENTION_IMPLEMENTATIONS = ('auto', 'xla', 'cudnn', 'einsum')


def attention_kernel(implementation: str, dtype, head_dim: int) -> str:
  """What computes attention where its dropout is off: 'cudnn', 'xla' or 'einsum'.

  'auto' is cuDNN's flash attention on a GPU where it applies (16-bit inputs, head sizes that
  are multiples of 8 up to 128; Hopper allows 256, 128 is the bound on every GPU), and the einsum
  path elsewhere: XLA's `dot_product_attention` lowers to the same operations there, and was no
  faster on a CPU (docs/performance.md).
  """
  if implementation not in ATTENTION_IMPLEMENTATIONS:
    raise ValueError(f'attention implementation {implementation!r}: use one of '
                     f'{ATTENTION_IMPLEMENTATIONS}')
  if implementation != 'auto':
    return implementation
  cudnn_fits = (jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
                and head_dim % 8 == 0 and head_dim <= 128)
  return 'cudnn' if jax.default_backend() == 'gpu' and cudnn_fits else 'einsum'


class SelfAttention(nn.Module):
  """Multi-head self-attention over the tokens where `input_mask` is set.

  Two paths compute the same function. The einsum path applies dropout to the attention
  probabilities, as BERT and ELECTRA do in pretraining. The fused path,
  `jax.nn.dot_product_attention`, has no such dropout, so it runs only where that dropout is
  off (deterministic, or a rate of 0) and the two paths agree (to float rounding).

  `implementation` picks the fused kernel (see `attention_kernel`); 'einsum' never fuses. The
  cuDNN kernel takes the padding as per-sequence lengths, so it assumes what the packer
  guarantees: padding only at the end of a sequence.
  """
  num_heads: int
  attention_dropout_rate: float
  dtype: Any = jnp.float32
  implementation: str = 'auto'

  @nn.compact
  def __call__(self, x, input_mask, deterministic: bool):
    """`input_mask` is [B, L] (the keys each query may attend to: the real tokens) or [B, L, L]
    (query by key, e.g. a causal mask: Electric's one-directional towers)."""
    width = x.shape[-1]
    head_dim = width // self.num_heads
    split = lambda t: t.reshape(t.shape[:-1] + (self.num_heads, head_dim))
    dense = lambda name: nn.Dense(width, kernel_init=_init, dtype=self.dtype, name=name)
    query, key, value = (split(dense(n)(x)) for n in ('query', 'key', 'value'))
    # Padding keys get a large negative score, as in BERT: exp() of it underflows to 0.
    pairs = input_mask[:, None, None, :] if input_mask.ndim == 2 else input_mask[:, None]
    bias = jnp.where(pairs, 0.0, -10000.0).astype(jnp.float32)
    dropout_off = deterministic or self.attention_dropout_rate == 0.0
    kernel = attention_kernel(self.implementation, self.dtype, head_dim) if dropout_off else None
    if kernel == 'cudnn' and input_mask.ndim == 3:
      kernel = 'xla'  # the cuDNN call below takes padding as lengths, not a query-by-key mask
    if kernel == 'cudnn':
      lengths = jnp.sum(input_mask, axis=-1, dtype=jnp.int32)
      context = jax.nn.dot_product_attention(query, key, value, key_value_seq_lengths=lengths,
                                             implementation='cudnn')
    elif kernel == 'xla':
      context = jax.nn.dot_product_attention(query, key, value, bias=bias, implementation='xla')
    else:  # 'einsum', or attention dropout is on
      scores = jnp.einsum('bqhd,bkhd->bhqk', query, key, preferred_element_type=jnp.float32)
      scores = scores / jnp.sqrt(head_dim).astype(jnp.float32) + bias
      probs = jax.nn.softmax(scores, axis=-1)
      probs = nn.Dropout(self.attention_dropout_rate)(probs, deterministic=deterministic)
      context = jnp.einsum('bhqk,bkhd->bqhd', probs.astype(self.dtype), value)
    return context.reshape(context.shape[:-2] + (width,))


class TransformerLayer(nn.Module):
  """One post-LayerNorm BERT layer: attention -> add & norm -> GELU FFN -> add & norm."""
  num_heads: int
  intermediate_size: int
  dropout_rate: float
  attention_dropout_rate: float
  dtype: Any = jnp.float32
  attention: str = 'auto'  # SelfAttention.implementation

  @nn.compact
  def __call__(self, x, input_mask, deterministic: bool):
    width = x.shape[-1]
    dropout = nn.Dropout(self.dropout_rate)
    attended = SelfAttention(self.num_heads, self.attention_dropout_rate, self.dtype,
                             self.attention, name='attention')(x, input_mask, deterministic)
    attended = nn.Dense(width, kernel_init=_init, dtype=self.dtype, name='attention_output')(attended)
    x = layer_norm('attention_layer_norm')(x + dropout(attended, deterministic=deterministic))
    x = x.astype(self.dtype)
    hidden = nn.Dense(self.intermediate_size, kernel_init=_init, dtype=self.dtype,
                      name='intermediate')(x)
    hidden = nn.Dense(width, kernel_init=_init, dtype=self.dtype, name='output')(gelu(hidden))
    x = layer_norm('output_layer_norm')(x + dropout(hidden, deterministic=deterministic))
    return x.astype(self.dtype)


class Encoder(nn.Module):
  """`embeddings_project` (only when E != H) followed by a stack of transformer layers."""
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  dropout_rate: float
  attention_dropout_rate: float
  dtype: Any = jnp.float32
  remat: bool = False  # recompute each layer in the backward pass instead of storing it
  attention: str = 'auto'  # SelfAttention.implementation

  @nn.compact
  def __call__(self, embedded, input_mask, deterministic: bool):
    x = embedded
    if x.shape[-1] != self.hidden_size:
      x = nn.Dense(self.hidden_size, kernel_init=glorot_init, dtype=self.dtype,
                   name='embeddings_project')(x)
    # `deterministic` (argument 3, counting self) is a Python bool: static under remat.
    layer = nn.remat(TransformerLayer, static_argnums=(3,)) if self.remat else TransformerLayer
    for i in range(self.num_layers):
      x = layer(self.num_heads, self.intermediate_size, self.dropout_rate,
                self.attention_dropout_rate, self.dtype, self.attention, name=f'layer_{i}')(
                    x, input_mask, deterministic)
    return x


class MLMHead(nn.Module):
  """dense(H -> E) + GELU -> LayerNorm; the caller projects onto the tied word embeddings.

  The head of ELECTRA's generator and of BERT's masked LM alike.
  """
  embedding_size: int
  vocab_size: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, hidden):
    hidden = nn.Dense(self.embedding_size, kernel_init=_init, dtype=self.dtype, name='dense')(hidden)
    hidden = layer_norm('layer_norm')(gelu(hidden))
    output_bias = self.param('output_bias', nn.initializers.zeros, (self.vocab_size,))
    return hidden, output_bias


class DiscriminatorHead(nn.Module):
  """dense(H -> H) + GELU -> dense(H -> 1): one replaced/original logit per token."""
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, hidden):
    width = hidden.shape[-1]
    hidden = gelu(nn.Dense(width, kernel_init=_init, dtype=self.dtype, name='dense')(hidden))
    logits = nn.Dense(1, kernel_init=glorot_init, dtype=jnp.float32, name='prediction')(hidden)
    return logits[..., 0]
