"""The ELECTRA objective: mask -> generator -> sample -> relabel -> weighted loss (the steps of
Clark et al., 2020, section 2, as the original runs them), and the 'ELECTRA 15%' ablation.
"""

import jax
import jax.numpy as jnp
from ml_collections import ConfigDict
import optax

from electra_jax.objective import masking, mlm
from electra_jax.objective.masking import Prepared, SpecialIds


def prepare(rng, input_ids, config: ConfigDict, special: SpecialIds = SpecialIds()) -> Prepared:
  """Steps 1-3 of the recipe (dynamic masking) and the sampling keys, for the whole batch."""
  mask_rng, sample_rng = jax.random.split(rng)
  masked = masking.mask_inputs(mask_rng, input_ids, config.mask_prob, special,
                               selection=config.masking)
  return Prepared(masked, jax.random.split(sample_rng, input_ids.shape[0]),
                  jnp.sum(masked.weights), masking.count_tokens(input_ids, special))


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng, config: ConfigDict,
                 train: bool = True, special: SpecialIds = SpecialIds(), auc: bool = False):
  """gen_weight * MLM + disc_weight * RTD of `batch` as its share of the whole batch's: means
  take the whole batch's denominators, so micro-batches add up exactly to it. `auc` (a sort of
  every token) is for where it is read, never the train step."""
  input_mask = (batch['input_ids'] != special.pad).astype(jnp.float32)
  gen_logits, mlm_loss, sampled, disc_logits, labels = generate_and_discriminate(
      apply_fn, params, batch, prepared, dropout_rng, config, train)
  disc_loss = rtd_loss(disc_logits, labels, input_mask, prepared.token_count)

  # Step 7: one joint loss, minimised by one optimizer over both networks.
  loss = config.gen_weight * mlm_loss + config.disc_weight * disc_loss
  return loss, step_stats(loss, mlm_loss, disc_loss, gen_logits, prepared.masked, sampled,
                          disc_logits, labels, input_mask, auc)


def rtd_loss(disc_logits, labels, weights, count):
  """Sigmoid cross-entropy summed where `weights` is set, over `count`, a whole-batch count."""
  per_token = optax.sigmoid_binary_cross_entropy(disc_logits, labels)
  return jnp.sum(per_token * weights) / jnp.maximum(count, 1.0)


def generator_stats(mlm_loss, gen_logits, masked, sampled) -> dict:
  """The statistics of a generator sampling at `masked`."""
  return {'mlm_loss': mlm_loss, **mlm.accuracy_counts(gen_logits, masked),
          'sampled_correct': jnp.sum((sampled == masked.targets) * masked.weights)}


def step_stats(loss, mlm_loss, disc_loss, gen_logits, masked, sampled, disc_logits, labels,
               input_mask, auc: bool) -> dict:
  """The statistics of a step with a generator sampling at `masked` and a token classifier."""
  return {'loss': loss, 'disc_loss': disc_loss,
          **generator_stats(mlm_loss, gen_logits, masked, sampled),
          **disc_counts(disc_logits, labels, input_mask, auc)}


def generate_and_replace(apply_fn, variables, batch, prepared: Prepared, gen_rng,
                         config: ConfigDict, train: bool):
  """Steps 4-6 short of the discriminator: (generator logits [B, P, V], its MLM loss, samples
  [B, P], the input with them written in [B, L], labels [B, L]: 1.0 where that changed it)."""
  masked = prepared.masked
  # Step 4: the generator, with logits at the selected positions only. A frozen one is a fixed
  # language model, run without dropout.
  frozen = config.generator_kind == 'frozen'
  gen_logits = apply_fn(variables, masked.input_ids, batch['segment_ids'], masked.positions,
                        not train or frozen, method='generate', rngs={'dropout': gen_rng})
  mlm_loss = mlm.cross_entropy(gen_logits, masked, prepared.mlm_count)
  # Step 5: replacements sampled under stop_gradient; step 6: the discriminator's input, labels.
  sampled = masking.draw_replacements(prepared, gen_logits, config)
  fake_ids, labels = masking.replace_and_label(batch['input_ids'], masked, sampled)
  return gen_logits, mlm_loss, sampled, fake_ids, labels


def generate_and_discriminate(apply_fn, params, batch, prepared: Prepared, dropout_rng,
                              config: ConfigDict, train: bool):
  """Steps 4-6: as `generate_and_replace`, with the discriminator's logits [B, L] on the
  corrupted input in its place."""
  gen_rng, disc_rng = jax.random.split(dropout_rng)
  variables = {'params': params}
  gen_logits, mlm_loss, sampled, fake_ids, labels = generate_and_replace(
      apply_fn, variables, batch, prepared, gen_rng, config, train)
  disc_logits = apply_fn(variables, fake_ids, batch['segment_ids'], not train,
                         method='discriminate', rngs={'dropout': disc_rng})
  return gen_logits, mlm_loss, sampled, disc_logits, labels


def disc_counts(disc_logits, labels, input_mask, auc: bool = False):
  """Confusion counts at threshold 0.5 and, with `auc`, the batch's exact ROC AUC."""
  predicted = (disc_logits > 0).astype(jnp.float32)
  positives = labels * input_mask
  counts = {
      'token_count': jnp.sum(input_mask),
      'replaced_count': jnp.sum(positives),
      'true_positives': jnp.sum(predicted * positives),
      'predicted_positives': jnp.sum(predicted * input_mask),
      'disc_correct': jnp.sum((predicted == labels) * input_mask),
  }
  if auc:  # an AUC does not add up over batches: the report averages the batches' AUCs
    counts.update(disc_auc=batch_auc(disc_logits, labels, input_mask),
                  auc_batches=jnp.ones([], jnp.float32))
  return counts


def batch_auc(scores, labels, weights):
  """Exact ROC AUC over the tokens with weight 1 (the Mann-Whitney statistic, one sort):
  P(score of a replaced > score of an original), a tie counting one half. Ties take their run's
  middle rank: by position instead, one score for every token would read anything from 0 to 1."""
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


def partial_loss_15(apply_fn, params, batch, prepared: Prepared, dropout_rng, config: ConfigDict,
                    train: bool = True, special: SpecialIds = SpecialIds(), auc: bool = False):
  """'ELECTRA 15%' (section 3.2, Table 5: 82.4 GLUE): the RTD loss and disc_* metrics at the
  selected positions only (over the batch's count of them); the discriminator reads every token."""
  masked = prepared.masked
  gen_logits, mlm_loss, sampled, disc_logits, labels = generate_and_discriminate(
      apply_fn, params, batch, prepared, dropout_rng, config, train)
  at_selected = lambda x: jnp.take_along_axis(x, masked.positions, axis=1)
  disc_loss = rtd_loss(at_selected(disc_logits), at_selected(labels), masked.weights,
                       prepared.mlm_count)
  loss = config.gen_weight * mlm_loss + config.disc_weight * disc_loss
  # ELECTRA's metrics, with the selected positions as the tokens.
  return loss, step_stats(loss, mlm_loss, disc_loss, gen_logits, masked, sampled,
                          at_selected(disc_logits), at_selected(labels), masked.weights, auc)
