"""How every objective corrupts its input: select positions, write [MASK] or other tokens there.

All of it runs inside the compiled step, so every step draws fresh masks. [PAD] must be 0, as the
model's attention mask assumes. config.masking selects single tokens (the paper's), whole words
or SpanBERT's spans of words; the budget is mask_prob of the tokens either way.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class SpecialIds(NamedTuple):
  """Ids of the special tokens; the defaults are those of vocabularies trained by electra_jax."""
  pad: int = 0
  cls: int = 2
  sep: int = 3
  mask: int = 4
  unk: int = 1
  # One byte per vocabulary id, 1 where the piece starts a word (data/vocab.word_starts); only
  # whole-word and span masking read it. Bytes, so the tuple stays hashable.
  word_starts: bytes = b''

  def ids(self) -> tuple[int, ...]:
    return (self.pad, self.cls, self.sep, self.mask, self.unk)


class Masked(NamedTuple):
  input_ids: jax.Array  # [B, L] the corrupted sequence the predicting network sees
  positions: jax.Array  # [B, N] distinct positions; only the first slots (weight 1) are selected
  weights: jax.Array    # [B, N] 1.0 for a real selected position, 0.0 for an unused slot
  targets: jax.Array    # [B, N] original token at each position


class Prepared(NamedTuple):
  """What an objective draws for a whole batch before any network runs. Arrays are split with
  the batch under gradient accumulation; the counts are whole-batch totals (the denominators)."""
  masked: Masked
  sample_keys: jax.Array | None  # [B] one key per sequence; None for objectives that don't sample
  mlm_count: jax.Array     # selected positions in the whole batch (the MLM mean's denominator)
  token_count: jax.Array   # non-padding tokens in the whole batch (the RTD mean's denominator)
  # The step's scheduled sampling temperature (`scheduled_temperature`); None: config.temperature.
  temperature: jax.Array | None = None


def candidates(input_ids, special: SpecialIds = SpecialIds()):
  """The tokens that may be predicted: not padding, [CLS], [SEP] or [MASK]."""
  return ((input_ids != special.pad) & (input_ids != special.cls) & (input_ids != special.sep)
          & (input_ids != special.mask))


def num_slots(max_seq_length: int, mask_prob: float) -> int:
  """Fixed number of prediction slots per sequence (19 for 128 at 15%), as in the original."""
  return int((mask_prob + 0.005) * max_seq_length)


SELECTIONS = ('token', 'whole_word', 'span')
# SpanBERT's span lengths, in words: geometric with p = 0.2, clipped at 10 (mean 4.46).
SPAN_P = 0.2
SPAN_MAX_WORDS = 10


def select_positions(rng, input_ids, mask_prob: float, special: SpecialIds = SpecialIds(),
                     selection: str = 'token') -> Masked:
  """The positions to predict among the `candidates`, the input unchanged: per sequence
  max(1, min(N, round(num_tokens * mask_prob))), num_tokens counting [CLS]/[SEP] ('whole_word'
  and 'span' may take fewer), drawn without replacement, unlike the original's."""
  batch, length = input_ids.shape
  slots = num_slots(length, mask_prob)
  is_candidate = candidates(input_ids, special)
  num_tokens = jnp.sum(input_ids != special.pad, axis=-1)
  num_to_predict = jnp.clip(jnp.round(num_tokens * mask_prob), 1, slots).astype(jnp.int32)
  if selection != 'token':
    word_rng, rng = jax.random.split(rng)
    is_candidate = select_words(word_rng, input_ids, num_to_predict, slots, special, selection)
  # Uniform scores in (0, 1] for candidates and -1 for the rest: the top-N are a uniformly random
  # subset of candidates, and non-candidates only appear when a sequence has fewer than N.
  scores = jnp.where(is_candidate, 1.0 - jax.random.uniform(rng, (batch, length)), -1.0)
  top_scores, positions = jax.lax.top_k(scores, slots)
  weights = (jnp.arange(slots)[None, :] < num_to_predict[:, None]) & (top_scores > 0)
  targets = jnp.take_along_axis(input_ids, positions, axis=1)
  return Masked(input_ids, positions, weights.astype(jnp.float32), targets)


def word_numbers(input_ids, special: SpecialIds):
  """[B, L] the word (from 0 in each sequence) of each candidate token, -1 elsewhere. A word
  starts at a piece the vocabulary marks ('▁', or no '##') and after any non-candidate."""
  if not special.word_starts:
    raise ValueError('whole-word and span masking need the vocabulary\'s word starts: build '
                     'SpecialIds with word_starts=data.vocab.word_starts(vocab)')
  table = jnp.asarray(np.frombuffer(special.word_starts, np.uint8).astype(bool))
  is_candidate = candidates(input_ids, special)
  after_other = jnp.pad(~is_candidate[:, :-1], ((0, 0), (1, 0)), constant_values=True)
  begins = is_candidate & (table[input_ids] | after_other)
  return jnp.where(is_candidate, jnp.cumsum(begins, axis=1) - 1, -1)


def select_words(rng, input_ids, budget, slots: int, special: SpecialIds, selection: str):
  """[B, L] True at the tokens of the selected words, at most `budget` [B] (<= `slots`) each:
  'whole_word' as BERT's --do_whole_word_mask, 'span' as SpanBERT's."""
  words = word_numbers(input_ids, special)
  batch, length = words.shape
  rows = jnp.arange(batch)[:, None]
  # Tokens per word number ([B, L]: at most L words; 0 where a sequence has fewer).
  sizes = jnp.zeros((batch, length + 1), jnp.int32).at[rows, jnp.where(
      words >= 0, words, length)].add(1)[:, :length]
  if selection == 'whole_word':
    chosen = _shuffled_words(rng, sizes, budget)
  elif selection == 'span':
    chosen = _spans(rng, sizes, budget, slots)
  else:
    raise ValueError(f'masking {selection!r}: use one of {", ".join(SELECTIONS)}')
  return (words >= 0) & jnp.take_along_axis(chosen, jnp.maximum(words, 0), axis=1)


def _shuffled_words(rng, sizes, budget):
  """[B, W] the words taken, in a random order, while their tokens fit; one that does not fit
  is passed over for the next."""
  batch, num_words = sizes.shape
  scores = jnp.where(sizes > 0, jax.random.uniform(rng, sizes.shape), -1.0)
  order = jnp.argsort(-scores, axis=1)
  ordered = jnp.take_along_axis(sizes, order, axis=1)

  def take(total, size):
    fits = (size > 0) & (total + size <= budget)
    return total + jnp.where(fits, size, 0), fits

  _, taken = jax.lax.scan(take, jnp.zeros([batch], jnp.int32), ordered.T)
  return jnp.zeros((batch, num_words), bool).at[jnp.arange(batch)[:, None], order].set(taken.T)


def span_lengths(rng, shape, p: float = SPAN_P, max_words: int = SPAN_MAX_WORDS):
  """Span lengths in words: geometric, P(k) = p (1 - p)^(k - 1), then clipped at max_words."""
  u = 1.0 - jax.random.uniform(rng, shape)  # (0, 1]
  drawn = 1 + jnp.floor(jnp.log(u) / jnp.log1p(-p))
  return jnp.clip(drawn, 1, max_words).astype(jnp.int32)


def _spans(rng, sizes, budget, num_attempts: int):
  """[B, W] the words of spans of `span_lengths` words from uniformly drawn starts, each cut to
  what still fits; a start already selected is passed over. One attempt per slot is enough:
  every accepted span adds a token."""
  batch, num_words = sizes.shape
  length_rng, start_rng = jax.random.split(rng)
  lengths = span_lengths(length_rng, (num_attempts, batch))
  present = jnp.sum(sizes > 0, axis=1)
  starts = jnp.floor(jax.random.uniform(start_rng, (num_attempts, batch)) * present).astype(
      jnp.int32)
  index = jnp.arange(num_words)[None, :]

  def attempt(chosen, drawn):
    span_words, start = drawn
    total = jnp.sum(jnp.where(chosen, sizes, 0), axis=1)
    free = ~jnp.take_along_axis(chosen, start[:, None], axis=1)[:, 0] & (present > 0)
    in_span = (index >= start[:, None]) & (index < (start + span_words)[:, None]) & (sizes > 0)
    added = jnp.cumsum(jnp.where(in_span & ~chosen, sizes, 0), axis=1)
    takes = in_span & free[:, None] & (total[:, None] + added <= budget[:, None])
    return chosen | takes, None

  chosen, _ = jax.lax.scan(attempt, jnp.zeros((batch, num_words), bool), (lengths, starts))
  return chosen


def mask_inputs(rng, input_ids, mask_prob: float, special: SpecialIds = SpecialIds(),
                mask_token_prob: float = 0.85, selection: str = 'token') -> Masked:
  """ELECTRA's masking: [MASK] at 85% of the selected positions, the rest unchanged (never a
  random token, unlike BERT's 80/10/10)."""
  select_rng, keep_rng = jax.random.split(rng)
  selected = select_positions(select_rng, input_ids, mask_prob, special, selection)
  use_mask_token = (jax.random.bernoulli(keep_rng, mask_token_prob, selected.positions.shape)
                    & (selected.weights > 0))
  written = jnp.where(use_mask_token, special.mask, selected.targets)
  return write(selected, written)


def bert_mask_inputs(rng, input_ids, mask_prob: float, vocab_size: int,
                     special: SpecialIds = SpecialIds(), mask_token_prob: float = 0.8,
                     random_token_prob: float = 0.1, selection: str = 'token') -> Masked:
  """BERT's masking: of the selected, 80% [MASK], 10% `random_tokens`, 10% unchanged."""
  select_rng, choice_rng, token_rng = jax.random.split(rng, 3)
  selected = select_positions(select_rng, input_ids, mask_prob, special, selection)
  choice = jax.random.uniform(choice_rng, selected.positions.shape)
  random_ids = random_tokens(token_rng, selected.positions.shape, vocab_size, special)
  written = jnp.where(choice < mask_token_prob, special.mask,
                      jnp.where(choice < mask_token_prob + random_token_prob, random_ids,
                                selected.targets))
  return write(selected, written)


def random_tokens(rng, shape, vocab_size: int, special: SpecialIds = SpecialIds()):
  """Ids uniform over [0, vocab_size) without [PAD], [UNK], [CLS], [SEP] and [MASK] (BERT drew
  from the whole vocabulary; a special token in the text is one never seen there)."""
  excluded = sorted(set(special.ids()))
  ids = jax.random.randint(rng, shape, 0, vocab_size - len(excluded))
  for special_id in excluded:  # ascending, so each shift moves past the excluded ids below it
    ids = ids + (ids >= special_id)
  return ids.astype(jnp.int32)


def write(masked: Masked, values) -> Masked:
  """`masked` with `values` written into its input at the selected positions."""
  return masked._replace(input_ids=scatter(masked.input_ids, masked.positions, values,
                                           masked.weights > 0))


def scatter(input_ids, positions, values, weights):
  """input_ids with `values` written at `positions` wherever `weights` is set."""
  rows = jnp.arange(input_ids.shape[0])[:, None]
  positions = jnp.where(weights, positions, input_ids.shape[1])  # unused slots: out of range
  return input_ids.at[rows, positions].set(values, mode='drop')


def scheduled_temperature(config, step) -> jax.Array | None:
  """Step `step`'s temperature: linear from config.temperature_start at step 0 to
  config.temperature at num_train_steps; None where temperature_start is 0 (no schedule)."""
  if not config.temperature_start:
    return None
  progress = jnp.minimum(jnp.asarray(step, jnp.float32) / max(config.num_train_steps, 1), 1.0)
  return config.temperature_start + (config.temperature - config.temperature_start) * progress


def draw_replacements(prepared: Prepared, logits, config):
  """`sample_replacements` with the batch's keys, at its scheduled or configured temperature."""
  temperature = config.temperature if prepared.temperature is None else prepared.temperature
  return sample_replacements(prepared.sample_keys, logits, temperature, config.sampler)


SAMPLERS = ('categorical', 'inverse_cdf')


def sample_replacements(keys, logits, temperature: float, sampler: str = 'categorical'):
  """Tokens drawn from softmax(logits / temperature) without gradient, one key per sequence (so
  gradient accumulation reproduces the full batch). 'categorical': Gumbel noise on every entry.
  'inverse_cdf': one uniform per slot in the cumulative softmax, the same distribution (to
  float32 rounding, ~1e-7 of the total) in other draws, ~7% of a CPU step less."""
  logits = jax.lax.stop_gradient(logits) / temperature
  if sampler == 'categorical':
    draw = lambda key, seq_logits: jax.random.categorical(key, seq_logits, axis=-1)
  elif sampler == 'inverse_cdf':
    draw = _inverse_cdf_draw
  else:
    raise ValueError(f'sampler {sampler!r}: use one of {", ".join(SAMPLERS)}')
  return jax.vmap(draw)(keys, logits).astype(jnp.int32)


def _inverse_cdf_draw(key, seq_logits):
  """[P] tokens for one sequence's [P, V] logits: token i where cdf[i-1] <= u * total < cdf[i],
  found in blocks of ~sqrt(V) entries, then within the block: XLA:CPU's [P, V] cumsum is slower
  than the exponentials (162 ms for [16, 20, 32768] on a busy core)."""
  vocab = seq_logits.shape[-1]
  block = 1 << max(0, math.ceil(math.log2(math.sqrt(vocab))))
  blocks = -(-vocab // block)
  seq_logits = seq_logits.astype(jnp.float32)
  weights = jnp.exp(seq_logits - jnp.max(seq_logits, axis=-1, keepdims=True))  # -inf -> 0
  weights = jnp.pad(weights, [(0, 0), (0, blocks * block - vocab)])
  weights = weights.reshape(weights.shape[0], blocks, block)
  block_totals = weights.sum(-1)
  block_cdf = jnp.cumsum(block_totals, axis=-1)
  target = jax.random.uniform(key, block_cdf.shape[:-1]) * block_cdf[:, -1]
  # Counting the entries <= target is searchsorted(side='right'): a block or token of weight
  # zero repeats the previous cdf value and is never chosen. The minimum catches u * total
  # rounding up to the total: it takes the last block, and then the last token, of any weight.
  chosen = jnp.minimum(jnp.sum(block_cdf <= target[:, None], axis=-1),
                       last_positive(block_totals))
  before = jnp.where(chosen > 0, jnp.take_along_axis(
      block_cdf, jnp.maximum(chosen - 1, 0)[:, None], axis=-1)[:, 0], 0.0)
  inner = jnp.take_along_axis(weights, chosen[:, None, None], axis=1)[:, 0]  # [P, block]
  inner_cdf = jnp.cumsum(inner, axis=-1)
  inside = jnp.minimum(jnp.sum(inner_cdf <= (target - before)[:, None], axis=-1),
                       last_positive(inner))
  return chosen * block + inside


def last_positive(weights):
  """Per row of [P, N] weights, the index of the last entry above zero."""
  return weights.shape[-1] - 1 - jnp.argmax((weights > 0)[:, ::-1], axis=-1)


def unigram_replacements(rng, input_ids, shape, special: SpecialIds = SpecialIds()):
  """Tokens [shape] drawn from the batch's unigram distribution: each is the token at a
  uniformly drawn candidate position (the data's frequency where every example holds as many
  candidates, as packed ones nearly all do)."""
  flat = input_ids.ravel()
  is_candidate = candidates(flat, special)
  # Candidate positions first, in order: a stable sort on "is not a candidate".
  order = jnp.argsort(~is_candidate, stable=True)
  count = jnp.maximum(jnp.sum(is_candidate), 1)  # a batch of specials only has no selection
  return flat[order[jax.random.randint(rng, shape, 0, count)]].astype(jnp.int32)


def replace_and_label(input_ids, masked: Masked, sampled):
  """Originals with the samples written in, and labels 1.0 only where the token changed (a
  sample equal to the original is labelled original, as in the paper)."""
  fake_ids = scatter(input_ids, masked.positions, sampled, masked.weights > 0)
  return fake_ids, (fake_ids != input_ids).astype(jnp.float32)


def count_tokens(input_ids, special: SpecialIds = SpecialIds()):
  return jnp.sum(input_ids != special.pad).astype(jnp.float32)
