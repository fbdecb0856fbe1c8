"""The transformer's building blocks as Flax Linen modules, for model/networks.py and finetune/:
BERT's post-LayerNorm encoder with the original's numerics (erf GELU, LayerNorm epsilon 1e-12,
additive -10000 padding bias, truncated-normal(0.02) init). Parameters are float32; `dtype` sets
the computation dtype; softmax, LayerNorm statistics and the output logits stay in float32.
"""

import functools
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


class WordTable(nn.Module):
  """An embedding block's `word_embeddings`: the lookup, and the tied output matrix."""

  def words(self, input_ids, word_delta=None):
    """`word_delta` [V, E] (GDES): the words come from stop_gradient(table) + word_delta."""
    if word_delta is None:
      return self.word_embeddings(input_ids)
    table = jax.lax.stop_gradient(self.word_embeddings.embedding) + word_delta
    return jnp.take(table, input_ids, axis=0)

  def attend(self, hidden):
    """Logits against the word-embedding table (the generator's tied output matrix)."""
    table = self.word_embeddings.embedding.astype(self.dtype)
    return jnp.einsum('...e,ve->...v', hidden.astype(self.dtype), table,
                      preferred_element_type=jnp.float32)


class Embeddings(WordTable):
  """Word + position + token-type embeddings, LayerNorm and dropout, all in width E."""
  vocab_size: int
  embedding_size: int
  max_position_embeddings: int
  type_vocab_size: int
  dropout_rate: float
  dtype: Any = jnp.float32

  def setup(self):
    table = lambda rows, name: nn.Embed(rows, self.embedding_size, embedding_init=_init, name=name)
    self.word_embeddings = table(self.vocab_size, 'word_embeddings')
    self.position_embeddings = table(self.max_position_embeddings, 'position_embeddings')
    self.token_type_embeddings = table(self.type_vocab_size, 'token_type_embeddings')
    self.layer_norm = layer_norm('layer_norm')
    self.dropout = nn.Dropout(self.dropout_rate)

  def __call__(self, input_ids, segment_ids, deterministic: bool, word_delta=None):
    """`word_delta` as `WordTable.words`."""
    positions = jnp.arange(input_ids.shape[-1])[None, :]
    x = self.layer_norm(self.words(input_ids, word_delta) + self.position_embeddings(positions)
                        + self.token_type_embeddings(segment_ids))
    return self.dropout(x, deterministic=deterministic).astype(self.dtype)


ATTENTION_IMPLEMENTATIONS = ('auto', 'xla', 'cudnn', 'pallas', 'einsum')

# Pallas's TPU splash attention tiles both sequence axes in blocks of a multiple of 128 (the
# vector lanes) that divide the length; 512 is the largest block tried (base's length).
PALLAS_BLOCK_UNIT = 128
PALLAS_MAX_BLOCK = 512

def tracing_mesh():
  """The mesh set for tracing (`jax.set_mesh`), or None: what a kernel is mapped over."""
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty else mesh


def pallas_misfit(seq_length: int | None, platform: str | None = None) -> str | None:
  """Why the Pallas kernel cannot run at this length, or None: here, or on `platform` (a step
  compiled for another machine, training/aot.py)."""
  if seq_length is not None and seq_length % PALLAS_BLOCK_UNIT:
    return (f'sequence length {seq_length} is not a multiple of {PALLAS_BLOCK_UNIT}, the '
            "smallest block of the Pallas kernel; use attention='auto' (einsum there) or a "
            'max_seq_length that is a multiple of 128')
  # XLA cannot partition a Mosaic kernel: it runs per shard, under shard_map over the mesh. This
  # host's device count says nothing of another machine's, so compiling for one takes a mesh.
  if tracing_mesh() is None and (platform is not None or jax.device_count() > 1):
    return ('the kernel runs per shard of the batch, and no mesh is set for tracing: trace the '
            "step inside `with jax.set_mesh(mesh):`, or use attention='auto' (einsum there)")
  return None


def pallas_block(seq_length: int) -> int:
  """One block per sequence up to 512 (the score matrix sits in VMEM), else the largest multiple
  of 128 up to 512 that divides the length."""
  return max(b for b in range(PALLAS_BLOCK_UNIT, PALLAS_MAX_BLOCK + 1, PALLAS_BLOCK_UNIT)
             if seq_length % b == 0)


def splash_blocks(seq_length: int, window: int) -> tuple[int, int]:
  """(blocks the splash kernel computes, blocks in all) for one head: a local layer's mask
  (window // 2 keys either side) skips the block pairs that no query-key pair of it touches."""
  block = pallas_block(seq_length)
  n = seq_length // block
  reach = window // 2 if window else seq_length
  touched = sum(1 for i in range(n) for j in range(n) if abs(i - j) * block - (block - 1) <= reach)
  return touched, n * n


def attention_kernel(implementation: str, dtype, head_dim: int, seq_length: int | None = None,
                     platform: str | None = None) -> str:
  """What computes attention where its dropout is off: 'cudnn', 'pallas', 'xla' or 'einsum'.
  'auto', by the platform compiled for (`platform`, else jax.default_backend()): on a TPU splash
  where `pallas_misfit` allows; on a GPU cuDNN for 16-bit inputs and head sizes that are
  multiples of 8 up to 128 (Hopper's 256 does not hold on every GPU); else einsum (XLA's fused
  path was no faster on a CPU). An explicit 'pallas' that cannot run is refused, not replaced."""
  if implementation not in ATTENTION_IMPLEMENTATIONS:
    raise ValueError(f'attention implementation {implementation!r}: use one of '
                     f'{ATTENTION_IMPLEMENTATIONS}')
  if implementation == 'pallas' and (why := pallas_misfit(seq_length, platform)):
    raise ValueError(f"attention='pallas': {why}")
  if implementation != 'auto':
    return implementation
  target = platform or jax.default_backend()
  if target == 'tpu':
    return 'einsum' if pallas_misfit(seq_length, platform) else 'pallas'
  cudnn_fits = (jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
                and head_dim % 8 == 0 and head_dim <= 128)
  return 'cudnn' if target == 'gpu' and cudnn_fits else 'einsum'


def is_documents(input_mask) -> bool:
  """Whether `input_mask` holds document ids ([B, L] ints, 0 for padding), not a boolean mask."""
  return input_mask.dtype != jnp.bool_


def pairs_of(input_mask):
  """The query-key pairs that may attend, broadcastable to [B, H, Lq, Lk]: from [B, L] keys,
  [B, L, L] query by key, or [B, L] document ids (a token sees its own document's tokens)."""
  if is_documents(input_mask):
    same = input_mask[:, :, None] == input_mask[:, None, :]
    return (same & (input_mask[:, None, :] != 0))[:, None]
  return input_mask[:, None, None, :] if input_mask.ndim == 2 else input_mask[:, None]


def _splash(query, key, value, input_mask, interpret: bool, window: int = 0):
  """Splash attention on [B, H, L, D], Q scaled by 1/√D, vmapped over the batch. Not the
  package's flash_attention, whose residuals move 2.8x the bytes at L=128 (docs/performance.md)."""
  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks
  _, heads, seq_length, _ = query.shape
  block = pallas_block(seq_length)
  # One backward kernel makes dQ, dK and dV together: the scores are recomputed once, not twice.
  sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                            block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                            use_fused_bwd_kernel=True)
  # The local window is the kernel's mask (it skips the blocks outside the band); padding and
  # documents go in as segment ids.
  shape = (seq_length, seq_length)
  mask = masks.LocalMask(shape, (window // 2, window // 2), 0) if window else masks.FullMask(shape)
  kernel = splash.make_splash_mha(masks.MultiHeadMask([mask] * heads), block_sizes=sizes,
                                  head_shards=1, q_seq_shards=1, interpret=interpret)
  kv_segments = input_mask.astype(jnp.int32)
  q_segments = kv_segments if is_documents(input_mask) else jnp.ones_like(kv_segments)
  return jax.vmap(kernel)(query, key, value, splash.SegmentIds(q=q_segments, kv=kv_segments))


def pallas_attention(query, key, value, input_mask, interpret: bool = False, window: int = 0):
  """softmax(QKᵀ + padding)V by Pallas's TPU splash attention, on [B, H, L, D] (Q scaled by
  1/√D, as HeadsFirstDense makes them). Queries are in segment 1 and keys in their `input_mask`
  value (document ids: both), so padding keys get zero weight, as from the einsum path's bias (a
  row with no real key differs; no loss reads it). `window` > 0: window // 2 keys either side.
  `interpret`: Pallas's interpret mode, for a CPU."""
  splash = functools.partial(_splash, interpret=interpret, window=window)
  mesh = tracing_mesh()
  if mesh is None or mesh.size == 1:
    return splash(query, key, value, input_mask)
  # Each device attends within its own sequences: the batch axis is split over the whole mesh.
  batch = jax.sharding.PartitionSpec(mesh.axis_names)
  return jax.shard_map(splash, mesh=mesh, in_specs=(batch, batch, batch, batch),
                       out_specs=batch, check_vma=False)(query, key, value, input_mask)


class HeadsFirstDense(nn.Module):
  """nn.Dense(features)'s parameters (names, shapes, init) with its output as [B, H, L, D]: the
  Pallas path's Q, K and V, the kernel's layout and scale folded into the matmul (base at 512 on
  a v4-8: 204 to 185 GB of HBM traffic per chip and step)."""
  features: int
  num_heads: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, scale: float = 1.0):
    kernel = self.param('kernel', _init, (x.shape[-1], self.features))
    bias = self.param('bias', nn.initializers.zeros_init(), (self.features,))
    x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=self.dtype)
    head_dim = self.features // self.num_heads
    y = jnp.einsum('ble,ehd->bhld', x, kernel.reshape(x.shape[-1], self.num_heads, head_dim))
    y = y + bias.reshape(self.num_heads, 1, head_dim)
    return y if scale == 1.0 else y * jnp.asarray(scale, y.dtype)


class SelfAttention(nn.Module):
  """Multi-head self-attention over the tokens where `input_mask` is set. Every path computes
  the same function (to rounding); the fused ones (`attention_kernel`) have no attention dropout.
  cuDNN takes the padding as lengths, so it assumes what the packer guarantees: padding only at
  the end."""
  num_heads: int
  attention_dropout_rate: float
  dtype: Any = jnp.float32
  implementation: str = 'auto'
  interpret: bool = False  # the Pallas kernel in Pallas's interpret mode (tests, on a CPU)

  @nn.compact
  def __call__(self, x, input_mask, deterministic: bool):
    """`input_mask` as `pairs_of` takes it: [B, L] keys or document ids, or [B, L, L] query by
    key (Electric's one-directional towers)."""
    width = x.shape[-1]
    head_dim = width // self.num_heads
    dropout_off = deterministic or self.attention_dropout_rate == 0.0
    kernel = (attention_kernel(self.implementation, self.dtype, head_dim, x.shape[-2])
              if dropout_off else None)
    if kernel == 'cudnn' and (input_mask.ndim == 3 or is_documents(input_mask)):
      kernel = 'xla'  # the cuDNN call below takes padding as lengths, not a query-by-key mask
    if kernel == 'pallas' and input_mask.ndim == 3:
      kernel = 'einsum'  # segment ids cannot say a query-by-key mask
    if kernel == 'pallas':
      project = lambda name: HeadsFirstDense(width, self.num_heads, self.dtype, name=name)
      query = project('query')(x, float(head_dim) ** -0.5)
      key, value = (project(n)(x) for n in ('key', 'value'))
      context = jnp.einsum('bhld->blhd', pallas_attention(query, key, value, input_mask,
                                                          self.interpret))
      return context.reshape(x.shape[:-1] + (width,))
    split = lambda t: t.reshape(t.shape[:-1] + (self.num_heads, head_dim))
    dense = lambda name: nn.Dense(width, kernel_init=_init, dtype=self.dtype, name=name)
    query, key, value = (split(dense(n)(x)) for n in ('query', 'key', 'value'))
    # Padding keys get a large negative score, as in BERT: exp() of it underflows to 0.
    bias = jnp.where(pairs_of(input_mask), 0.0, -10000.0).astype(jnp.float32)
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
  """dense(H -> E) + GELU -> LayerNorm (generator and BERT's MLM); the caller projects onto the
  tied word embeddings."""
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
