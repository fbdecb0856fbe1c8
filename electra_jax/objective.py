"""The ELECTRA objective: mask -> generator -> sample -> relabel -> weighted loss.

Each function maps to one step of the paper's recipe (Clark et al., 2020, section 2) as the
original implementation runs it; everything here is pure and runs inside the compiled step, so
every training step draws fresh masks.

Special token ids come from the vocabulary (`SpecialIds`); [PAD] must be 0, which the
model's attention mask also relies on.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax



class SpecialIds(NamedTuple):
  """Ids of the special tokens; the defaults are those of vocabularies trained by electra_jax."""
  pad: int = 0
  cls: int = 2
  sep: int = 3
  mask: int = 4

class Masked(NamedTuple):
  input_ids: jax.Array  # [B, L] the sequence the generator sees
  positions: jax.Array  # [B, N] distinct positions; only the first slots (weight 1) are selected
  weights: jax.Array    # [B, N] 1.0 for a real selected position, 0.0 for an unused slot
  targets: jax.Array    # [B, N] original token at each position


def num_slots(max_seq_length: int, mask_prob: float) -> int:
  """Fixed number of prediction slots per sequence (19 for 128 at 15%), as in the original."""
  return int((mask_prob + 0.005) * max_seq_length)


def mask_inputs(rng, input_ids, mask_prob: float, special: SpecialIds = SpecialIds(),
                mask_token_prob: float = 0.85) -> Masked:
  """Selects positions to predict and writes [MASK] into 85% of them.

  Candidates are non-padding tokens other than [CLS], [SEP] and [MASK]. Each sequence predicts
  max(1, min(N, round(num_tokens * mask_prob))) of them, num_tokens counting [CLS]/[SEP].
  Deliberate difference from the original: positions are drawn WITHOUT replacement (uniform
  random scores, top-N), where the original's sampling with replacement allowed duplicates.
  A selected position keeps its token with probability 1 - mask_token_prob; ELECTRA never
  writes random tokens (unlike BERT's 80/10/10).
  """
  select_rng, keep_rng = jax.random.split(rng)
  batch, length = input_ids.shape
  slots = num_slots(length, mask_prob)
  is_candidate = ((input_ids != special.pad) & (input_ids != special.cls)
                  & (input_ids != special.sep) & (input_ids != special.mask))
  # Uniform scores in (0, 1] for candidates and -1 for the rest: the top-N are a uniformly random
  # subset of candidates, and non-candidates only appear when a sequence has fewer than N.
  scores = jnp.where(is_candidate, 1.0 - jax.random.uniform(select_rng, (batch, length)), -1.0)
  top_scores, positions = jax.lax.top_k(scores, slots)
  num_tokens = jnp.sum(input_ids != special.pad, axis=-1)
  num_to_predict = jnp.clip(jnp.round(num_tokens * mask_prob), 1, slots).astype(jnp.int32)
  weights = (jnp.arange(slots)[None, :] < num_to_predict[:, None]) & (top_scores > 0)
  targets = jnp.take_along_axis(input_ids, positions, axis=1)

  use_mask_token = jax.random.bernoulli(keep_rng, mask_token_prob, positions.shape) & weights
  written = jnp.where(use_mask_token, special.mask, targets)
  return Masked(scatter(input_ids, positions, written, weights), positions,
                weights.astype(jnp.float32), targets)


def scatter(input_ids, positions, values, weights):
  """input_ids with `values` written at `positions` wherever `weights` is set.

  Unused slots point at positions that must stay as they are, so they are routed out of range
  and dropped instead of written.
  """
  rows = jnp.arange(input_ids.shape[0])[:, None]
  positions = jnp.where(weights, positions, input_ids.shape[1])
  return input_ids.at[rows, positions].set(values, mode='drop')


def sample_replacements(keys, logits, temperature: float):
  """Tokens drawn from softmax(logits / temperature), one key per sequence; no gradient flows.

  Per-sequence keys make a sequence's samples independent of which batch or micro-batch it is
  in, so gradient accumulation reproduces the full batch exactly.
  """
  logits = jax.lax.stop_gradient(logits) / temperature
  draw = lambda key, seq_logits: jax.random.categorical(key, seq_logits, axis=-1)
  return jax.vmap(draw)(keys, logits).astype(jnp.int32)


def replace_and_label(input_ids, masked: Masked, sampled):
  """Originals with the samples written in, and labels 1.0 only where the token changed.

  A sample that happens to equal the original token is labelled original (0), as in the paper.
  """
  fake_ids = scatter(input_ids, masked.positions, sampled, masked.weights > 0)
  return fake_ids, (fake_ids != input_ids).astype(jnp.float32)


class Prepared(NamedTuple):
  """What the objective draws for a whole batch before any network runs."""
  masked: Masked
  sample_keys: jax.Array   # [B] one key per sequence
  mlm_count: jax.Array     # selected positions in the whole batch (the MLM mean's denominator)
  token_count: jax.Array   # non-padding tokens in the whole batch (the RTD mean's denominator)


def prepare(rng, input_ids, config: ml_collections.ConfigDict,
            special: SpecialIds = SpecialIds()) -> Prepared:
  """Steps 1-3 of the recipe (dynamic masking) and the sampling keys, for the whole batch."""
  mask_rng, sample_rng = jax.random.split(rng)
  masked = mask_inputs(mask_rng, input_ids, config.mask_prob, special)
  return Prepared(masked, jax.random.split(sample_rng, input_ids.shape[0]),
                  jnp.sum(masked.weights), jnp.sum(input_ids != special.pad).astype(jnp.float32))


def electra_loss(apply_fn, params, batch, rng, config: ml_collections.ConfigDict,
                 train: bool = True, special: SpecialIds = SpecialIds()):
  """gen_weight * MLM + disc_weight * RTD for one batch, and the statistics behind the metrics.

  apply_fn is `Electra.apply`; config holds mask_prob, temperature, gen_weight, disc_weight.
  `train` turns dropout on. Returns (loss, stats); stats are sums and counts (see `summarize`),
  so statistics from several steps and devices add up exactly before becoming rates.
  """
  prepare_rng, dropout_rng = jax.random.split(rng)
  prepared = prepare(prepare_rng, batch['input_ids'], config, special)
  return partial_loss(apply_fn, params, batch, prepared, dropout_rng, config, train, special)


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng,
                 config: ml_collections.ConfigDict, train: bool = True,
                 special: SpecialIds = SpecialIds()):
  """The loss of `batch` (the whole batch or a micro-batch of it) as its share of the batch's.

  Means are taken with the whole batch's denominators (`prepared.mlm_count`, `.token_count`),
  so the micro-batches' losses and gradients add up exactly to the whole batch's.
  """
  gen_rng, disc_rng = jax.random.split(dropout_rng)
  input_ids, segment_ids = batch['input_ids'], batch['segment_ids']
  input_mask = (input_ids != special.pad).astype(jnp.float32)
  masked, variables = prepared.masked, {'params': params}

  # Step 4: the generator, with logits at the selected positions only.
  gen_logits = apply_fn(variables, masked.input_ids, segment_ids, masked.positions, not train,
                        method='generate', rngs={'dropout': gen_rng})
  log_probs = jax.nn.log_softmax(gen_logits, axis=-1)
  target_log_probs = jnp.take_along_axis(log_probs, masked.targets[..., None], axis=-1)[..., 0]
  mlm_loss = -jnp.sum(target_log_probs * masked.weights) / jnp.maximum(prepared.mlm_count, 1.0)

  # Step 5: replacements sampled under stop_gradient.
  sampled = sample_replacements(prepared.sample_keys, gen_logits, config.temperature)

  # Step 6: the discriminator's input and labels.
  fake_ids, labels = replace_and_label(input_ids, masked, sampled)
  disc_logits = apply_fn(variables, fake_ids, segment_ids, not train,
                         method='discriminate', rngs={'dropout': disc_rng})
  per_token = optax.sigmoid_binary_cross_entropy(disc_logits, labels)
  disc_loss = jnp.sum(per_token * input_mask) / jnp.maximum(prepared.token_count, 1.0)

  # Step 7: one joint loss, minimised by one optimizer over both networks.
  loss = config.gen_weight * mlm_loss + config.disc_weight * disc_loss
  stats = {
      'loss': loss, 'mlm_loss': mlm_loss, 'disc_loss': disc_loss,
      **_mlm_counts(masked, gen_logits, sampled),
      **_disc_counts(disc_logits, labels, input_mask),
  }
  return loss, stats


def _mlm_counts(masked: Masked, gen_logits, sampled):
  hits = lambda predicted: jnp.sum((predicted == masked.targets) * masked.weights)
  return {
      'mlm_correct': hits(jnp.argmax(gen_logits, axis=-1)),
      'sampled_correct': hits(sampled),
      'mlm_count': jnp.sum(masked.weights),
  }


def _disc_counts(disc_logits, labels, input_mask):
  """Confusion counts at threshold 0.5 and the batch's exact ROC AUC."""
  predicted = (disc_logits > 0).astype(jnp.float32)
  positives = labels * input_mask
  return {
      'token_count': jnp.sum(input_mask),
      'replaced_count': jnp.sum(positives),
      'true_positives': jnp.sum(predicted * positives),
      'predicted_positives': jnp.sum(predicted * input_mask),
      'disc_correct': jnp.sum((predicted == labels) * input_mask),
      'disc_auc': batch_auc(disc_logits, labels, input_mask),
  }


def batch_auc(scores, labels, weights):
  """Exact ROC AUC over the tokens with weight 1: P(score of a replaced > score of an original).

  Computed from ranks (the Mann-Whitney statistic) with one sort. A binned AUC, like the
  original's 200-threshold tf.metrics.auc, reads 0.5 early in training when every probability
  falls in one bin even though the ranking is already informative.
  """
  order = jnp.argsort(scores.ravel())
  positive = (labels * weights).ravel()[order]
  negative = ((1.0 - labels) * weights).ravel()[order]
  negatives_below = jnp.cumsum(negative) - negative
  pairs = jnp.sum(positive) * jnp.sum(negative)
  return jnp.where(pairs > 0, jnp.sum(positive * negatives_below) / jnp.maximum(pairs, 1.0), 0.5)


def summarize(stats, num_steps):
  """Turns statistics summed over `num_steps` steps into the reported metrics (host floats)."""
  safe = lambda n, d: float(n) / max(float(d), 1.0)
  return {
      'loss': float(stats['loss']) / num_steps,
      'mlm_loss': float(stats['mlm_loss']) / num_steps,
      'disc_loss': float(stats['disc_loss']) / num_steps,
      'mlm_accuracy': safe(stats['mlm_correct'], stats['mlm_count']),
      'sampled_accuracy': safe(stats['sampled_correct'], stats['mlm_count']),
      'disc_accuracy': safe(stats['disc_correct'], stats['token_count']),
      'disc_precision': safe(stats['true_positives'], stats['predicted_positives']),
      'disc_recall': safe(stats['true_positives'], stats['replaced_count']),
      'disc_auc': float(stats['disc_auc']) / num_steps,  # mean of the per-batch AUCs
      'replaced_fraction': safe(stats['replaced_count'], stats['token_count']),
  }
