"""The pretraining networks as Flax Linen modules: ELECTRA's pair, and BERT's masked LM.

`Electra` (config.objective='electra') owns three parameter subtrees (and their heads):

  embeddings     word, position and token-type tables and their LayerNorm, shared by both networks
  generator      its own `embeddings_project` (if E != H_gen), encoder and MLM head
  discriminator  its own `embeddings_project` (if E != H), encoder and replaced-token head

Both networks are reached through methods of the same module (`Electra.generate`,
`Electra.discriminate`), so one parameter tree and one optimizer serve both, and the gradient
of the shared embedding block is the sum of what each network's loss sends it.

`MaskedLM` (config.objective='mlm') is BERT's setup at the discriminator's size: `embeddings`
and `discriminator` exactly as `Electra` names and builds them (so fine-tuning loads either
run the same way) and `mlm_head`, the generator's head type; no generator.

`ReplaceMLM` (objectives 'replace_mlm' and 'all_tokens_mlm', the paper's ablations) is
`Electra`'s generator with `MaskedLM`'s discriminator-sized MLM (and, for All-Tokens MLM, a
copy head) in place of the replaced-token detector.

The encoder is BERT's post-LayerNorm transformer with the original's numerics: exact (erf) GELU,
LayerNorm epsilon 1e-12, additive large-negative padding mask, truncated-normal(0.02) init.
Parameters are float32; `dtype` sets the computation dtype (float32 or bfloat16). Softmax,
LayerNorm statistics and the output logits stay in float32.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

# BERT's initializer: a normal(0, 0.02) truncated at two standard deviations.
_init = nn.initializers.truncated_normal(stddev=0.02)
# The original initialised the embedding projection and the discriminator's output layer with
# Glorot-uniform (TensorFlow's default for dense layers it did not give an initializer).
_glorot = nn.initializers.glorot_uniform()
LAYER_NORM_EPS = 1e-12


def gelu(x):
  # Exact erf GELU as in BERT/ELECTRA; jax.nn.gelu defaults to the tanh approximation.
  return jax.nn.gelu(x, approximate=False)


def generator_width(config: ml_collections.ConfigDict) -> int:
  """Hidden width of the generator: a fraction of the discriminator's (an int is taken as is)."""
  size = config.generator_hidden_size
  return int(size) if size > 1 else int(round(config.hidden_size * size))


def generator_depth(config: ml_collections.ConfigDict) -> int:
  """Layers of the generator: a fraction of the discriminator's (a value > 1 is taken as the
  count), at least one. Configs saved before the field existed had the discriminator's depth."""
  depth = config.get('generator_layers', 1.0)
  return int(depth) if depth > 1 else max(1, int(round(config.num_layers * depth)))


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
      x = nn.Dense(self.hidden_size, kernel_init=_glorot, dtype=self.dtype,
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
    logits = nn.Dense(1, kernel_init=_glorot, dtype=jnp.float32, name='prediction')(hidden)
    return logits[..., 0]


def discriminator_encoder(c: ml_collections.ConfigDict, dtype, remat: bool,
                          attention: str) -> Encoder:
  """The encoder at the discriminator's size (`config.model`'s hidden_size, heads and FFN)."""
  return Encoder(
      hidden_size=c.hidden_size, num_layers=c.num_layers, num_heads=c.num_heads,
      intermediate_size=c.intermediate_size, dropout_rate=c.dropout_rate,
      attention_dropout_rate=c.attention_dropout_rate, dtype=dtype, remat=remat,
      attention=attention)


def generator_encoder(c: ml_collections.ConfigDict, dtype, remat: bool,
                      attention: str) -> Encoder:
  """The generator's encoder: generator_depth layers at generator_width, 64-wide heads and a
  4x FFN, as the original sizes it."""
  width = generator_width(c)
  return Encoder(
      hidden_size=width, num_layers=generator_depth(c), num_heads=max(1, width // 64),
      intermediate_size=4 * width, dropout_rate=c.dropout_rate,
      attention_dropout_rate=c.attention_dropout_rate, dtype=dtype, remat=remat,
      attention=attention)


def embeddings_block(c: ml_collections.ConfigDict, dtype) -> Embeddings:
  return Embeddings(c.vocab_size, c.embedding_size, c.max_position_embeddings, c.type_vocab_size,
                    c.dropout_rate, dtype)


def masked_lm_logits(embeddings: Embeddings, encoder: Encoder, head: MLMHead, input_ids,
                     segment_ids, positions, deterministic: bool):
  """MLM logits [B, P, V] (float32) at the given positions [B, P] only.

  Gathering before the head matters: the vocabulary projection is the most expensive part of
  a small generator, and only the selected positions need it.
  """
  hidden = encoder(embeddings(input_ids, segment_ids, deterministic), input_ids != 0,
                   deterministic)
  hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1)
  hidden, output_bias = head(hidden)
  return embeddings.attend(hidden) + output_bias


def replaced_token_logits(embeddings: Embeddings, encoder: Encoder, head: DiscriminatorHead,
                          input_ids, segment_ids, deterministic: bool, word_delta=None):
  """The discriminator's replaced-token logits [B, L] (float32), one per position."""
  hidden = encoder(embeddings(input_ids, segment_ids, deterministic, word_delta), input_ids != 0,
                   deterministic)
  return head(hidden)


EMBEDDING_SHARING = ('shared', 'gdes', 'none', 'all')


class Electra(nn.Module):
  """Generator and discriminator over one shared embedding block.

  embedding_sharing='gdes' is DeBERTa-v3's gradient-disentangled embedding sharing for the word
  table: the discriminator reads stop_gradient(word table) + `embedding_delta` (its own [V, E]
  residual, zero at init), so the RTD loss never moves the generator's word embeddings (their
  tug-of-war, DeBERTa-v3 section 3) and the MLM loss never moves the delta. The position and
  token-type tables and the embedding LayerNorm stay shared as under 'shared'.

  The paper's other two settings (section 3.2, "Weight sharing"): 'none' gives the generator an
  embedding block of its own (`generator_embeddings`, its tied output matrix too), and 'all'
  ties every weight of the generator's encoder to the discriminator's (so there is no
  `generator` entry: `generate` runs `discriminator`), which needs a generator of the
  discriminator's size (config.validate checks it). The heads stay separate in every setting.
  """
  config: ml_collections.ConfigDict  # the `model` section of the run config
  dtype: Any = jnp.float32
  remat: bool = False
  attention: str = 'auto'  # SelfAttention.implementation; every choice computes the same
  embedding_sharing: str = 'shared'  # one of EMBEDDING_SHARING

  def setup(self):
    c = self.config
    self.embeddings = embeddings_block(c, self.dtype)
    if self.embedding_sharing == 'none':
      self.generator_embeddings = embeddings_block(c, self.dtype)
    if self.embedding_sharing != 'all':
      self.generator = generator_encoder(c, self.dtype, self.remat, self.attention)
    self.generator_head = MLMHead(c.embedding_size, c.vocab_size, self.dtype)
    self.discriminator = discriminator_encoder(c, self.dtype, self.remat, self.attention)
    self.discriminator_head = DiscriminatorHead(self.dtype)
    if self.embedding_sharing == 'gdes':
      self.embedding_delta = self.param('embedding_delta', nn.initializers.zeros,
                                        (c.vocab_size, c.embedding_size))

  def __call__(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """Runs both networks once; used only to create every parameter at init."""
    return (self.generate(input_ids, segment_ids, positions, deterministic),
            self.discriminate(input_ids, segment_ids, deterministic))

  def generate(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """The generator's MLM logits [B, P, V] (float32) at the given positions [B, P] only."""
    embeddings = (self.generator_embeddings if self.embedding_sharing == 'none'
                  else self.embeddings)
    encoder = self.discriminator if self.embedding_sharing == 'all' else self.generator
    return masked_lm_logits(embeddings, encoder, self.generator_head, input_ids, segment_ids,
                            positions, deterministic)

  def discriminate(self, input_ids, segment_ids, deterministic: bool = True):
    """Replaced-token logits [B, L] (float32), one per position."""
    delta = self.embedding_delta if self.embedding_sharing == 'gdes' else None
    return replaced_token_logits(self.embeddings, self.discriminator, self.discriminator_head,
                                 input_ids, segment_ids, deterministic, delta)


class Electric(nn.Module):
  """Electric (Clark et al., 2020, "Pre-Training Transformers as Energy-Based Cloze Models"),
  as the original repository builds it: a two-tower cloze generator and the discriminator over
  one embedding block.

  The generator reads the uncorrupted text with two generator-sized encoders, one attending
  left-to-right and one right-to-left; token t is represented by the forward tower at t-1 and
  the backward tower at t+1, so nothing at t itself is seen, and a head like the MLM head (on
  their concatenation) gives q(token | every other token) at every position. The discriminator
  is ELECTRA's. Its head's logit, plus log q of the token it reads and log(mask_prob /
  (1 - mask_prob)), is the noise-contrastive classifier (objective/electric.py).
  """
  config: ml_collections.ConfigDict  # the `model` section of the run config
  dtype: Any = jnp.float32
  remat: bool = False
  attention: str = 'auto'  # SelfAttention.implementation; every choice computes the same

  def setup(self):
    c = self.config
    self.embeddings = embeddings_block(c, self.dtype)
    self.generator_forward = generator_encoder(c, self.dtype, self.remat, self.attention)
    self.generator_backward = generator_encoder(c, self.dtype, self.remat, self.attention)
    self.cloze_head = MLMHead(c.embedding_size, c.vocab_size, self.dtype)
    self.discriminator = discriminator_encoder(c, self.dtype, self.remat, self.attention)
    self.discriminator_head = DiscriminatorHead(self.dtype)

  def __call__(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """Runs both networks once; used only to create every parameter at init."""
    del positions
    return (self.cloze(input_ids, segment_ids, deterministic),
            self.discriminate(input_ids, segment_ids, deterministic))

  def cloze(self, input_ids, segment_ids, deterministic: bool = True):
    """Logits [B, L, V] (float32) of the token at each position given all the others."""
    order = jnp.arange(input_ids.shape[1])
    keys = (input_ids != 0)[:, None, :]
    forward_mask = (order[None, :] <= order[:, None])[None] & keys   # query t sees keys <= t
    backward_mask = (order[None, :] >= order[:, None])[None] & keys  # and keys >= t
    # Each tower embeds the text itself, as the original's two BertModels do (its own dropout).
    forward = self.generator_forward(self.embeddings(input_ids, segment_ids, deterministic),
                                     forward_mask, deterministic)
    backward = self.generator_backward(self.embeddings(input_ids, segment_ids, deterministic),
                                       backward_mask, deterministic)
    # Position t: the forward tower at t-1 and the backward one at t+1 (wrapping around at the
    # ends, as the original's roll does; the ends are [CLS] and [SEP] or padding, never scored).
    hidden = jnp.concatenate([jnp.roll(forward, 1, axis=1), jnp.roll(backward, -1, axis=1)], -1)
    projected, output_bias = self.cloze_head(hidden)
    return self.embeddings.attend(projected) + output_bias

  def discriminate(self, input_ids, segment_ids, deterministic: bool = True):
    """The discriminator head's logits [B, L] (float32), before the noise term."""
    return replaced_token_logits(self.embeddings, self.discriminator, self.discriminator_head,
                                 input_ids, segment_ids, deterministic)


class Discriminator(nn.Module):
  """ELECTRA's discriminator alone, for a run whose replacements need no generator network
  (config.generator_kind='unigram'). Its parameters are named as `Electra`'s discriminator's."""
  config: ml_collections.ConfigDict  # the `model` section of the run config
  dtype: Any = jnp.float32
  remat: bool = False
  attention: str = 'auto'  # SelfAttention.implementation; every choice computes the same

  def setup(self):
    c = self.config
    self.embeddings = embeddings_block(c, self.dtype)
    self.discriminator = discriminator_encoder(c, self.dtype, self.remat, self.attention)
    self.discriminator_head = DiscriminatorHead(self.dtype)

  def __call__(self, input_ids, segment_ids, deterministic: bool = True, positions=None):
    """Replaced-token logits [B, L] (float32), one per position; `positions` is unused (the
    other networks' init signature)."""
    del positions
    return replaced_token_logits(self.embeddings, self.discriminator, self.discriminator_head,
                                 input_ids, segment_ids, deterministic)


class MaskedLM(nn.Module):
  """BERT's masked LM: the discriminator-sized encoder and an MLM head on the tied embeddings."""
  config: ml_collections.ConfigDict  # the `model` section of the run config
  dtype: Any = jnp.float32
  remat: bool = False
  attention: str = 'auto'  # SelfAttention.implementation; every choice computes the same

  def setup(self):
    c = self.config
    self.embeddings = embeddings_block(c, self.dtype)
    self.discriminator = discriminator_encoder(c, self.dtype, self.remat, self.attention)
    self.mlm_head = MLMHead(c.embedding_size, c.vocab_size, self.dtype)

  def __call__(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """MLM logits [B, P, V] (float32) at the given positions [B, P] only."""
    return masked_lm_logits(self.embeddings, self.discriminator, self.mlm_head, input_ids,
                            segment_ids, positions, deterministic)


class ReplaceMLM(nn.Module):
  """The paper's Replace-MLM and All-Tokens-MLM ablations (section 3.2): ELECTRA's generator,
  and a discriminator-sized masked LM that reads the generator's samples instead of [MASK].

  Parameters as `Electra` names them (embeddings, generator, generator_head, discriminator), so
  fine-tuning and export read them the same way, with `mlm_head` (as `MaskedLM`'s, output tied
  to the shared word embeddings) in place of the replaced-token head. With `copy_mechanism`
  (All-Tokens MLM) a `copy_head`, one dense layer to a logit, gives each token the probability
  D that the output is its input token: the paper's "copy probability ... using a sigmoid layer".
  """
  config: ml_collections.ConfigDict  # the `model` section of the run config
  dtype: Any = jnp.float32
  remat: bool = False
  attention: str = 'auto'  # SelfAttention.implementation; every choice computes the same
  copy_mechanism: bool = False

  def setup(self):
    c = self.config
    self.embeddings = embeddings_block(c, self.dtype)
    self.generator = generator_encoder(c, self.dtype, self.remat, self.attention)
    self.generator_head = MLMHead(c.embedding_size, c.vocab_size, self.dtype)
    self.discriminator = discriminator_encoder(c, self.dtype, self.remat, self.attention)
    self.mlm_head = MLMHead(c.embedding_size, c.vocab_size, self.dtype)
    if self.copy_mechanism:
      self.copy_head = nn.Dense(1, kernel_init=_glorot, dtype=jnp.float32, name='copy_head')

  def __call__(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """Runs both networks once; used only to create every parameter at init."""
    return (self.generate(input_ids, segment_ids, positions, deterministic),
            self.predict(input_ids, segment_ids, positions, deterministic))

  def generate(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """The generator's MLM logits [B, P, V] (float32) at the given positions [B, P] only."""
    return masked_lm_logits(self.embeddings, self.generator, self.generator_head, input_ids,
                            segment_ids, positions, deterministic)

  def predict(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """The discriminator-sized MLM at positions [B, P]: logits [B, P, V] (float32) and, with
    the copy mechanism, copy logits [B, P] (D = sigmoid of them), else None."""
    hidden = self.discriminator(self.embeddings(input_ids, segment_ids, deterministic),
                                input_ids != 0, deterministic)
    hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    copy_logits = self.copy_head(hidden)[..., 0] if self.copy_mechanism else None
    projected, output_bias = self.mlm_head(hidden)
    return self.embeddings.attend(projected) + output_bias, copy_logits


def init_params(model: Electra | Electric | MaskedLM | ReplaceMLM | Discriminator, rng,
                max_seq_length: int):
  """Initial float32 parameters for every submodule of `model`."""
  ids = jnp.zeros((1, max_seq_length), jnp.int32)
  positions = jnp.zeros((1, 1), jnp.int32)
  return model.init({'params': rng}, ids, ids, positions=positions)['params']


def discriminator_view(params):
  """`params` with the word table the discriminator reads: under GDES, table + embedding_delta
  (without the delta entry); otherwise `params` itself. What export and fine-tuning take."""
  if 'embedding_delta' not in params:
    return params
  params = dict(params)
  delta = params.pop('embedding_delta')
  embeddings = dict(params['embeddings'])
  words = dict(embeddings['word_embeddings'])
  words['embedding'] = words['embedding'] + delta
  embeddings['word_embeddings'] = words
  params['embeddings'] = embeddings
  return params


def generator_view(params):
  """`params` with the generator's weights where the 'shared' layout has them: under
  embedding_sharing 'none' its own embedding block as `embeddings`, under 'all' the
  discriminator's encoder as `generator`; otherwise `params` itself. What export takes."""
  tied_encoder = 'generator_head' in params and 'generator' not in params
  if 'generator_embeddings' not in params and not tied_encoder:
    return params
  params = dict(params)
  if 'generator_embeddings' in params:
    params['embeddings'] = params.pop('generator_embeddings')
  if tied_encoder:
    params['generator'] = params['discriminator']
  return params


def count_params(params) -> int:
  return sum(x.size for x in jax.tree.leaves(params))
