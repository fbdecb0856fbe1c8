"""GLUE's metrics, in NumPy: Matthews correlation, F1, accuracy, Pearson and Spearman.

Definitions as scikit-learn and SciPy compute them (the tests compare), so scores match those
that GLUE's own scripts report. Degenerate inputs give 0.0 (MCC, F1) where the formula divides
by zero, as scikit-learn does, rather than NaN.
"""

import numpy as np


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
