"""Fine-tuning on SQuAD 1.1 or 2.0, for several seeds: files -> windows -> the loop -> answers.

Each seed's files: predictions.json (question id -> answer, "" for none) and, for 2.0,
null_odds.json and best_non_null.json (the answers before the threshold), for the official 2.0
script's threshold search.
"""

import dataclasses
import functools
import os
import re
import time

from absl import logging
import jax
import ml_collections

from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.finetune import init, loop, settings
from electra_jax.finetune.squad import (data as squad_data, features as squad_features,
                                        metrics as squad_metrics, model as qa_model,
                                        predict as squad_predict)


@dataclasses.dataclass(frozen=True)
class QATask:
  name: str
  v2: bool
  train_file: str   # the official file names
  dev_file: str
  epochs: int = 2   # the original's num_train_epochs for "squad" tasks


TASKS = {'squad_v1': QATask('squad_v1', False, 'train-v1.1.json', 'dev-v1.1.json'),
         'squad_v2': QATask('squad_v2', True, 'train-v2.0.json', 'dev-v2.0.json')}


def get_task(name: str) -> QATask | None:
  """The SQuAD task `name` spells (squad_v1, SQuAD-1.1, squad2, ...), or None if not SQuAD."""
  match = re.fullmatch(r'squadv?(1|11|2|20)', ''.join(c for c in name.lower() if c.isalnum()))
  return TASKS[f'squad_v{match.group(1)[0]}'] if match else None


@run_lock.one_run_per_workdir('fine-tuning run')
def fine_tune(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Fine-tunes every seed of `config` on its SQuAD task; writes DIR/results.json and answers."""
  task = get_task(config.task)
  if config.head not in qa_model.HEADS:
    raise UsageError(f"config.head={config.head!r}: use 'electra' (the original's) or 'plain' "
                     '(ElectraForQuestionAnswering)')
  if config.max_seq_length < config.max_query_length + 4:
    raise UsageError(f'config.max_seq_length={config.max_seq_length} leaves no room for the '
                     f'context after a question of max_query_length={config.max_query_length} '
                     'sub-tokens, [CLS] and two [SEP]; raise it or lower max_query_length')
  start = init.load_start(config)
  config = settings.resolve(config, task, start.model, jax.device_count(), start.step)
  if not config.data_dir:
    raise UsageError(f'{task.name} reads the official SQuAD JSON files: pass '
                     '--config.data_dir=DIR (and --config.train_file / --config.dev_file if '
                     f'they are not {task.train_file} and {task.dev_file})')
  read = lambda name, default, articles: squad_data.read(
      os.path.join(config.data_dir, name or default), not task.v2, articles)
  train_set = read(config.train_file, task.train_file, config.train_articles)
  dev_set = read(config.dev_file, task.dev_file, config.dev_articles)
  build = functools.partial(squad_features.build, vocab=start.vocab,
                            max_seq_length=config.max_seq_length,
                            max_query_length=config.max_query_length,
                            doc_stride=config.doc_stride)
  train_windows, _, dropped = build(train_set, training=True)
  if not len(train_windows.input_ids):  # every question dropped (the reader refuses none)
    kind = '' if task.v2 else 'answerable '
    raise UsageError(f"{task.name} has nothing to train on: none of the training file's "
                     f'{len(train_set.questions)} {kind}questions has an answer that covers a '
                     'sub-token of its context; pass a --config.train_file whose answers are '
                     'words of their contexts')
  dev_windows, dev_contexts, _ = build(dev_set, training=False)
  total_steps = max(1, int(len(train_windows.input_ids) * config.num_epochs / config.batch_size))

  loop.prepare_workdir(config, workdir)
  model = qa_model.QuestionAnswerer(start.model, config.head, task.v2 and config.head == 'electra',
                                    config.beam_size, dtype=loop.DTYPES[config.dtype],
                                    attention=config.attention)
  logging.info('%s from %s: %d training questions in %d windows (%d left out: no sub-token in '
               'their answer), %d dev questions in %d windows; %d steps of %d, lr %g, layer '
               'decay %g, seeds %s', task.name, start.description, len(train_set.questions),
               len(train_windows.input_ids), dropped, len(dev_set.questions),
               len(dev_windows.input_ids), total_steps, config.batch_size, config.learning_rate,
               config.layer_decay, config.seeds)

  gold = {q.qid: [a.text for a in q.answers] for q in dev_set.questions}

  def evaluate(seed, predict):
    # Minutes on a CPU for the full dev set: said at its start, with progress as it goes.
    logging.info('seed %d: predicting %d dev questions (%d windows)', seed,
                 len(dev_set.questions), len(dev_windows.input_ids))
    started = time.perf_counter()
    outputs = predict(dev_windows.model_inputs(), what='dev windows')
    found = squad_predict.answers(dev_set, dev_windows, dev_contexts, outputs, config.head,
                                  task.v2, config.n_best_size, config.max_answer_length)
    logging.info('seed %d: predicted the dev answers in %.1f s', seed,
                 time.perf_counter() - started)
    threshold = config.na_threshold
    files = {'predictions.json': found.predictions(threshold)}
    if not task.v2:
      return {'dev': squad_metrics.evaluate_v1(gold, found.best_non_null)}, files
    dev = squad_metrics.evaluate_v2(gold, found.best_non_null, found.null_odds, threshold)
    return ({'dev': {**dev, 'threshold': threshold}},
            {**files, 'null_odds.json': found.null_odds, 'best_non_null.json': found.best_non_null})

  return loop.fine_tune_seeds(
      config, workdir, start, model, total_steps, train_windows.training_inputs(),
      qa_model.loss_fn, qa_model.predict_fn, evaluate, ('dev', 'f1'),
      {'train_questions': len(train_set.questions), 'train_questions_left_out': dropped,
       'train_windows': len(train_windows.input_ids), 'dev_questions': len(dev_set.questions),
       'dev_windows': len(dev_windows.input_ids)},
      train_file=train_set.path, dev_file=dev_set.path, head=config.head)
