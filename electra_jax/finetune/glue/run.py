"""Fine-tuning on one GLUE task, for several seeds: data -> classifier -> the shared loop -> scores.

The loop is finetune/loop.py's. GLUE's part: the classifier (glue/model.py) and its loss (cross
entropy, or squared error for STS-B's score), the training set with its (B, A) swaps, each set
cut to its longest example, and per seed the dev metrics and the test split's predictions, which
glue/results.py writes as submission files.
"""

import functools
import time

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.finetune import cpu_threefry, init, loop, optim, settings
from electra_jax.finetune import model as model_lib
from electra_jax.finetune.glue import (data as glue_data, features, metrics,
                                       model as glue_model, results, tasks)
from electra_jax.training import train as pretrain


def classifier_of(config, model_config, num_outputs: int) -> glue_model.Classifier:
  """The GLUE network a resolved fine-tuning `config` trains on `model_config` (the start's)."""
  return glue_model.Classifier(model_config, num_outputs, config.head_dropout,
                               loop.DTYPES[config.dtype], config.attention, config.pooling,
                               config.get('head', 'electra'))  # runs saved before it: 'electra'


def resolve(config: ml_collections.ConfigDict, task: tasks.Task, model: ml_collections.ConfigDict,
            num_devices: int, init_step: int | None = None) -> ml_collections.ConfigDict:
  """settings.resolve, then the classifier's own fields checked."""
  c = settings.resolve(config, task, model, num_devices, init_step)
  if c.get('pooling', 'cls') not in glue_model.POOLINGS:
    raise UsageError(f"config.pooling={c.pooling!r}: use 'cls' (the [CLS] vector, the recipe) or "
                     "'mean' (the mean of the top layer over the real tokens)")
  if c.get('head', 'electra') not in glue_model.HEADS:
    raise UsageError(f"config.head={c.head!r}: use 'electra' (one dense layer on [CLS], the "
                     "original's) or 'transformers' (ElectraForSequenceClassification's dense, "
                     'GELU, dense, which electra_jax.export writes as that class)')
  return c


def loss_fn(params, batch, rng, *, model, regression: bool):
  outputs = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                        deterministic=False, rngs={'dropout': rng})
  if regression:
    return jnp.mean(jnp.square(outputs[:, 0] - batch['labels']))
  return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(outputs, batch['labels']))


def predict_step(params, batch, *, model):
  return model.apply({'params': params}, batch['input_ids'], batch['segment_ids'])


def compile_steps(model, optimizer, regression, mesh) -> loop.Compiled:
  """GLUE's steps: its classifier's loss and outputs."""
  return loop.compile_task_steps(functools.partial(loss_fn, model=model, regression=regression),
                                 functools.partial(predict_step, model=model), optimizer, mesh)


def to_predictions(task, outputs: np.ndarray) -> np.ndarray:
  return outputs[:, 0] if task.is_regression else np.argmax(outputs, axis=-1)


def train_examples(config, task, data):
  examples = features.subset(data.train, config.max_train_examples)
  used = len(examples)
  if task.swap_pairs and config.swap_pairs:
    examples = features.with_swapped_pairs(examples)
  return examples, used


def fine_tune_seed(config, task, seed, start, model, compiled, train_inputs, eval_inputs,
                   total_steps, schedule, log, workdir, token_counts=None):
  """Trains from a fresh head (seed) and returns (dev metrics by split, test predictions)."""
  params = loop.train_seed(config, seed, start, model, compiled, train_inputs, total_steps,
                           schedule, log, workdir, token_counts)
  predict_fn, batch_sharding = compiled.predict, compiled.batch_sharding
  scores, test_predictions = {}, {}
  for name, (inputs, labels) in eval_inputs['dev'].items():
    predictions = to_predictions(task, loop.predict(predict_fn, params, inputs,
                                                    config.eval_batch_size, batch_sharding))
    scores[name] = metrics.compute(task.metrics, labels, predictions)
  for name, inputs in eval_inputs['test'].items():
    test_predictions[name] = to_predictions(task, loop.predict(
        predict_fn, params, inputs, config.eval_batch_size, batch_sharding))
  return scores, test_predictions


@run_lock.one_run_per_workdir('fine-tuning run')
@cpu_threefry.in_line_on_cpu()  # the same dropout masks, for less CPU time
def fine_tune(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Fine-tunes every seed of `config` on its task; writes DIR/results.json and submissions."""
  task = tasks.get_task(config.task)
  settings.parse_seeds(config.seeds)
  start = init.with_reinit(init.load_start(config), config.get('reinit', ''))
  config = resolve(config, task, start.model, jax.device_count(), start.step)
  data = glue_data.load(task, config.data_dir, config.tfds_name, config.tfds_data_dir,
                        config.predict_test)
  train_set, used = train_examples(config, task, data)
  # Each set is cut to its longest example: the step and predictions then cost what the data
  # needs, not max_seq_length (one more compilation per distinct length, a few at most).
  encode = lambda examples: features.trim_padding(
      features.encode(examples, start.vocab, config.max_seq_length))
  train_inputs = {**encode(train_set), 'labels': train_set.labels}
  eval_inputs = {'dev': {name: (encode(ex), ex.labels) for name, ex in data.dev.items()},
                 'test': {name: encode(ex) for name, ex in data.test.items()}}
  total_steps = max(1, int(len(train_set) * config.num_epochs / config.batch_size))

  loop.prepare_workdir(config, workdir)
  model = classifier_of(config, start.model, task.num_outputs)
  shapes = model_lib.param_shapes(model, config.max_seq_length)
  optimizer = optim.make_optimizer(config, shapes, start.model.num_layers, total_steps)
  compiled = compile_steps(model, optimizer, task.is_regression, pretrain.make_mesh())
  width = train_inputs['input_ids'].shape[1]
  token_counts = features.token_counts(train_inputs['input_ids'])
  train_inputs = jax.device_put(train_inputs, compiled.replicated)  # once, for every seed
  schedule = optim.learning_rate_schedule(config, total_steps)
  # Only pair tasks trained on (B, A) as well have more rows than examples used.
  swaps = f', {len(train_set)} rows with the (B, A) swaps' if len(train_set) != used else ''
  logging.info('%s from %s: %d training examples (%d used%s), %d steps of '
               '%d (length %d of %d), lr %g, layer decay %g, seeds %s', task.name,
               start.description, len(data.train), used, swaps, total_steps,
               config.batch_size, train_inputs['input_ids'].shape[1], config.max_seq_length,
               config.learning_rate, config.layer_decay, config.seeds)

  started = time.perf_counter()
  outcomes = loop.for_each_seed(config, workdir, total_steps, lambda seed, log: fine_tune_seed(
      config, task, seed, start, model, compiled, train_inputs, eval_inputs, total_steps,
      schedule, log, workdir, token_counts))
  per_seed = {seed: scores for seed, (scores, _) in outcomes.items()}
  predictions = {seed: test for seed, (_, test) in outcomes.items()}
  budget = {'train_examples': used, 'train_pairs_with_swaps': len(train_set),
            'steps': total_steps, 'batch_size': config.batch_size,
            'epochs': config.num_epochs, 'max_seq_length': config.max_seq_length,
            'seconds': round(time.perf_counter() - started, 1)}
  summary = results.write(workdir, task, config, start.description, budget, per_seed,
                          predictions, data.test)
  # One program per batch length: at most one per multiple up to the set's length.
  multiple = config.length_multiple
  pretrain.check_compiled_once(compiled.step, -(-width // multiple) if multiple else 1)
  return summary
