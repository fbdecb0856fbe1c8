"""The paper's 'Replace MLM' ablation (Clark et al., 2020, section 3.2, Table 5: 82.4 GLUE).

A masked LM whose masked positions hold generator samples instead of [MASK]: how much of
ELECTRA's gain comes from the pretrain/fine-tune mismatch of [MASK]. The generator runs as in
ELECTRA; the discriminator-sized network (`model.ReplaceMLM.predict`) reads the text with the
samples written in and predicts the ORIGINAL token at every selected position, replaced or not:

  loss = gen_weight * MLM_gen + MLM_disc,  MLM_* = -sum_{selected} log softmax(logits)[original]
                                                   / #selected

Weight 1 on MLM_disc (config.disc_weight does not apply): ELECTRA's 50 makes up for a binary
loss being much smaller than a V-way cross-entropy; here both terms are V-way, and the paper
names no other weight. Metrics: mlm_* and sampled_accuracy are the generator's, disc_mlm_* the
predicting network's.
"""

import jax
import jax.numpy as jnp
import ml_collections

from electra_jax.objective import electra, masking, mlm
from electra_jax.objective.masking import Prepared, SpecialIds

prepare = electra.prepare  # the same masking and sampling keys


def generate_and_replace(apply_fn, variables, batch, prepared: Prepared, gen_rng,
                         config: ml_collections.ConfigDict, train: bool):
  """ELECTRA's steps 4-6: generator logits, samples, the text with them written in, and 1.0
  where that changed the token."""
  masked = prepared.masked
  gen_logits = apply_fn(variables, masked.input_ids, batch['segment_ids'], masked.positions,
                        not train, method='generate', rngs={'dropout': gen_rng})
  sampled = masking.sample_replacements(
      prepared.sample_keys, gen_logits, masking.sampling_temperature(prepared, config),
      config.sampler)
  fake_ids, replaced = masking.replace_and_label(batch['input_ids'], masked, sampled)
  return gen_logits, sampled, fake_ids, replaced


def generator_stats(gen_logits, sampled, prepared: Prepared, replaced, input_mask):
  """The generator's metrics as ELECTRA reports them, and the share of tokens replaced."""
  masked = prepared.masked
  return {
      'mlm_loss': mlm.cross_entropy(gen_logits, masked, prepared.mlm_count),
      **mlm.accuracy_counts(gen_logits, masked),
      'sampled_correct': jnp.sum((sampled == masked.targets) * masked.weights),
      'replaced_count': jnp.sum(replaced * input_mask),
      'token_count': jnp.sum(input_mask),
  }


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng,
                 config: ml_collections.ConfigDict, train: bool = True,
                 special: SpecialIds = SpecialIds(), auc: bool = False):
  """gen_weight * MLM_gen + MLM_disc of `batch` as its share of the whole batch's."""
  del auc  # no replaced-token detector
  gen_rng, disc_rng = jax.random.split(dropout_rng)
  masked, variables = prepared.masked, {'params': params}
  input_mask = (batch['input_ids'] != special.pad).astype(jnp.float32)
  gen_logits, sampled, fake_ids, replaced = generate_and_replace(
      apply_fn, variables, batch, prepared, gen_rng, config, train)
  logits, _ = apply_fn(variables, fake_ids, batch['segment_ids'], masked.positions, not train,
                       method='predict', rngs={'dropout': disc_rng})
  disc_mlm_loss = mlm.cross_entropy(logits, masked, prepared.mlm_count)
  stats = generator_stats(gen_logits, sampled, prepared, replaced, input_mask)
  loss = config.gen_weight * stats['mlm_loss'] + disc_mlm_loss
  correct = mlm.accuracy_counts(logits, masked)
  stats.update({'loss': loss, 'disc_mlm_loss': disc_mlm_loss,
                'disc_mlm_correct': correct['mlm_correct'],
                'disc_mlm_count': correct['mlm_count']})
  return loss, stats
