"""The GLUE tasks as data: where each split's text and labels are, and how a task is scored.

Labels are the strings of GLUE's TSV and submission files; TFDS's class numbers map to them in
its own order (`tfds_labels`). Columns are named as in the standard GLUE download (CoLA's train
and dev files have no header: positions). The metrics are scikit-learn's and SciPy's (the tests
compare), 0.0 where a formula divides by zero, as scikit-learn gives, not NaN.
"""

import dataclasses

import numpy as np

from electra_jax.common.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Columns:
  """Where one kind of TSV file keeps its fields: header names, or positions without a header."""
  text_a: str | int
  text_b: str | int | None = None
  label: str | int | None = None   # None: a test file, without labels
  index: str | int | None = None   # the id a submission file reports; None: the row number

  @property
  def header(self) -> bool:
    return isinstance(self.text_a, str)


@dataclasses.dataclass(frozen=True)
class Split:
  """One evaluated or predicted split: its TSV file, its TFDS split and its reporting name."""
  file: str        # <data_dir>/<TASK>/<file>.tsv
  tfds_split: str
  name: str        # key in results.json (dev) or submission file name without .tsv (test)


@dataclasses.dataclass(frozen=True)
class Task:
  name: str                       # GLUE's directory name, e.g. 'SST-2'
  labels: tuple[str, ...]         # () for regression (STS-B)
  metrics: tuple[str, ...]        # computed on every dev split; the first is the task's score
  train_columns: Columns          # train and dev files
  test_columns: Columns
  dev: tuple[Split, ...]
  test: tuple[Split, ...]
  tfds_config: str                # glue/<tfds_config>
  tfds_text: tuple[str, ...]      # TFDS features holding text A (and B)
  tfds_labels: tuple[str, ...] = ()  # our label of TFDS class k; () = str(k) (or a float)
  epochs: int = 3
  swap_pairs: bool = False        # train on (B, A) as well: the pair's order carries no meaning

  @property
  def is_regression(self) -> bool:
    return not self.labels

  @property
  def num_outputs(self) -> int:
    return len(self.labels) or 1

  @property
  def is_pair(self) -> bool:
    return len(self.tfds_text) == 2


BINARY = ('0', '1')
NLI2 = ('entailment', 'not_entailment')


def _splits(dev_name: str):
  return ((Split('dev', 'validation', dev_name),), (Split('test', 'test', dev_name),))


def _pair(a, b, label, test_index='index'):
  return Columns(a, b, label), Columns(a, b, None, test_index)


TASKS = {task.name: task for task in (
    Task('CoLA', BINARY, ('mcc',), Columns(3, None, 1), Columns('sentence', None, None, 'index'),
         *_splits('CoLA'), 'cola', ('sentence',)),
    Task('SST-2', BINARY, ('accuracy',), Columns('sentence', None, 'label'),
         Columns('sentence', None, None, 'index'), *_splits('SST-2'), 'sst2', ('sentence',)),
    Task('MRPC', BINARY, ('accuracy', 'f1'), *_pair('#1 String', '#2 String', 'Quality'),
         *_splits('MRPC'), 'mrpc', ('sentence1', 'sentence2'), swap_pairs=True),
    Task('STS-B', (), ('spearman', 'pearson'), *_pair('sentence1', 'sentence2', 'score'),
         *_splits('STS-B'), 'stsb', ('sentence1', 'sentence2'), epochs=10, swap_pairs=True),
    Task('QQP', BINARY, ('accuracy', 'f1'), *_pair('question1', 'question2', 'is_duplicate', 'id'),
         *_splits('QQP'), 'qqp', ('question1', 'question2')),
    Task('MNLI', ('contradiction', 'entailment', 'neutral'), ('accuracy',),
         *_pair('sentence1', 'sentence2', 'gold_label'),
         (Split('dev_matched', 'validation_matched', 'MNLI-m'),
          Split('dev_mismatched', 'validation_mismatched', 'MNLI-mm')),
         (Split('test_matched', 'test_matched', 'MNLI-m'),
          Split('test_mismatched', 'test_mismatched', 'MNLI-mm')),
         'mnli', ('premise', 'hypothesis'), ('entailment', 'neutral', 'contradiction')),
    Task('QNLI', NLI2, ('accuracy',), *_pair('question', 'sentence', 'label'), *_splits('QNLI'),
         'qnli', ('question', 'sentence'), NLI2),
    Task('RTE', NLI2, ('accuracy',), *_pair('sentence1', 'sentence2', 'label'), *_splits('RTE'),
         'rte', ('sentence1', 'sentence2'), NLI2, epochs=10),
    Task('WNLI', BINARY, ('accuracy',), *_pair('sentence1', 'sentence2', 'label'),
         *_splits('WNLI'), 'wnli', ('sentence1', 'sentence2')),
)}

# What users type: 'sst2', 'SST-2', 'sts-b', 'stsb', 'mnli', ...
_ALIASES = {name.lower().replace('-', ''): name for name in TASKS}


def get_task(name: str) -> Task:
  key = name.lower().replace('-', '').replace('_', '')
  if key not in _ALIASES:
    raise UsageError(f"unknown GLUE task '{name}'; use one of {', '.join(TASKS)} "
                     '(e.g. --config.task=SST-2)')
  return TASKS[_ALIASES[key]]


# ---- metrics ----------------------------------------------------------------------------------


def accuracy(labels, predictions) -> float:
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels, predictions, positive=1) -> float:
  """F1 of the positive class (MRPC: equivalent, QQP: duplicate)."""
  labels, predictions = np.asarray(labels) == positive, np.asarray(predictions) == positive
  true_positives = np.sum(labels & predictions)
  denominator = np.sum(labels) + np.sum(predictions)
  return float(2 * true_positives / denominator) if denominator else 0.0


def mcc(labels, predictions) -> float:
  """Matthews correlation coefficient of binary labels (CoLA)."""
  labels, predictions = np.asarray(labels) == 1, np.asarray(predictions) == 1
  tp = float(np.sum(labels & predictions))
  tn = float(np.sum(~labels & ~predictions))
  fp = float(np.sum(~labels & predictions))
  fn = float(np.sum(labels & ~predictions))
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(labels, predictions) -> float:
  x = np.asarray(labels, np.float64) - np.mean(labels)
  y = np.asarray(predictions, np.float64) - np.mean(predictions)
  denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
  return float(np.sum(x * y) / denominator) if denominator else 0.0


def _ranks(values) -> np.ndarray:
  """Ranks 1..n, ties sharing their average rank (SciPy's rankdata 'average')."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind='stable')
  sorted_values = values[order]
  # Each run of equal values gets the mean of the positions it spans.
  starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
  ends = np.r_[starts[1:], len(values)]
  ranks = np.empty(len(values))
  ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
  return ranks


def spearman(labels, predictions) -> float:
  return pearson(_ranks(labels), _ranks(predictions))


METRICS = {'accuracy': accuracy, 'f1': f1, 'mcc': mcc, 'pearson': pearson, 'spearman': spearman}


def compute(names, labels, predictions) -> dict[str, float]:
  return {name: METRICS[name](labels, predictions) for name in names}


def majority_label(labels) -> int:
  """The most frequent class id (the lowest of those tied)."""
  return int(np.argmax(np.bincount(np.asarray(labels))))


def majority_scores(names, labels) -> dict[str, float]:
  """The metrics of labelling every example with the majority class: what a classifier that
  learned nothing from the text scores."""
  return compute(names, labels, np.full(len(labels), majority_label(labels)))
