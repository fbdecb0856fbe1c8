"""ELECTRA with a unigram generator (config.generator_kind='unigram'; the paper's section 3.2).

No generator network: each selected position gets a draw from the data's unigram distribution
(`masking.unigram_replacements`); nothing reads [MASK], so none is written. The rest is
ELECTRA's, on `model.Discriminator`, which fine-tuning and export read as an ELECTRA run.
"""

import jax
import jax.numpy as jnp
from ml_collections import ConfigDict

from electra_jax.objective import electra, masking
from electra_jax.objective.masking import Prepared, SpecialIds


def prepare(rng, input_ids, config: ConfigDict, special: SpecialIds = SpecialIds()) -> Prepared:
  """Selected positions with unigram draws written in, for the whole batch; no sample keys."""
  select_rng, draw_rng = jax.random.split(rng)
  selected = masking.select_positions(select_rng, input_ids, config.mask_prob, special,
                                      config.masking)
  drawn = masking.unigram_replacements(draw_rng, input_ids, selected.positions.shape, special)
  return Prepared(masking.write(selected, drawn), None, jnp.sum(selected.weights),
                  masking.count_tokens(input_ids, special))


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng, config: ConfigDict,
                 train: bool = True, special: SpecialIds = SpecialIds(), auc: bool = False):
  """disc_weight * RTD of `batch` as its share of the whole batch's; see `electra.partial_loss`."""
  input_ids, masked = batch['input_ids'], prepared.masked
  input_mask = (input_ids != special.pad).astype(jnp.float32)
  labels = (masked.input_ids != input_ids).astype(jnp.float32)
  disc_logits = apply_fn({'params': params}, masked.input_ids, batch['segment_ids'], not train,
                         rngs={'dropout': dropout_rng})
  disc_loss = electra.rtd_loss(disc_logits, labels, input_mask, prepared.token_count)
  loss = config.disc_weight * disc_loss
  drawn = jnp.take_along_axis(masked.input_ids, masked.positions, axis=1)
  return loss, {'loss': loss, 'disc_loss': disc_loss,
                'sampled_correct': jnp.sum((drawn == masked.targets) * masked.weights),
                'mlm_count': jnp.sum(masked.weights),
                **electra.disc_counts(disc_logits, labels, input_mask, auc)}
