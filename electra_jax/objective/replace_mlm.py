"""The paper's 'Replace MLM' ablation (section 3.2; docs/training.md has the formulas).

A masked LM whose masked positions hold generator samples instead of [MASK]: the
discriminator-sized network (`model.ReplaceMLM.predict`) predicts the ORIGINAL token at every
selected position. Weight 1 on its loss (config.disc_weight does not apply): ELECTRA's 50 makes
up for a binary loss being much smaller than a V-way cross-entropy, and both terms are V-way.
"""

import jax
import jax.numpy as jnp
from ml_collections import ConfigDict

from electra_jax.objective import electra, mlm
from electra_jax.objective.masking import Prepared, SpecialIds

prepare = electra.prepare  # the same masking and sampling keys


def generator_stats(mlm_loss, gen_logits, sampled, prepared: Prepared, replaced, input_mask):
  """The generator's statistics as ELECTRA reports them, and the share of tokens replaced."""
  return {**electra.generator_stats(mlm_loss, gen_logits, prepared.masked, sampled),
          'replaced_count': jnp.sum(replaced * input_mask), 'token_count': jnp.sum(input_mask)}


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng, config: ConfigDict,
                 train: bool = True, special: SpecialIds = SpecialIds(), auc: bool = False):
  """gen_weight * MLM_gen + MLM_disc of `batch` as its share of the whole batch's."""
  del auc  # no replaced-token detector
  gen_rng, disc_rng = jax.random.split(dropout_rng)
  masked, variables = prepared.masked, {'params': params}
  input_mask = (batch['input_ids'] != special.pad).astype(jnp.float32)
  gen_logits, mlm_loss, sampled, fake_ids, replaced = electra.generate_and_replace(
      apply_fn, variables, batch, prepared, gen_rng, config, train)
  logits, _ = apply_fn(variables, fake_ids, batch['segment_ids'], masked.positions, not train,
                       method='predict', rngs={'dropout': disc_rng})
  disc_mlm_loss = mlm.cross_entropy(logits, masked, prepared.mlm_count)
  stats = generator_stats(mlm_loss, gen_logits, sampled, prepared, replaced, input_mask)
  loss = config.gen_weight * mlm_loss + disc_mlm_loss
  correct = mlm.accuracy_counts(logits, masked)
  stats.update({'loss': loss, 'disc_mlm_loss': disc_mlm_loss,
                'disc_mlm_correct': correct['mlm_correct'],
                'disc_mlm_count': correct['mlm_count']})
  return loss, stats
