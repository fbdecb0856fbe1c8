"""The paper's 'ELECTRA 15%' ablation (Clark et al., 2020, section 3.2, Table 5: 82.4 GLUE).

ELECTRA with the discriminator's loss taken only at the ~15% of positions that were selected
for masking, instead of at every token: it isolates how much ELECTRA gains from learning from
all tokens. Everything else (masking, generator, sampling, labels, weights) is ELECTRA's:

  loss = gen_weight * MLM + disc_weight * sum_{selected} BCE(disc_logit, replaced) / #selected

The discriminator still reads the whole sequence; only where its loss is counted changes.
The disc_* metrics, replaced_fraction included, are over the selected positions.
"""

import jax.numpy as jnp
import ml_collections
import optax

from electra_jax.objective import electra, mlm
from electra_jax.objective.masking import Masked, Prepared, SpecialIds

prepare = electra.prepare  # the same masking and sampling keys


def selected_rtd_loss(disc_logits, labels, masked: Masked, count):
  """Sigmoid cross-entropy summed over the selected positions, divided by `count` (the whole
  batch's selected positions, so micro-batches add up to the batch's mean)."""
  at_selected = lambda x: jnp.take_along_axis(x, masked.positions, axis=1)
  per_position = optax.sigmoid_binary_cross_entropy(at_selected(disc_logits), at_selected(labels))
  return jnp.sum(per_position * masked.weights) / jnp.maximum(count, 1.0)


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng,
                 config: ml_collections.ConfigDict, train: bool = True,
                 special: SpecialIds = SpecialIds()):
  """gen_weight * MLM + disc_weight * RTD at the selected positions; see `electra.partial_loss`."""
  masked = prepared.masked
  gen_logits, mlm_loss, sampled, disc_logits, labels = electra.generate_and_discriminate(
      apply_fn, params, batch, prepared, dropout_rng, config, train)
  disc_loss = selected_rtd_loss(disc_logits, labels, masked, prepared.mlm_count)
  loss = config.gen_weight * mlm_loss + config.disc_weight * disc_loss
  at_selected = lambda x: jnp.take_along_axis(x, masked.positions, axis=1)
  stats = {
      'loss': loss, 'mlm_loss': mlm_loss, 'disc_loss': disc_loss,
      **mlm.accuracy_counts(gen_logits, masked),
      'sampled_correct': jnp.sum((sampled == masked.targets) * masked.weights),
      # The counts of ELECTRA's metrics, with the selected positions as the tokens.
      **electra.disc_counts(at_selected(disc_logits), at_selected(labels), masked.weights),
  }
  return loss, stats
