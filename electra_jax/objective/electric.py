"""Electric: ELECTRA as an energy-based cloze model (Clark et al., 2020), as the original's
electric_objective computes it (docs/training.md). The discriminator's logit at t is

  s_t = head_t + stop_gradient(log q(x̃_t | context)) + log(mask_prob / (1 - mask_prob)),

the last term NCE's log k for k noise samples per data token; its label is 1 at every selected
position, even where the sample equals the original (still a draw from the noise).
"""

import math

import jax
import jax.numpy as jnp
from ml_collections import ConfigDict

from electra_jax.objective import electra, masking
from electra_jax.objective.masking import Prepared, SpecialIds


def prepare(rng, input_ids, config: ConfigDict, special: SpecialIds = SpecialIds()) -> Prepared:
  """The positions to replace (nothing is [MASK]ed) and the sampling keys. Its `mlm_count` is
  the number of candidate tokens, the cloze loss's denominator."""
  select_rng, sample_rng = jax.random.split(rng)
  selected = masking.select_positions(select_rng, input_ids, config.mask_prob, special,
                                      config.masking)
  return Prepared(selected, jax.random.split(sample_rng, input_ids.shape[0]),
                  jnp.sum(masking.candidates(input_ids, special)).astype(jnp.float32),
                  masking.count_tokens(input_ids, special))


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng, config: ConfigDict,
                 train: bool = True, special: SpecialIds = SpecialIds(), auc: bool = False):
  """gen_weight * cloze + disc_weight * NCE of `batch` as its share of the whole batch's."""
  gen_rng, disc_rng = jax.random.split(dropout_rng)
  input_ids, segment_ids = batch['input_ids'], batch['segment_ids']
  variables, selected = {'params': params}, prepared.masked
  input_mask = (input_ids != special.pad).astype(jnp.float32)

  cloze_logits = apply_fn(variables, input_ids, segment_ids, not train, method='cloze',
                          rngs={'dropout': gen_rng})
  log_q = jax.nn.log_softmax(cloze_logits, axis=-1)
  cloze_nll = -jnp.take_along_axis(log_q, input_ids[..., None], axis=-1)[..., 0]
  is_candidate = masking.candidates(input_ids, special)
  cloze_loss = jnp.sum(cloze_nll * is_candidate) / jnp.maximum(prepared.mlm_count, 1.0)

  at_selected = jnp.take_along_axis(cloze_logits, selected.positions[..., None], axis=1)
  sampled = masking.draw_replacements(prepared, at_selected, config)
  noisy_ids, _ = masking.replace_and_label(input_ids, selected, sampled)
  labels = masking.scatter(jnp.zeros_like(input_ids), selected.positions,
                           jnp.ones_like(selected.positions), selected.weights > 0)
  labels = labels.astype(jnp.float32)

  head = apply_fn(variables, noisy_ids, segment_ids, not train, method='discriminate',
                  rngs={'dropout': disc_rng})
  log_q_read = jnp.take_along_axis(log_q, noisy_ids[..., None], axis=-1)[..., 0]
  disc_logits = (head + jax.lax.stop_gradient(log_q_read)
                 + math.log(config.mask_prob / (1.0 - config.mask_prob)))  # s_t above
  disc_loss = electra.rtd_loss(disc_logits, labels, input_mask, prepared.token_count)

  loss = config.gen_weight * cloze_loss + config.disc_weight * disc_loss
  return loss, electra.step_stats(loss, cloze_loss, disc_loss, at_selected, selected, sampled,
                                  disc_logits, labels, input_mask, auc)
