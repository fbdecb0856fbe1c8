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

`Electric` (objective 'electric') is the energy-based cloze model's pair, and `Discriminator`
(generator_kind='unigram') is ELECTRA's discriminator alone, under `Electra`'s parameter names.

The building blocks (embeddings, attention, the encoder, the heads) are model/layers.py's.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from electra_jax.model.layers import DiscriminatorHead, Embeddings, Encoder, MLMHead, glorot_init


def generator_width(config: ml_collections.ConfigDict) -> int:
  """Hidden width of the generator: a fraction of the discriminator's (an int is taken as is)."""
  size = config.generator_hidden_size
  return int(size) if size > 1 else int(round(config.hidden_size * size))


def generator_depth(config: ml_collections.ConfigDict) -> int:
  """Layers of the generator: a fraction of the discriminator's (a value > 1 is taken as the
  count), at least one. Configs saved before the field existed had the discriminator's depth."""
  depth = config.get('generator_layers', 1.0)
  return int(depth) if depth > 1 else max(1, int(round(config.num_layers * depth)))


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
  discriminator's size (validation.validate checks it). The heads stay separate in every setting.
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
      self.copy_head = nn.Dense(1, kernel_init=glorot_init, dtype=jnp.float32, name='copy_head')

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
