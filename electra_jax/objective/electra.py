"""The ELECTRA objective: mask -> generator -> sample -> relabel -> weighted loss.

Each step maps to one of the paper's recipe (Clark et al., 2020, section 2) as the original
implementation runs it; the masking and sampling pieces are `masking`'s, the generator's MLM
loss is `mlm`'s.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from electra_jax.objective import masking, mlm
from electra_jax.objective.masking import Prepared, SpecialIds


def prepare(rng, input_ids, config: ml_collections.ConfigDict,
            special: SpecialIds = SpecialIds()) -> Prepared:
  """Steps 1-3 of the recipe (dynamic masking) and the sampling keys, for the whole batch."""
  mask_rng, sample_rng = jax.random.split(rng)
  masked = masking.mask_inputs(mask_rng, input_ids, config.mask_prob, special,
                               selection=config.get('masking', 'token'))
  return Prepared(masked, jax.random.split(sample_rng, input_ids.shape[0]),
                  jnp.sum(masked.weights), masking.count_tokens(input_ids, special))


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng,
                 config: ml_collections.ConfigDict, train: bool = True,
                 special: SpecialIds = SpecialIds()):
  """gen_weight * MLM + disc_weight * RTD of `batch` as its share of the whole batch's.

  apply_fn is `Electra.apply`; config holds temperature, gen_weight, disc_weight. Means are taken
  with the whole batch's denominators (`prepared.mlm_count`, `.token_count`), so the
  micro-batches' losses and gradients add up exactly to the whole batch's. `train` turns dropout
  on. Returns (loss, stats); stats are sums and counts (see `objective.summarize`).
  """
  input_ids = batch['input_ids']
  input_mask = (input_ids != special.pad).astype(jnp.float32)
  masked = prepared.masked
  gen_logits, mlm_loss, sampled, disc_logits, labels = generate_and_discriminate(
      apply_fn, params, batch, prepared, dropout_rng, config, train)
  per_token = optax.sigmoid_binary_cross_entropy(disc_logits, labels)
  disc_loss = jnp.sum(per_token * input_mask) / jnp.maximum(prepared.token_count, 1.0)

  # Step 7: one joint loss, minimised by one optimizer over both networks.
  loss = config.gen_weight * mlm_loss + config.disc_weight * disc_loss
  return loss, step_stats(loss, mlm_loss, disc_loss, gen_logits, masked, sampled, disc_logits,
                          labels, input_mask)


def step_stats(loss, mlm_loss, disc_loss, gen_logits, masked, sampled, disc_logits, labels,
               input_mask) -> dict:
  """The statistics of a step with a generator sampling at `masked` and a token classifier."""
  return {
      'loss': loss, 'mlm_loss': mlm_loss, 'disc_loss': disc_loss,
      **mlm.accuracy_counts(gen_logits, masked),
      'sampled_correct': jnp.sum((sampled == masked.targets) * masked.weights),
      **disc_counts(disc_logits, labels, input_mask),
  }


def generate_and_discriminate(apply_fn, params, batch, prepared: Prepared, dropout_rng,
                              config: ml_collections.ConfigDict, train: bool):
  """Steps 4-6 of the recipe: (generator logits [B, P, V], its MLM loss, the sampled tokens
  [B, P], the discriminator's logits [B, L] on the corrupted input, its labels [B, L])."""
  gen_rng, disc_rng = jax.random.split(dropout_rng)
  input_ids, segment_ids = batch['input_ids'], batch['segment_ids']
  masked, variables = prepared.masked, {'params': params}

  # Step 4: the generator, with logits at the selected positions only. A frozen one
  # (config.generator_init) is a fixed language model, run without dropout.
  frozen = bool(config.get('generator_init', ''))
  gen_logits = apply_fn(variables, masked.input_ids, segment_ids, masked.positions,
                        not train or frozen,
                        method='generate', rngs={'dropout': gen_rng})
  mlm_loss = mlm.cross_entropy(gen_logits, masked, prepared.mlm_count)

  # Step 5: replacements sampled under stop_gradient.
  sampled = masking.sample_replacements(
      prepared.sample_keys, gen_logits, masking.sampling_temperature(prepared, config),
      config.sampler)

  # Step 6: the discriminator's input and labels.
  fake_ids, labels = masking.replace_and_label(input_ids, masked, sampled)
  disc_logits = apply_fn(variables, fake_ids, segment_ids, not train,
                         method='discriminate', rngs={'dropout': disc_rng})
  return gen_logits, mlm_loss, sampled, disc_logits, labels


def disc_counts(disc_logits, labels, input_mask):
  """Confusion counts at threshold 0.5 and the batch's exact ROC AUC."""
  predicted = (disc_logits > 0).astype(jnp.float32)
  positives = labels * input_mask
  return {
      'token_count': jnp.sum(input_mask),
      'replaced_count': jnp.sum(positives),
      'true_positives': jnp.sum(predicted * positives),
      'predicted_positives': jnp.sum(predicted * input_mask),
      'disc_correct': jnp.sum((predicted == labels) * input_mask),
      # An AUC does not add up over batches: the report averages the batches' AUCs, so each
      # call counts itself once (micro-batches and steps alike).
      'disc_auc': batch_auc(disc_logits, labels, input_mask),
      'auc_batches': jnp.ones([], jnp.float32),
  }


def batch_auc(scores, labels, weights):
  """Exact ROC AUC over the tokens with weight 1: P(score of a replaced > score of an original),
  a tie counting one half.

  Computed from ranks (the Mann-Whitney statistic) with one sort. A binned AUC, like the
  original's 200-threshold tf.metrics.auc, reads 0.5 early in training when every probability
  falls in one bin even though the ranking is already informative. Ties take their run's
  middle rank: ranked by position in the batch instead, a discriminator that gives every token
  one score would read anything from 0 to 1, as the replaced tokens happen to sit.
  """
  flat = scores.ravel()
  order = jnp.argsort(flat)
  ranked = flat[order]
  positive = (labels * weights).ravel()[order]
  negative = ((1.0 - labels) * weights).ravel()[order]
  # Runs of equal scores, numbered in sorted order: a replaced token counts the originals of
  # lower runs whole and those of its own run by half.
  run = jnp.cumsum(jnp.concatenate([jnp.zeros([1], jnp.int32),
                                    (ranked[1:] != ranked[:-1]).astype(jnp.int32)]))
  negatives_in_run = jax.ops.segment_sum(negative, run, num_segments=flat.shape[0],
                                         indices_are_sorted=True)
  negatives_below = (jnp.cumsum(negatives_in_run) - 0.5 * negatives_in_run)[run]
  pairs = jnp.sum(positive) * jnp.sum(negative)
  return jnp.where(pairs > 0, jnp.sum(positive * negatives_below) / jnp.maximum(pairs, 1.0), 0.5)
