"""BERT's masked language model, the baseline ELECTRA is measured against (config.objective='mlm'):
`model.MaskedLM` on BERT-masked input (`masking.bert_mask_inputs`), its loss the cross-entropy
at the selected positions. The cross-entropy and accuracy here are also the ELECTRA generator's.
"""

import jax
import jax.numpy as jnp
from ml_collections import ConfigDict

from electra_jax.objective import masking
from electra_jax.objective.masking import Masked, Prepared, SpecialIds


def prepare(rng, input_ids, config: ConfigDict, special: SpecialIds = SpecialIds()) -> Prepared:
  """BERT masking for the whole batch; nothing is sampled, so there are no sample keys."""
  masked = masking.bert_mask_inputs(rng, input_ids, config.mask_prob, config.model.vocab_size,
                                    special, selection=config.masking)
  return Prepared(masked, None, jnp.sum(masked.weights), masking.count_tokens(input_ids, special))


def cross_entropy(logits, masked: Masked, count):
  """Cross-entropy of the targets summed at the selected positions, over `count` (the whole
  batch's, so a micro-batch's value is its share of the batch's mean)."""
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  target_log_probs = jnp.take_along_axis(log_probs, masked.targets[..., None], axis=-1)[..., 0]
  return -jnp.sum(target_log_probs * masked.weights) / jnp.maximum(count, 1.0)


def accuracy_counts(logits, masked: Masked):
  """Argmax hits at the selected positions and their number (mlm_accuracy = correct / count)."""
  hits = (jnp.argmax(logits, axis=-1) == masked.targets) * masked.weights
  return {'mlm_correct': jnp.sum(hits), 'mlm_count': jnp.sum(masked.weights)}


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng, config: ConfigDict,
                 train: bool = True, special: SpecialIds = SpecialIds(), auc: bool = False):
  """The MLM loss of `batch` (the whole batch or a micro-batch) as its share of the batch's."""
  del config, special, auc  # the masking already happened in `prepare`; no discriminator
  masked = prepared.masked
  logits = apply_fn({'params': params}, masked.input_ids, batch['segment_ids'], masked.positions,
                    not train, rngs={'dropout': dropout_rng})
  loss = cross_entropy(logits, masked, prepared.mlm_count)
  return loss, {'loss': loss, 'mlm_loss': loss, **accuracy_counts(logits, masked)}
