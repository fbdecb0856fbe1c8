"""BERT's masked language model, the baseline ELECTRA is measured against (config.objective='mlm').

The network is `model.MaskedLM`: the discriminator-sized encoder with an MLM head and no
generator. Its input is BERT-masked (`masking.bert_mask_inputs`: 15% selected as ELECTRA
selects them, then 80% [MASK], 10% random token, 10% unchanged) and its loss is the
cross-entropy at the selected positions, averaged over them. The cross-entropy and accuracy here
are also the ELECTRA generator's.
"""

import jax
import jax.numpy as jnp
import ml_collections

from electra_jax.objective import masking
from electra_jax.objective.masking import Masked, Prepared, SpecialIds


def prepare(rng, input_ids, config: ml_collections.ConfigDict,
            special: SpecialIds = SpecialIds()) -> Prepared:
  """BERT masking for the whole batch; nothing is sampled, so there are no sample keys."""
  masked = masking.bert_mask_inputs(rng, input_ids, config.mask_prob, config.model.vocab_size,
                                    special, selection=config.get('masking', 'token'))
  return Prepared(masked, None, jnp.sum(masked.weights), masking.count_tokens(input_ids, special))


def cross_entropy(logits, masked: Masked, count):
  """Summed cross-entropy of the targets at the selected positions, divided by `count`.

  `count` is the whole batch's number of selected positions, so a micro-batch's value is its
  share of the batch's mean.
  """
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  target_log_probs = jnp.take_along_axis(log_probs, masked.targets[..., None], axis=-1)[..., 0]
  return -jnp.sum(target_log_probs * masked.weights) / jnp.maximum(count, 1.0)


def accuracy_counts(logits, masked: Masked):
  """Argmax hits at the selected positions and their number (mlm_accuracy = correct / count)."""
  hits = (jnp.argmax(logits, axis=-1) == masked.targets) * masked.weights
  return {'mlm_correct': jnp.sum(hits), 'mlm_count': jnp.sum(masked.weights)}


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng,
                 config: ml_collections.ConfigDict, train: bool = True,
                 special: SpecialIds = SpecialIds()):
  """The MLM loss of `batch` (the whole batch or a micro-batch) as its share of the batch's.

  apply_fn is `MaskedLM.apply`; logits are computed at the selected positions only.
  """
  del config, special  # the masking already happened in `prepare`
  masked = prepared.masked
  logits = apply_fn({'params': params}, masked.input_ids, batch['segment_ids'], masked.positions,
                    not train, rngs={'dropout': dropout_rng})
  loss = cross_entropy(logits, masked, prepared.mlm_count)
  return loss, {'loss': loss, 'mlm_loss': loss, **accuracy_counts(logits, masked)}
