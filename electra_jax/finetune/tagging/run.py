"""Fine-tuning on CoNLL-2000 chunking, for several seeds: files -> features -> the loop -> F1.

The loss is the original's: per sentence, the sum over its words of the cross-entropy at the
word's first sub-token, averaged over the batch. Each seed's predictions.txt is in conlleval's
input format (`conlleval < predictions.txt` gives the same F1).
"""

import dataclasses
import functools
import os
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.finetune import init, loop, settings
from electra_jax.finetune.tagging import data as chunk_data, metrics as chunk_metrics


@dataclasses.dataclass(frozen=True)
class ChunkTask:
  name: str = 'chunk'
  epochs: int = 3   # the original's default num_train_epochs (chunk sets only max_seq_length)


TASK = ChunkTask()


def is_task(name: str) -> bool:
  return name.lower() in ('chunk', 'chunking', 'conll2000')


class Tagger(nn.Module):
  """Per-token label logits [B, L, num_labels]: one dense layer over the sequence output (the
  original had no dropout of its own before it, only the encoder's); on a 'modern' encoder,
  ModernBertForTokenClassification's head, its dropout the encoder's rate."""
  config: ml_collections.ConfigDict
  num_labels: int
  dtype: Any = jnp.float32
  attention: str = 'auto'

  @nn.compact
  def __call__(self, input_ids, segment_ids, deterministic: bool = True):
    hidden = init.encode(self, input_ids, segment_ids, deterministic)
    if self.config.architecture == 'modern':
      return init.modern_head(hidden, self.num_labels, self.config.dropout_rate, deterministic)
    return nn.Dense(self.num_labels, kernel_init=nn.initializers.glorot_uniform(),
                    dtype=jnp.float32, name='classifier')(hidden)


def loss_fn(params, batch, rng, *, model):
  logits = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                       deterministic=False, rngs={'dropout': rng})
  labels = batch['labels']
  losses = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
  return jnp.sum(jnp.where(labels >= 0, losses, 0.0)) / labels.shape[0]


def predict_fn(params, batch, *, model):
  logits = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'])
  return jnp.argmax(logits, axis=-1).astype(jnp.int32)


@run_lock.one_run_per_workdir('fine-tuning run')
def fine_tune(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Fine-tunes every seed of `config` on CoNLL-2000; writes DIR/results.json and predictions."""
  if config.tag_encoding not in chunk_data.ENCODINGS:
    raise UsageError(f"config.tag_encoding={config.tag_encoding!r}: use 'BIOES' (the "
                     "original's) or 'BIO'")
  if not config.data_dir:
    raise UsageError('chunk reads the CoNLL-2000 files: pass --config.data_dir=DIR holding '
                     f'{config.train_file} and {config.eval_file}')
  start = init.load_start(config)
  config = settings.resolve(config, TASK, start.model, jax.device_count(), start.step)
  train_set = chunk_data.read(os.path.join(config.data_dir, config.train_file),
                              config.max_train_sentences)
  eval_set = chunk_data.read(os.path.join(config.data_dir, config.eval_file))
  train_tags = chunk_data.encoded(train_set.tags, config.tag_encoding)
  labels = chunk_data.label_set(train_tags)
  build = functools.partial(chunk_data.build, labels=labels, vocab=start.vocab,
                            max_seq_length=config.max_seq_length)
  train_features = build(train_set, train_tags)
  eval_features = build(eval_set, chunk_data.encoded(eval_set.tags, config.tag_encoding))
  total_steps = max(1, int(len(train_set.words) * config.num_epochs / config.batch_size))

  loop.prepare_workdir(config, workdir)
  model = Tagger(start.model, len(labels), loop.DTYPES[config.dtype], config.attention)
  logging.info('chunk from %s: %d training sentences, %d labels (%s), %d steps of %d, lr %g, '
               'layer decay %g, seeds %s', start.description, len(train_set.words), len(labels),
               config.tag_encoding, total_steps, config.batch_size, config.learning_rate,
               config.layer_decay, config.seeds)

  def evaluate(seed, predict):
    del seed
    predicted = predict(eval_features.model_inputs())
    tags = chunk_data.predicted_tags(eval_features, predicted, labels, config.tag_encoding)
    return ({'eval': chunk_metrics.conlleval(eval_set.tags, tags)},
            {'predictions.txt': chunk_data.conlleval_text(eval_set, tags)})

  return loop.fine_tune_seeds(
      config, workdir, start, model, total_steps, train_features.training_inputs(), loss_fn,
      predict_fn, evaluate, ('eval', 'f1'),
      {'train_sentences': len(train_set.words), 'eval_sentences': len(eval_set.words)},
      train_file=train_set.path, eval_file=eval_set.path, labels=list(labels))
