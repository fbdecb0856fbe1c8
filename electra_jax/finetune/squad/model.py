"""Extractive QA: the discriminator encoder with a span head, its loss and its eval outputs.

Head 'electra' is the original's (qa_tasks.py, joint_prediction=True): end logits conditioned
on the start, dense(512, GELU) over [h_start; h_end] then dense(1), on the gold start in training
and on a beam of starts and ends in prediction; for SQuAD 2.0 it adds the answerability logit,
dense(512, GELU) over [h_CLS; sum_i softmax(start)_i h_i] then dense(1), sigmoid cross-entropy
weighted 0.5. Head 'plain' is ElectraForQuestionAnswering's dense(2), start and end independent
(on a 'modern' encoder ModernBertForQuestionAnswering's: init.modern_head to 2, no dropout).
As in the original, positions that cannot be an answer lose 1000 from their logits ([CLS] stays:
"no answer here"), heads start Glorot-uniform, and the span loss averages start and end.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from electra_jax.finetune.init import encode, modern_head

HEADS = ('electra', 'plain')
ANSWERABLE_WEIGHT = 0.5   # the original's answerable_weight
MASKED = 1000.0           # the original's 1000.0 * (answer_mask - 1)

_dense = lambda features, name: nn.Dense(features, kernel_init=nn.initializers.glorot_uniform(),
                                         dtype=jnp.float32, name=name)
_gelu = lambda x: jax.nn.gelu(x, approximate=False)


def answer_bias(input_ids, segment_ids):
  """0 where an answer may start or end (the context, its closing [SEP], and [CLS]), else -1000."""
  allowed = ((segment_ids == 1) & (input_ids != 0)).at[:, 0].set(True)
  return MASKED * (allowed.astype(jnp.float32) - 1.0)


class QuestionAnswerer(nn.Module):
  config: ml_collections.ConfigDict  # a pretraining run's `model` section
  head: str = 'electra'
  answerable: bool = False           # SQuAD 2.0's answerability classifier ('electra' head)
  beam_size: int = 20
  head_hidden_size: int = 512        # the original's qa_hidden and answerable dense widths
  dtype: Any = jnp.float32
  attention: str = 'auto'

  @nn.compact
  def __call__(self, input_ids, segment_ids, deterministic: bool = True, start_positions=None):
    """Training (start_positions given): start_logits and end_logits [B, L]. Evaluation: the
    'plain' head's logits, or the 'electra' head's beams (start_top_log_probs/index [B, K],
    end_top_log_probs/index [B, K, K]); with `answerable`, answerable_logit [B] either way."""
    hidden = encode(self, input_ids, segment_ids, deterministic).astype(jnp.float32)
    bias = answer_bias(input_ids, segment_ids)
    if self.head == 'plain':
      logits = (modern_head(hidden, 2, 0.0, deterministic) if self.config.architecture == 'modern'
                else _dense(2, 'qa_outputs')(hidden)) + bias[..., None]
      return {'start_logits': logits[..., 0], 'end_logits': logits[..., 1]}
    start_logits = _dense(1, 'start_logits')(hidden)[..., 0] + bias
    end_layer = _EndLogits(self.head_hidden_size, name='end')
    if start_positions is not None:
      start_hidden = jnp.take_along_axis(hidden, start_positions[:, None, None], axis=1)
      outputs = {'start_logits': start_logits,
                 'end_logits': end_layer(start_hidden, hidden)[:, 0] + bias}
    else:
      beam = min(self.beam_size, hidden.shape[1])
      start_top_log_probs, start_top_index = jax.lax.top_k(jax.nn.log_softmax(start_logits),
                                                           beam)
      start_hidden = jnp.take_along_axis(hidden, start_top_index[..., None], axis=1)
      end_logits = end_layer(start_hidden, hidden) + bias[:, None]       # [B, K, L]
      end_top_log_probs, end_top_index = jax.lax.top_k(jax.nn.log_softmax(end_logits), beam)
      outputs = {'start_top_log_probs': start_top_log_probs, 'start_top_index': start_top_index,
                 'end_top_log_probs': end_top_log_probs, 'end_top_index': end_top_index}
    if self.answerable:
      expected_start = jnp.einsum('bl,blh->bh', jax.nn.softmax(start_logits), hidden)
      features = jnp.concatenate([hidden[:, 0], expected_start], axis=-1)
      features = _gelu(_dense(self.head_hidden_size, 'answerable_hidden')(features))
      outputs['answerable_logit'] = _dense(1, 'answerable_logit')(features)[..., 0]
    return outputs


class _EndLogits(nn.Module):
  """dense(GELU) over [h_start; h_end] then dense(1): end logits [B, K, L] for K starts. The
  2H-input kernel is applied as its two halves, so the K x L concatenations are never built."""
  features: int

  @nn.compact
  def __call__(self, start_hidden, hidden):  # [B, K, H] and [B, L, H]
    width = hidden.shape[-1]
    kernel = self.param('kernel', nn.initializers.glorot_uniform(), (2 * width, self.features))
    bias = self.param('bias', nn.initializers.zeros, (self.features,))
    pre = (jnp.einsum('bkh,hf->bkf', start_hidden, kernel[:width])[:, :, None] +
           jnp.einsum('blh,hf->blf', hidden, kernel[width:])[:, None] + bias)
    return _dense(1, 'logits')(_gelu(pre))[..., 0]


def loss_fn(params, batch, rng, *, model: QuestionAnswerer):
  outputs = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                        deterministic=False, rngs={'dropout': rng},
                        start_positions=batch['start_positions'])
  cross_entropy = optax.softmax_cross_entropy_with_integer_labels
  losses = (cross_entropy(outputs['start_logits'], batch['start_positions']) +
            cross_entropy(outputs['end_logits'], batch['end_positions'])) / 2
  if 'answerable_logit' in outputs:
    losses += ANSWERABLE_WEIGHT * optax.sigmoid_binary_cross_entropy(
        outputs['answerable_logit'], batch['is_impossible'])
  return jnp.mean(losses)


def predict_fn(params, batch, *, model: QuestionAnswerer):
  return model.apply({'params': params}, batch['input_ids'], batch['segment_ids'])
