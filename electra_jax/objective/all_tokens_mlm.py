"""The paper's 'All-Tokens MLM' ablation (section 3.2; docs/training.md has the formulas).

Replace MLM whose discriminator-sized network predicts EVERY token with the paper's copy
mechanism, a sigmoid copy probability D_t:

  p(x_t | x_corrupt) = D_t * 1[x_t == input_t] + (1 - D_t) * softmax(logits_t)[x_t]

The copy loss (config.copy_weight; 0 leaves the bare likelihood) is ours: ELECTRA's
replaced-token loss with D = P(original), a direct signal where the likelihood's gradient on D
is weak (the softmax already favours the input token).
"""

import jax
import jax.numpy as jnp
from ml_collections import ConfigDict
import optax

from electra_jax.objective import electra, replace_mlm
from electra_jax.objective.masking import Prepared, SpecialIds

prepare = electra.prepare  # the same masking and sampling keys


def copy_log_likelihood(logits, copy_logits, input_ids, targets):
  """log p(targets) under the copy mixture, per token, in log space: log D and log(1 - D) are
  log_sigmoid(+-copy_logit), so no probability is formed and rounded."""
  log_q = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), targets[..., None],
                              axis=-1)[..., 0]
  not_copied = jax.nn.log_sigmoid(-copy_logits) + log_q
  copied = jnp.logaddexp(jax.nn.log_sigmoid(copy_logits), not_copied)
  return jnp.where(input_ids == targets, copied, not_copied)


def mixture_argmax(logits, copy_logits, input_ids):
  """The most probable token under the copy mixture."""
  copy = jax.nn.sigmoid(copy_logits)[..., None]
  probs = ((1.0 - copy) * jax.nn.softmax(logits, axis=-1)
           + copy * jax.nn.one_hot(input_ids, logits.shape[-1], dtype=logits.dtype))
  return jnp.argmax(probs, axis=-1)


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng, config: ConfigDict,
                 train: bool = True, special: SpecialIds = SpecialIds(), auc: bool = False):
  """gen_weight * MLM_gen + MLM_all + copy_weight * copy of `batch` as its share of the batch's."""
  del auc  # no replaced-token detector
  gen_rng, disc_rng = jax.random.split(dropout_rng)
  variables, input_ids = {'params': params}, batch['input_ids']
  input_mask = (input_ids != special.pad).astype(jnp.float32)
  gen_logits, mlm_loss, sampled, fake_ids, replaced = electra.generate_and_replace(
      apply_fn, variables, batch, prepared, gen_rng, config, train)
  every_position = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
  logits, copy_logits = apply_fn(variables, fake_ids, batch['segment_ids'], every_position,
                                 not train, method='predict', rngs={'dropout': disc_rng})
  count = jnp.maximum(prepared.token_count, 1.0)
  log_p = copy_log_likelihood(logits, copy_logits, fake_ids, input_ids)
  all_mlm_loss = -jnp.sum(log_p * input_mask) / count
  original = 1.0 - replaced
  copy_loss = jnp.sum(optax.sigmoid_binary_cross_entropy(copy_logits, original)
                      * input_mask) / count

  stats = replace_mlm.generator_stats(mlm_loss, gen_logits, sampled, prepared, replaced,
                                      input_mask)
  loss = config.gen_weight * mlm_loss + all_mlm_loss + config.copy_weight * copy_loss
  hits = mixture_argmax(logits, copy_logits, fake_ids) == input_ids
  stats.update({
      'loss': loss, 'disc_mlm_loss': all_mlm_loss, 'copy_loss': copy_loss,
      'disc_mlm_correct': jnp.sum(hits * input_mask), 'disc_mlm_count': jnp.sum(input_mask),
      'copy_correct': jnp.sum(((copy_logits > 0) == (original > 0)) * input_mask),
  })
  return loss, stats
