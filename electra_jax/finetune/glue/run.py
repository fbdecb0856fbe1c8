"""Fine-tuning on one GLUE task, for several seeds: data -> classifier -> the shared loop -> scores.

GLUE's part: the loss (cross entropy; squared error for STS-B), the (B, A) swaps, each set cut
to its longest example, and results.json scored by the first dev split's first metric. A test
split's submission file (<TASK>.tsv; MNLI-m.tsv, MNLI-mm.tsv) is GLUE's `index<TAB>prediction`,
per seed in DIR/seed_<seed>/ and the median seed's in DIR.
"""

import functools
import os
import time

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.finetune import init, loop, optim, settings
from electra_jax.finetune.glue import data as glue_data, features, model as glue_model, tasks
from electra_jax.training import train as pretrain


def classifier_of(config, model_config, num_outputs: int) -> glue_model.Classifier:
  """The GLUE network a resolved fine-tuning `config` trains on `model_config` (the start's)."""
  return glue_model.Classifier(model_config, num_outputs, config.head_dropout,
                               loop.DTYPES[config.dtype], config.attention, config.pooling,
                               config.head)


def resolve(config: ml_collections.ConfigDict, task: tasks.Task, model: ml_collections.ConfigDict,
            num_devices: int, init_step: int | None = None) -> ml_collections.ConfigDict:
  """settings.resolve, then the classifier's own fields checked."""
  c = settings.resolve(config, task, model, num_devices, init_step)
  if c.pooling not in glue_model.POOLINGS:
    raise UsageError(f"config.pooling={c.pooling!r}: use 'cls' (the [CLS] vector, the recipe) or "
                     "'mean' (the mean of the top layer over the real tokens)")
  if c.head not in glue_model.HEADS:
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


def write_submission(path: str, task: tasks.Task, examples: glue_data.Examples,
                     predictions: np.ndarray):
  lines = ['index\tprediction']
  for index, prediction in zip(examples.index, predictions):
    value = f'{float(prediction):.3f}' if task.is_regression else task.labels[int(prediction)]
    lines.append(f'{index}\t{value}')
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines) + '\n')


def majority_class(task: tasks.Task, dev_labels: dict[str, np.ndarray]) -> dict | None:
  """Each dev split's metrics with every example given its most frequent label: the floor a
  classifier must clear (None for STS-B, a regression)."""
  if task.is_regression:
    return None
  return {name: tasks.majority_scores(task.metrics, labels) for name, labels in dev_labels.items()}


def at_or_below_majority(task: tasks.Task, median: dict, majority: dict | None,
                         dev_labels: dict[str, np.ndarray]) -> list[str]:
  """A warning for each dev split whose median score does not beat the majority class's."""
  metric = task.metrics[0]
  return [f'{split} {metric} {median[split][metric]:.4f} is at or below the '
          f'majority class\'s {majority[split][metric]:.4f} (every example labelled '
          f'{task.labels[tasks.majority_label(dev_labels[split])]!r}): the model learned nothing '
          'beyond the label counts; pretrain longer, or try another learning rate or more epochs'
          for split in (majority or {}) if median[split][metric] <= majority[split][metric]]


def write_results(workdir: str, task: tasks.Task, config, description: str, budget: dict,
                  per_seed: dict[int, dict], predictions: dict[int, dict[str, np.ndarray]],
                  test: dict[str, glue_data.Examples], majority: dict | None = None) -> dict:
  """DIR/results.json and the submission files; returns results.json's contents."""
  task_scores = {seed: s[task.dev[0].name][task.metrics[0]] for seed, s in per_seed.items()}
  chosen = loop.median_of(task_scores)
  for seed, by_split in predictions.items():
    seed_dir = os.path.join(workdir, f'seed_{seed}')
    os.makedirs(seed_dir, exist_ok=True)
    for name, values in by_split.items():
      write_submission(os.path.join(seed_dir, f'{name}.tsv'), task, test[name], values)
      if seed == chosen:
        write_submission(os.path.join(workdir, f'{name}.tsv'), task, test[name], values)
  summary = {
      'task': task.name, 'init_from': config.init_from, 'init': description, 'size': config.size,
      'score_metric': f'{task.dev[0].name} {task.metrics[0]}',
      'score': float(np.median(list(task_scores.values()))),
      'median': loop.medians(per_seed),
      'seeds': {str(seed): scores for seed, scores in per_seed.items()},
      'submission_seed': chosen if predictions[chosen] else None,  # None: no test split
      'submission_files': sorted(f'{name}.tsv' for name in test), 'budget': budget,
      'learning_rate': config.learning_rate, 'layer_decay': config.layer_decay,
      'majority_class': majority}
  loop.write_json(os.path.join(workdir, loop.RESULTS), summary)
  return summary


@run_lock.one_run_per_workdir('fine-tuning run')
def fine_tune(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Fine-tunes every seed of `config` on its task; writes DIR/results.json and submissions."""
  task = tasks.get_task(config.task)
  settings.parse_seeds(config.seeds)
  start = init.with_reinit(init.load_start(config), config.reinit)
  config = resolve(config, task, start.model, jax.device_count(), start.step)
  data = glue_data.load(task, config.data_dir, config.tfds_name, config.tfds_data_dir,
                        config.predict_test)
  train_set = features.subset(data.train, config.max_train_examples)
  used = len(train_set)
  if task.swap_pairs and config.swap_pairs:
    train_set = features.with_swapped_pairs(train_set)
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
  shapes = init.param_shapes(model, config.max_seq_length)
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
               config.batch_size, width, config.max_seq_length,
               config.learning_rate, config.layer_decay, config.seeds)

  def run_seed(seed, log):
    """Trains from a fresh head (seed): (dev metrics by split, test predictions)."""
    params = loop.train_seed(config, seed, start, model, compiled, train_inputs, total_steps,
                             schedule, log, workdir, token_counts)
    def predict(inputs):
      outputs = loop.predict(compiled.predict, params, inputs, config.eval_batch_size,
                             compiled.batch_sharding)
      return outputs[:, 0] if task.is_regression else np.argmax(outputs, axis=-1)
    scores = {name: tasks.compute(task.metrics, labels, predict(inputs))
              for name, (inputs, labels) in eval_inputs['dev'].items()}
    return scores, {name: predict(inputs) for name, inputs in eval_inputs['test'].items()}

  started = time.perf_counter()
  outcomes = loop.for_each_seed(config, workdir, total_steps, run_seed)
  per_seed = {seed: scores for seed, (scores, _) in outcomes.items()}
  predictions = {seed: test for seed, (_, test) in outcomes.items()}
  budget = {'train_examples': used, 'train_pairs_with_swaps': len(train_set),
            'steps': total_steps, 'batch_size': config.batch_size,
            'epochs': config.num_epochs, 'max_seq_length': config.max_seq_length,
            'seconds': round(time.perf_counter() - started, 1)}
  dev_labels = {name: labels for name, (_, labels) in eval_inputs['dev'].items()}
  majority = majority_class(task, dev_labels)
  summary = write_results(workdir, task, config, start.description, budget, per_seed,
                          predictions, data.test, majority)
  if majority:
    logging.info('%s: median %s; majority class %s', task.name,
                 loop.format_scores(summary['median']), loop.format_scores(majority))
  for warning in at_or_below_majority(task, summary['median'], majority, dev_labels):
    logging.warning(warning)
  # One program per batch length: at most one per multiple up to the set's length.
  multiple = config.length_multiple
  pretrain.check_compiled_once(compiled.step, -(-width // multiple) if multiple else 1)
  return summary
