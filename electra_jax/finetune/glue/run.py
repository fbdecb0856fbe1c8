"""Fine-tuning on one GLUE task, for several seeds: data -> classifier -> the shared loop -> scores.

GLUE's part: the loss (cross entropy; squared error for STS-B), the (B, A) swaps, each set cut
to its longest example, results.json scored by the first dev split's first metric, and each test
split's submission file (<TASK>.tsv; MNLI-m.tsv, MNLI-mm.tsv).
"""

import functools

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.finetune import init, loop, settings
from electra_jax.finetune.glue import data as glue_data, features, model as glue_model, tasks


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


def submission(task: tasks.Task, examples: glue_data.Examples, predictions: np.ndarray) -> str:
  """A submission file's text: GLUE's `index<TAB>prediction` lines under their header."""
  values = (f'{float(p):.3f}' if task.is_regression else task.labels[int(p)] for p in predictions)
  return 'index\tprediction\n' + ''.join(f'{index}\t{value}\n'
                                        for index, value in zip(examples.index, values))


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


@run_lock.one_run_per_workdir('fine-tuning run')
def fine_tune(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Fine-tunes every seed of `config` on its task; writes DIR/results.json and submissions."""
  task = tasks.get_task(config.task)
  start = init.load_start(config)
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
  dev_inputs = {name: encode(examples) for name, examples in data.dev.items()}
  test_inputs = {name: encode(examples) for name, examples in data.test.items()}
  dev_labels = {name: examples.labels for name, examples in data.dev.items()}
  total_steps = max(1, int(len(train_set) * config.num_epochs / config.batch_size))

  loop.prepare_workdir(config, workdir)
  model = classifier_of(config, start.model, task.num_outputs)
  width = train_inputs['input_ids'].shape[1]
  swaps = f', {len(train_set)} rows with the (B, A) swaps' if len(train_set) != used else ''
  logging.info('%s from %s: %d training examples (%d used%s), %d steps of '
               '%d (length %d of %d), lr %g, layer decay %g, seeds %s', task.name,
               start.description, len(data.train), used, swaps, total_steps,
               config.batch_size, width, config.max_seq_length,
               config.learning_rate, config.layer_decay, config.seeds)

  def evaluate(seed, predict):
    """A seed's dev metrics by split, and its submission files."""
    del seed
    def predicted(inputs):
      outputs = predict(inputs)
      return outputs[:, 0] if task.is_regression else np.argmax(outputs, axis=-1)
    scores = {name: tasks.compute(task.metrics, dev_labels[name], predicted(inputs))
              for name, inputs in dev_inputs.items()}
    return scores, {f'{name}.tsv': submission(task, data.test[name], predicted(inputs))
                    for name, inputs in test_inputs.items()}

  majority = majority_class(task, dev_labels)
  # One program per batch length: at most one per multiple up to the set's length.
  multiple = config.length_multiple
  summary = loop.fine_tune_seeds(
      config, workdir, start, model, total_steps, train_inputs,
      functools.partial(loss_fn, regression=task.is_regression), predict_step, evaluate,
      (task.dev[0].name, task.metrics[0]),
      {'train_examples': used, 'train_pairs_with_swaps': len(train_set)},
      features.token_counts(train_inputs['input_ids']), -(-width // multiple) if multiple else 1,
      ('submission_seed', 'submission_files'), majority_class=majority)
  if majority:
    logging.info('%s: median %s; majority class %s', task.name,
                 loop.format_scores(summary['median']), loop.format_scores(majority))
  for warning in at_or_below_majority(task, summary['median'], majority, dev_labels):
    logging.warning(warning)
  return summary
