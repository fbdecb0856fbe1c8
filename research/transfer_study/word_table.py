"""Fine-tuning with a word table made elsewhere: what word-level knowledge alone is worth to a task.

python -m research.transfer_study.word_table --table=OUT/table.npy \
    --config=configs/finetune/glue.py --config.task=SST-2 --config.init_from=RUN --workdir=WD

`python -m electra_jax.finetune` with every flag but --table, its start's word table (random or
pretrained) replaced by the [vocab_size, embedding_size] array in the .npy file --table, except
the table's all-zero rows, which keep the start's own. count_vectors.py writes such a table from
the pretraining corpus's co-occurrence counts (zero rows for the special pieces and for pieces
the corpus never holds), and shuffled_table.npy, the same rows dealt to other pieces, as the
control. The rows replace the drawn ones after config.reinit's, and results.json's `init` names
the file. (Before the study moved to its wing this was finetune's `--config.word_table`.)
"""

import contextlib
from typing import Any

import numpy as np

from electra_jax.common.errors import UsageError
from electra_jax.finetune import init

USAGE = ('python -m research.transfer_study.word_table --table=TABLE.npy '
         '--config=configs/finetune/glue.py --config.task=TASK --workdir=DIR [--config.x=y ...]')


def load_table(path: str, model) -> np.ndarray:
  """The float32 table in `path`, checked against the start's `model` section."""
  try:
    table = np.load(path, allow_pickle=False)
  except (OSError, ValueError) as e:
    raise UsageError(f'--table={path!r} cannot be read as a .npy array ({e}); pass a file '
                     "np.save wrote, such as count_vectors.py's table.npy") from e
  wanted = (model.vocab_size, model.embedding_size)
  if table.shape != wanted or not np.issubdtype(table.dtype, np.floating):
    raise UsageError(f'--table={path!r} holds a {table.dtype} array of shape '
                     f"{list(table.shape)}, but this model's word table is float {list(wanted)} "
                     '(vocab_size, embedding_size); make the table from the vocabulary and '
                     'embedding size of the start you fine-tune')
  if not np.isfinite(table).all():
    raise UsageError(f'--table={path!r} holds NaN or infinite values; make it again')
  return table.astype(np.float32)


def with_rows(params: dict[str, Any], table: np.ndarray) -> dict[str, Any]:
  """`params` with the word table's rows that `table` gives (its nonzero ones) replaced."""
  words = params['embeddings']['word_embeddings']
  given = np.any(table != 0, axis=1, keepdims=True)
  embedding = np.where(given, table, np.asarray(words['embedding']))
  return {**params, 'embeddings': {**params['embeddings'],
                                   'word_embeddings': {**words, 'embedding': embedding}}}


@contextlib.contextmanager
def applied(path: str):
  """Within it, fine-tuning's start carries the table in `path`: init.load_start checks it against
  the start and names it, and init.initial_params puts its rows in every seed's parameters.

  The library looks both up on `init` at each call, so wrapping them there reaches every family
  without a field of its own in the product's configs."""
  load_start, initial_params = init.load_start, init.initial_params
  table = None

  def start_with_table(config):
    nonlocal table
    start = load_start(config)
    table = load_table(path, start.model)
    return start._replace(description=f'{start.description}, word table from {path}')

  def params_with_table(model, start, seed, max_seq_length):
    if table is None:
      raise RuntimeError('init.initial_params ran before init.load_start: the table has no start')
    return with_rows(initial_params(model, start, seed, max_seq_length), table)

  init.load_start, init.initial_params = start_with_table, params_with_table
  try:
    yield
  finally:
    init.load_start, init.initial_params = load_start, initial_params


def main():
  """The command: finetune's flags, and --table."""
  # Imported here: finetune's command defines its absl flags (--config, --workdir) on import,
  # which must not happen where this module is only imported (a test process holds others).
  # pylint: disable=g-import-not-at-top
  from absl import app, flags
  from electra_jax.common import cli
  from electra_jax.finetune import __main__ as finetune_command
  table = flags.DEFINE_string('table', None, 'A .npy [vocab_size, embedding_size] word table '
                              "(count_vectors.py's table.npy); its all-zero rows keep the "
                              "start's.")
  flags.mark_flags_as_required(['table'])

  def run(argv):
    with applied(table.value):
      finetune_command.main(argv)
  app.run(run, flags_parser=cli.flags_parser(USAGE))


if __name__ == '__main__':
  main()
