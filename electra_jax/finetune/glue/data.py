"""GLUE examples from a local GLUE folder (<dir>/<TASK>/{train,dev,test}.tsv) or from TFDS.

TSV files are UTF-8 with or without a byte-order mark (MRPC has one), with NO quote processing:
MRPC and QQP hold unmatched '"' that CSV quoting would merge with the following lines. TFDS's
glue/<config> is read without TensorFlow (data/sources.py), once prepared (`tfds build`).
"""

import csv
import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from electra_jax.data import sources
from electra_jax.common.errors import UsageError
from electra_jax.finetune.glue.tasks import Columns, Split, Task

STS_RANGE = (0.0, 5.0)  # STS-B similarity scores


class Examples(NamedTuple):
  text_a: list[str]
  text_b: list[str] | None     # None for single-sentence tasks
  labels: np.ndarray | None    # int32 class ids (into task.labels) or float32 scores; None: test
  index: list[str]             # what a submission file reports for each example

  def __len__(self):
    return len(self.text_a)


def parse_label(task: Task, value: Any, where: str) -> int | float:
  """A label as a class id or score; anything outside the task's set is the user's to fix."""
  if task.is_regression:
    try:
      score = float(value)
    except (TypeError, ValueError):
      score = None
    if score is None or not STS_RANGE[0] <= score <= STS_RANGE[1]:
      raise UsageError(f'{where}: {task.name} label {value!r} is not a similarity score in '
                       f'[{STS_RANGE[0]:g}, {STS_RANGE[1]:g}]')
    return score
  text = str(value).strip()
  if text not in task.labels:
    raise UsageError(f'{where}: {task.name} label {text!r} is not one of the task\'s labels '
                     f'{list(task.labels)}; is this the {task.name} file?')
  return task.labels.index(text)


def _examples(task: Task, found: list[tuple], pair: bool, labelled: bool,
              source: str) -> Examples:
  """Examples of (text A, text B, label, index) tuples, B and the label None where absent."""
  if not found:
    raise UsageError(f'{source} holds no examples')
  text_a, text_b, labels, ids = map(list, zip(*found))
  return Examples(text_a, text_b if pair else None,
                  np.asarray(labels, np.float32 if task.is_regression else np.int32)
                  if labelled else None, ids)


# ---- local GLUE folder ----------------------------------------------------------------------

def task_dir(data_dir: str, task: Task) -> str:
  """<data_dir>/<TASK>, also found under a spelling like sst2 or Sst-2."""
  if not os.path.isdir(data_dir):
    raise UsageError(f"GLUE data_dir '{data_dir}' is not a directory; point --config.data_dir at "
                     'the folder holding CoLA/, SST-2/, MRPC/, ...')
  wanted = task.name.lower().replace('-', '')
  for name in sorted(os.listdir(data_dir)):
    if name.lower().replace('-', '').replace('_', '') == wanted:
      return os.path.join(data_dir, name)
  raise UsageError(f"'{data_dir}' has no {task.name}/ folder; the GLUE layout is "
                   f'<data_dir>/{task.name}/{{train,dev,test}}.tsv')


def examples_from_rows(task: Task, rows: list[list[str]], columns: Columns,
                       path: str) -> Examples:
  """The examples of one TSV file's rows (its header, if the layout has one, first)."""
  # Column positions of (text_a, text_b, label, index); None where a field is absent.
  fields, first_line = (columns.text_a, columns.text_b, columns.label, columns.index), 1
  if columns.header:
    if not rows:
      raise UsageError(f"'{path}' is empty; a {task.name} file starts with its header line")
    header, rows, first_line = [name.strip() for name in rows[0]], rows[1:], 2
    missing = [name for name in fields if name is not None and name not in header]
    if missing:
      raise UsageError(f"'{path}' has no column {', '.join(repr(m) for m in missing)} (its "
                       f"header: {', '.join(header)}); a {task.name} file of this split has the "
                       f"columns {', '.join(str(f) for f in fields if f is not None)}")
    fields = tuple(None if name is None else header.index(name) for name in fields)
  a, b, label, index = fields
  needed = max(p for p in fields if p is not None) + 1
  found = []
  for line, row in enumerate(rows, start=first_line):
    if len(row) < needed:
      raise UsageError(f"'{path}' line {line} has {len(row)} tab-separated fields; {task.name} "
                       f'needs at least {needed} here')
    found.append((row[a], None if b is None else row[b],
                  None if label is None else parse_label(task, row[label], f"'{path}' line {line}"),
                  row[index].strip() if index is not None else str(line - first_line)))
  return _examples(task, found, b is not None, label is not None, f"'{path}'")


def read_local(data_dir: str, task: Task, file: str, labelled: bool,
               required: bool = True) -> Examples | None:
  """<data_dir>/<TASK>/<file>.tsv, or None for a file that is absent and not required."""
  path = os.path.join(task_dir(data_dir, task), f'{file}.tsv')
  if not os.path.isfile(path):
    if not required:
      return None
    raise UsageError(f"'{path}' does not exist; the GLUE layout is "
                     f'<data_dir>/{task.name}/{{train,dev,test}}.tsv')
  try:  # blank lines skipped, quotes taken literally
    with open(path, encoding='utf-8-sig', newline='') as f:
      rows = [row for row in csv.reader(f, delimiter='\t', quoting=csv.QUOTE_NONE) if row]
  except UnicodeDecodeError as e:
    raise UsageError(f"'{path}' is not UTF-8 ({e}); GLUE files are UTF-8") from None
  return examples_from_rows(task, rows, task.train_columns if labelled else task.test_columns,
                            path)


# ---- TFDS -----------------------------------------------------------------------------------

def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def examples_from_records(task: Task, records: Iterable[Mapping[str, Any]], labelled: bool,
                          source: str) -> Examples:
  """Examples of TFDS glue/<config> records (features as TFDS gives them: text as bytes)."""
  found = []
  for number, record in enumerate(records):
    missing = [f for f in (*task.tfds_text, 'label') if f not in record]
    if missing:
      raise UsageError(f'{source} has no feature {", ".join(missing)} (it has '
                       f'{", ".join(sorted(record))}); is it glue/{task.tfds_config}?')
    value = record['label']
    if labelled and not task.is_regression:
      value = int(value)
      if not 0 <= value < len(task.labels):
        raise UsageError(f'{source} record {number}: {task.name} class {value} is not in '
                         f'0..{len(task.labels) - 1}; labelled splits need labels')
      value = task.tfds_labels[value] if task.tfds_labels else str(value)
    found.append((_text(record[task.tfds_text[0]]),
                  _text(record[task.tfds_text[1]]) if task.is_pair else None,
                  parse_label(task, value, f'{source} record {number}') if labelled else None,
                  str(int(record['idx'])) if 'idx' in record else str(number)))
  return _examples(task, found, task.is_pair, labelled, source)


def read_tfds(tfds_name: str, data_dir: str, task: Task, split: str, labelled: bool,
              required: bool = True) -> Examples | None:
  name = f'{tfds_name}/{task.tfds_config}'
  try:
    if not required and split not in sources.tfds_builder(name, data_dir).info.splits:
      return None
    return examples_from_records(task, sources.tfds_records(name, split, data_dir), labelled,
                                 f"TFDS {name} split '{split}'")
  except sources.NotPrepared as e:  # in fine-tuning's own fields, with its local folders
    raise sources.NotPrepared(
        e.name, e.data_dir, '--config.tfds_data_dir',
        f'pass --config.data_dir=DIR, a local GLUE folder ({task.name}/train.tsv, dev.tsv, '
        'test.tsv), or ') from None


# ---- either source --------------------------------------------------------------------------

class GlueData(NamedTuple):
  train: Examples
  dev: dict[str, Examples]    # by Split.name (MNLI-m, MNLI-mm for MNLI)
  test: dict[str, Examples]   # by submission name; absent splits are left out


def load(task: Task, data_dir: str, tfds_name: str, tfds_data_dir: str,
         with_test: bool = True) -> GlueData:
  """Train, dev and (where present) test examples of `task` from the configured source."""
  def read(split: Split, labelled: bool, required: bool = True) -> Examples | None:
    if data_dir:
      return read_local(data_dir, task, split.file, labelled, required)
    return read_tfds(tfds_name, tfds_data_dir, task, split.tfds_split, labelled, required)

  train = read(Split('train', 'train', 'train'), True)
  dev = {split.name: read(split, True) for split in task.dev}
  test = {split.name: read(split, False, False) for split in task.test} if with_test else {}
  return GlueData(train, dev, {k: v for k, v in test.items() if v is not None})
