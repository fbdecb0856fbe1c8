"""ModernBERT's encoder design as Flax Linen modules (config.model.architecture='modern'; how
it differs from BERT: docs/training.md, "The modern encoder"). The heads are transformers'
ModernBertPredictionHead, so a run exports as ModernBERT (hf/modern.py). Parameters are float32;
norm statistics, softmax, RoPE and the output logits stay in float32 whatever `dtype` is.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from electra_jax.model.layers import (WordTable, _init, attention_kernel, gelu, is_documents,
                                      pairs_of, pallas_attention)

NORM_EPS = 1e-5


def norm(name: str) -> nn.LayerNorm:
  return nn.LayerNorm(epsilon=NORM_EPS, use_bias=False, dtype=jnp.float32, name=name)


def rope_tables(length: int, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
  """cos and sin [L, D] of RoPE's angles: position times theta^(-2i/D), each frequency twice
  (the halves of the head that `rotate` pairs)."""
  inverse = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
  angles = jnp.arange(length, dtype=jnp.float32)[:, None] * inverse[None, :]
  angles = jnp.concatenate([angles, angles], axis=-1)
  return jnp.cos(angles), jnp.sin(angles)


def rotate(x, cos, sin):
  """RoPE on [B, L, H, D], in float32: x·cos + rotate_half(x)·sin, halves (a, b) -> (-b, a)."""
  x32 = x.astype(jnp.float32)
  first, second = jnp.split(x32, 2, axis=-1)
  turned = jnp.concatenate([-second, first], axis=-1)
  return (x32 * cos[None, :, None, :] + turned * sin[None, :, None, :]).astype(x.dtype)


def band(length: int, window: int) -> jax.Array:
  """[L, L] bool: key k is within window // 2 positions of query q (transformers' rule)."""
  order = jnp.arange(length)
  return jnp.abs(order[:, None] - order[None, :]) <= window // 2


def banded_attention(query, key, value, input_mask, window: int, dropout):
  """softmax(QKᵀ/√D) V of a local layer in blocks: queries in blocks of window // 2 see their
  own block and its two neighbours, so the cost grows with the length times the window, not the
  length squared. [B, L, H, D] in and out; `input_mask` is [B, L] keys or document ids."""
  batch, length, heads, head_dim = query.shape
  block = max(1, window // 2)
  count = -(-length // block)
  pad = count * block - length
  along = lambda t, before, after: jnp.pad(t, [(0, 0), (before, after)] + [(0, 0)] * (t.ndim - 2))
  blocks = lambda t: along(t, 0, pad).reshape(batch, count, block, *t.shape[2:])
  # Each block's keys: the block before it, itself and the one after (zeros past the ends).
  around = lambda t: jnp.concatenate([along(t, 1, 0)[:, :-1], t, along(t, 0, 1)[:, 1:]], axis=2)
  q, k, v = blocks(query), around(blocks(key)), around(blocks(value))
  positions = jnp.arange(count * block).reshape(count, block)
  key_positions = around(positions[None])[0]
  near = jnp.abs(positions[:, :, None] - key_positions[:, None, :]) <= window // 2
  ids = input_mask.astype(jnp.int32)
  key_ids, query_ids = around(blocks(ids)), blocks(ids)
  real = (key_ids != 0)[:, :, None, :] & (key_positions < length)[None, :, None, :]
  if is_documents(input_mask):
    real &= query_ids[:, :, :, None] == key_ids[:, :, None, :]
  pairs = (near[None] & real)[:, :, None]  # [B, blocks, 1, block, 3 block]
  scores = jnp.einsum('bnqhd,bnkhd->bnhqk', q, k, preferred_element_type=jnp.float32)
  scores = jnp.where(pairs, scores * head_dim ** -0.5, -1e9)
  probs = dropout(jax.nn.softmax(scores, axis=-1))
  context = jnp.einsum('bnhqk,bnkhd->bnqhd', probs.astype(value.dtype), v)
  return context.reshape(batch, count * block, heads, head_dim)[:, :length]


class ModernEmbeddings(WordTable):
  """The word table, a norm and dropout (RoPE, in the attention, says the positions)."""
  vocab_size: int
  width: int
  dropout_rate: float
  dtype: Any = jnp.float32

  def setup(self):
    self.word_embeddings = nn.Embed(self.vocab_size, self.width, embedding_init=_init,
                                    name='word_embeddings')
    self.layer_norm = norm('layer_norm')
    self.dropout = nn.Dropout(self.dropout_rate)

  def __call__(self, input_ids, segment_ids, deterministic: bool, word_delta=None):
    """`segment_ids` is ignored (the design has no token types); `word_delta` as Embeddings'."""
    del segment_ids
    words = self.words(input_ids, word_delta)
    return self.dropout(self.layer_norm(words), deterministic=deterministic).astype(self.dtype)


class RotaryAttention(nn.Module):
  """Self-attention with RoPE on Q and K, global or within a band of `window` tokens: a mask
  on the einsum path (in blocks past twice the window), splash's local mask on a TPU, cuDNN's
  local_window_size on a GPU, a bias for XLA. cuDNN gives way to XLA for document ids and for a
  query-by-key mask (Electric's towers), splash for the latter only."""
  num_heads: int
  attention_dropout_rate: float
  theta: float
  window: int = 0  # 0: global
  dtype: Any = jnp.float32
  implementation: str = 'auto'
  interpret: bool = False  # the Pallas kernel in Pallas's interpret mode (tests, on a CPU)

  @nn.compact
  def __call__(self, x, input_mask, deterministic: bool):
    batch, length, width = x.shape
    head_dim = width // self.num_heads
    qkv = nn.Dense(3 * width, use_bias=False, kernel_init=_init, dtype=self.dtype, name='qkv')(x)
    query, key, value = (t.reshape(batch, length, self.num_heads, head_dim)
                         for t in jnp.split(qkv, 3, axis=-1))
    cos, sin = rope_tables(length, head_dim, self.theta)
    query, key = rotate(query, cos, sin), rotate(key, cos, sin)
    pairs = pairs_of(input_mask)
    if self.window:
      pairs = pairs & band(length, self.window)[None, None]
    dropout_off = deterministic or self.attention_dropout_rate == 0.0
    kernel = attention_kernel(self.implementation, self.dtype, head_dim, length) if dropout_off \
        else 'einsum'
    if kernel == 'pallas' and input_mask.ndim == 2:  # splash: the window as its local mask
      heads_first = lambda t: jnp.einsum('blhd->bhld', t)
      context = jnp.einsum('bhld->blhd', pallas_attention(
          heads_first(query * jnp.asarray(head_dim ** -0.5, query.dtype)), heads_first(key),
          heads_first(value), input_mask, self.interpret, self.window))
    elif kernel == 'cudnn' and input_mask.ndim == 2 and not is_documents(input_mask):
      half = self.window // 2 if self.window else None
      context = jax.nn.dot_product_attention(
          query, key, value, key_value_seq_lengths=jnp.sum(input_mask, -1, dtype=jnp.int32),
          local_window_size=(half, half) if half else None, implementation='cudnn')
    elif kernel in ('xla', 'cudnn', 'pallas'):
      bias = jnp.where(pairs, 0.0, -1e9).astype(jnp.float32)
      context = jax.nn.dot_product_attention(query, key, value, bias=bias, implementation='xla')
    elif self.window and input_mask.ndim == 2 and length > 2 * self.window:
      dropout = nn.Dropout(self.attention_dropout_rate)
      context = banded_attention(query, key, value, input_mask, self.window,
                                 lambda p: dropout(p, deterministic=deterministic))
    else:
      scores = jnp.einsum('bqhd,bkhd->bhqk', query, key, preferred_element_type=jnp.float32)
      scores = jnp.where(pairs, scores * head_dim ** -0.5, -1e9)
      probs = nn.Dropout(self.attention_dropout_rate)(jax.nn.softmax(scores, axis=-1),
                                                      deterministic=deterministic)
      context = jnp.einsum('bhqk,bkhd->bqhd', probs.astype(self.dtype), value)
    context = context.reshape(batch, length, width)
    return nn.Dense(width, use_bias=False, kernel_init=_init, dtype=self.dtype,
                    name='output')(context)


class ModernLayer(nn.Module):
  """x + attention(norm(x)), then x + GeGLU(norm(x)); the first layer has no attention norm
  (the embeddings' norm precedes it)."""
  num_heads: int
  intermediate_size: int
  dropout_rate: float
  attention_dropout_rate: float
  theta: float
  window: int
  first: bool
  dtype: Any = jnp.float32
  attention: str = 'auto'

  @nn.compact
  def __call__(self, x, input_mask, deterministic: bool):
    width = x.shape[-1]
    dropout = nn.Dropout(self.dropout_rate)
    normed = x if self.first else norm('attention_norm')(x).astype(self.dtype)
    attended = RotaryAttention(self.num_heads, self.attention_dropout_rate, self.theta,
                               self.window, self.dtype, self.attention, name='attention')(
                                   normed, input_mask, deterministic)
    x = x + dropout(attended, deterministic=deterministic)
    hidden = nn.Dense(2 * self.intermediate_size, use_bias=False, kernel_init=_init,
                      dtype=self.dtype, name='mlp_in')(norm('mlp_norm')(x).astype(self.dtype))
    value, gate = jnp.split(hidden, 2, axis=-1)
    hidden = nn.Dense(width, use_bias=False, kernel_init=_init, dtype=self.dtype,
                      name='mlp_out')(gelu(value) * gate)
    return (x + dropout(hidden, deterministic=deterministic)).astype(self.dtype)


class ModernEncoder(nn.Module):
  """A stack of ModernLayers, global attention on layers 0, global_every, 2·global_every, ...,
  local on the others, and a final norm."""
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  dropout_rate: float
  attention_dropout_rate: float
  local_window: int
  global_every: int
  rope_theta: float
  local_rope_theta: float
  dtype: Any = jnp.float32
  remat: bool = False
  attention: str = 'auto'

  @nn.compact
  def __call__(self, x, input_mask, deterministic: bool):
    layer = nn.remat(ModernLayer, static_argnums=(3,)) if self.remat else ModernLayer
    for i in range(self.num_layers):
      is_global = i % self.global_every == 0
      x = layer(self.num_heads, self.intermediate_size, self.dropout_rate,
                self.attention_dropout_rate,
                self.rope_theta if is_global else self.local_rope_theta,
                0 if is_global else self.local_window, i == 0, self.dtype, self.attention,
                name=f'layer_{i}')(x, input_mask, deterministic)
    return norm('final_norm')(x).astype(self.dtype)


class ModernHead(nn.Module):
  """dense(-> width) -> GELU -> norm (ModernBertPredictionHead), then the MLM's tied decoder
  bias, or the discriminator's dense(width -> 1)."""
  width: int
  vocab_size: int = 0  # > 0: an MLM head, returning (hidden, the decoder's output bias)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, hidden):
    hidden = nn.Dense(self.width, use_bias=False, kernel_init=_init, dtype=self.dtype,
                      name='dense')(hidden)
    hidden = norm('layer_norm')(gelu(hidden))
    if self.vocab_size:
      return hidden, self.param('output_bias', nn.initializers.zeros, (self.vocab_size,))
    logits = nn.Dense(1, kernel_init=nn.initializers.normal(self.width ** -0.5),
                      dtype=jnp.float32, name='prediction')(hidden)
    return logits[..., 0]
