"""The pretraining networks as Flax Linen modules, built from model/layers.py's blocks.

`Electra` (config.objective='electra') owns three parameter subtrees (and their heads):

  embeddings     word, position and token-type tables and their LayerNorm, shared by both networks
  generator      its own `embeddings_project` (if E != H_gen), encoder and MLM head
  discriminator  its own `embeddings_project` (if E != H), encoder and replaced-token head

Both networks are methods of one module (`generate`, `discriminate`): one parameter tree and one
optimizer serve both, and the shared embeddings get both losses' gradients. The other networks
reuse these names, so fine-tuning and export read every run the same way.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from electra_jax.common.config import generator_depth, generator_heads_and_ffn, generator_width
from electra_jax.model.layers import (DiscriminatorHead, Embeddings, Encoder, MLMHead, glorot_init,
                                      pairs_of)
from electra_jax.model.modern import ModernEmbeddings, ModernEncoder, ModernHead


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """A run config's `model` section, frozen and typed (defaults and meanings: config.FIELDS)."""
  vocab_size: int
  embedding_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  generator_hidden_size: float
  generator_layers: float
  max_position_embeddings: int
  type_vocab_size: int
  dropout_rate: float
  attention_dropout_rate: float
  architecture: str = 'bert'
  local_window: int = 128
  global_every: int = 3
  rope_theta: float = 160_000.0
  local_rope_theta: float = 10_000.0
  # Not a `model` field: data.document_attention, which training sets (train.make_model).
  document_attention: bool = False

  @classmethod
  def of(cls, model: 'ModelConfig | ml_collections.ConfigDict') -> 'ModelConfig':
    if isinstance(model, cls):
      return model
    # A section written before a field existed (architecture, ...) takes the field's default.
    return cls(**{f.name: model[f.name] for f in dataclasses.fields(cls) if f.name in model})


def _encoder(net: nn.Module, width: int, layers: int, heads: int, ffn: int):
  c = net.config
  if c.architecture == 'modern':
    return ModernEncoder(width, layers, heads, ffn, c.dropout_rate, c.attention_dropout_rate,
                         c.local_window, c.global_every, c.rope_theta, c.local_rope_theta,
                         net.dtype, net.remat, net.attention)
  return Encoder(width, layers, heads, ffn, c.dropout_rate, c.attention_dropout_rate, net.dtype,
                 net.remat, net.attention)


def discriminator_encoder(net: nn.Module) -> Encoder | ModernEncoder:
  c = net.config
  return _encoder(net, c.hidden_size, c.num_layers, c.num_heads, c.intermediate_size)


def generator_encoder(net: nn.Module) -> Encoder | ModernEncoder:
  c = net.config
  return _encoder(net, generator_width(c), generator_depth(c), *generator_heads_and_ffn(c))


def embeddings_block(net: nn.Module) -> Embeddings | ModernEmbeddings:
  c = net.config
  if c.architecture == 'modern':
    return ModernEmbeddings(c.vocab_size, c.embedding_size, c.dropout_rate, net.dtype)
  return Embeddings(c.vocab_size, c.embedding_size, c.max_position_embeddings, c.type_vocab_size,
                    c.dropout_rate, net.dtype)


def mlm_head(net: nn.Module) -> MLMHead | ModernHead:
  c = net.config
  head = ModernHead if c.architecture == 'modern' else MLMHead
  return head(c.embedding_size, c.vocab_size, net.dtype)


def discriminator_head(net: nn.Module) -> DiscriminatorHead | ModernHead:
  c = net.config
  return ModernHead(c.hidden_size, 0, net.dtype) if c.architecture == 'modern' \
      else DiscriminatorHead(net.dtype)


def documents(config: 'ModelConfig | ml_collections.ConfigDict') -> bool:
  """Whether tokens attend within their documents only: set through ModelConfig alone (a run's
  `model` section never holds it)."""
  return isinstance(config, ModelConfig) and config.document_attention


def types_and_mask(config: ModelConfig, input_ids, segment_ids):
  """(token types, attention mask). With document_attention the packed examples' segment ids
  are document ids (data/packing.py, 'documents'): one token type, and each token attends its
  own document's tokens only (layers.pairs_of)."""
  if documents(config):
    return jnp.zeros_like(segment_ids), segment_ids.astype(jnp.int32) * (input_ids != 0)
  return segment_ids, input_ids != 0


def masked_lm_logits(embeddings: Embeddings, encoder: Encoder, head: MLMHead, input_ids,
                     segment_ids, positions, deterministic: bool, config: ModelConfig):
  """MLM logits [B, P, V] (float32) at positions [B, P] only: gathered before the head, as the
  vocabulary projection is a small generator's costliest part."""
  types, mask = types_and_mask(config, input_ids, segment_ids)
  hidden = encoder(embeddings(input_ids, types, deterministic), mask, deterministic)
  hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1)
  hidden, output_bias = head(hidden)
  return embeddings.attend(hidden) + output_bias


def replaced_token_logits(embeddings: Embeddings, encoder: Encoder, head: DiscriminatorHead,
                          input_ids, segment_ids, deterministic: bool, config: ModelConfig,
                          word_delta=None):
  """The discriminator's replaced-token logits [B, L] (float32), one per position."""
  types, mask = types_and_mask(config, input_ids, segment_ids)
  hidden = encoder(embeddings(input_ids, types, deterministic, word_delta), mask, deterministic)
  return head(hidden)


class _Network(nn.Module):
  """The fields every pretraining network below is built from."""
  config: ModelConfig  # the `model` section of the run config
  dtype: Any = jnp.float32
  remat: bool = False
  attention: str = 'auto'  # SelfAttention.implementation; every choice computes the same


class Electra(_Network):
  """Generator and discriminator over one shared embedding block, or as embedding_sharing says
  (docs/training.md): 'none' gives the generator its own `generator_embeddings`, 'all' runs it on
  the discriminator's encoder (no `generator` entry), and 'gdes' (DeBERTa-v3's) has the
  discriminator read stop_gradient(table) + `embedding_delta` (zero at init), so neither loss
  moves the other's word vectors. The heads stay separate in every setting."""
  embedding_sharing: str = 'shared'  # 'shared', 'gdes', 'none' or 'all'

  def setup(self):
    c = self.config
    self.embeddings = embeddings_block(self)
    if self.embedding_sharing == 'none':
      self.generator_embeddings = embeddings_block(self)
    if self.embedding_sharing != 'all':
      self.generator = generator_encoder(self)
    self.generator_head = mlm_head(self)
    self.discriminator = discriminator_encoder(self)
    self.discriminator_head = discriminator_head(self)
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
                            positions, deterministic, self.config)

  def discriminate(self, input_ids, segment_ids, deterministic: bool = True):
    """Replaced-token logits [B, L] (float32), one per position."""
    delta = self.embedding_delta if self.embedding_sharing == 'gdes' else None
    return replaced_token_logits(self.embeddings, self.discriminator, self.discriminator_head,
                                 input_ids, segment_ids, deterministic, self.config, delta)


class Electric(_Network):
  """Electric (Clark et al., 2020) as the original repository builds it: ELECTRA's discriminator
  and a cloze generator of two generator-sized towers over the uncorrupted text, left-to-right
  and right-to-left, whose head gives q(token | every other token) at every position."""

  def setup(self):
    self.embeddings = embeddings_block(self)
    self.generator_forward = generator_encoder(self)
    self.generator_backward = generator_encoder(self)
    self.cloze_head = mlm_head(self)
    self.discriminator = discriminator_encoder(self)
    self.discriminator_head = discriminator_head(self)

  def __call__(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """Runs both networks once; used only to create every parameter at init."""
    del positions
    return (self.cloze(input_ids, segment_ids, deterministic),
            self.discriminate(input_ids, segment_ids, deterministic))

  def cloze(self, input_ids, segment_ids, deterministic: bool = True):
    """Logits [B, L, V] (float32) of the token at each position given all the others."""
    order = jnp.arange(input_ids.shape[1])
    types, mask = types_and_mask(self.config, input_ids, segment_ids)
    keys = pairs_of(mask)[:, 0] if documents(self.config) else mask[:, None, :]
    forward_mask = (order[None, :] <= order[:, None])[None] & keys   # query t sees keys <= t
    backward_mask = (order[None, :] >= order[:, None])[None] & keys  # and keys >= t
    # Each tower embeds the text itself, as the original's two BertModels do (its own dropout).
    forward = self.generator_forward(self.embeddings(input_ids, types, deterministic),
                                     forward_mask, deterministic)
    backward = self.generator_backward(self.embeddings(input_ids, types, deterministic),
                                       backward_mask, deterministic)
    # Position t: the forward tower at t-1 and the backward one at t+1 (wrapping around at the
    # ends, as the original's roll does; the ends are [CLS] and [SEP] or padding, never scored).
    hidden = jnp.concatenate([jnp.roll(forward, 1, axis=1), jnp.roll(backward, -1, axis=1)], -1)
    projected, output_bias = self.cloze_head(hidden)
    return self.embeddings.attend(projected) + output_bias

  def discriminate(self, input_ids, segment_ids, deterministic: bool = True):
    """The discriminator head's logits [B, L] (float32), before the noise term."""
    return replaced_token_logits(self.embeddings, self.discriminator, self.discriminator_head,
                                 input_ids, segment_ids, deterministic, self.config)


class Discriminator(_Network):
  """ELECTRA's discriminator alone (config.generator_kind='unigram'), under `Electra`'s names."""

  def setup(self):
    self.embeddings = embeddings_block(self)
    self.discriminator = discriminator_encoder(self)
    self.discriminator_head = discriminator_head(self)

  def __call__(self, input_ids, segment_ids, deterministic: bool = True, positions=None):
    """Replaced-token logits [B, L] (float32); `positions` only matches the others' init call."""
    del positions
    return replaced_token_logits(self.embeddings, self.discriminator, self.discriminator_head,
                                 input_ids, segment_ids, deterministic, self.config)


class MaskedLM(_Network):
  """BERT's masked LM: the discriminator-sized encoder and an MLM head on the tied embeddings."""

  def setup(self):
    self.embeddings = embeddings_block(self)
    self.discriminator = discriminator_encoder(self)
    self.mlm_head = mlm_head(self)

  def __call__(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """MLM logits [B, P, V] (float32) at the given positions [B, P] only."""
    return masked_lm_logits(self.embeddings, self.discriminator, self.mlm_head, input_ids,
                            segment_ids, positions, deterministic, self.config)


class ReplaceMLM(_Network):
  """The paper's Replace-MLM and All-Tokens-MLM ablations: ELECTRA's generator and a
  discriminator-sized masked LM (`mlm_head` as `MaskedLM`'s) reading its samples. With
  `copy_mechanism` (All-Tokens MLM) a `copy_head` gives each token its copy probability's logit."""
  copy_mechanism: bool = False

  def setup(self):
    self.embeddings = embeddings_block(self)
    self.generator = generator_encoder(self)
    self.generator_head = mlm_head(self)
    self.discriminator = discriminator_encoder(self)
    self.mlm_head = mlm_head(self)
    if self.copy_mechanism:
      self.copy_head = nn.Dense(1, kernel_init=glorot_init, dtype=jnp.float32, name='copy_head')

  def __call__(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """Runs both networks once; used only to create every parameter at init."""
    return (self.generate(input_ids, segment_ids, positions, deterministic),
            self.predict(input_ids, segment_ids, positions, deterministic))

  def generate(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """The generator's MLM logits [B, P, V] (float32) at the given positions [B, P] only."""
    return masked_lm_logits(self.embeddings, self.generator, self.generator_head, input_ids,
                            segment_ids, positions, deterministic, self.config)

  def predict(self, input_ids, segment_ids, positions, deterministic: bool = True):
    """The discriminator-sized MLM at positions [B, P]: logits [B, P, V] (float32) and, with
    the copy mechanism, copy logits [B, P] (D = sigmoid of them), else None."""
    types, mask = types_and_mask(self.config, input_ids, segment_ids)
    hidden = self.discriminator(self.embeddings(input_ids, types, deterministic), mask,
                                deterministic)
    hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    copy_logits = self.copy_head(hidden)[..., 0] if self.copy_mechanism else None
    projected, output_bias = self.mlm_head(hidden)
    return self.embeddings.attend(projected) + output_bias, copy_logits


def init_params(model: _Network, rng, max_seq_length: int):
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
  words = params['embeddings']['word_embeddings']
  params['embeddings'] = {**params['embeddings'],
                          'word_embeddings': {**words, 'embedding': words['embedding'] + delta}}
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
