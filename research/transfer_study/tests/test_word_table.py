"""word_table.py: a table's nonzero rows replace the word table of a random or pretrained start,
its zero rows keep the start's own, nothing else moves; one clear error for a file that does not
fit, from the command as from the function."""

import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import REPO, error_line, load_config
from electra_jax.common.errors import UsageError
from electra_jax.finetune import init
from electra_jax.finetune.glue import model as glue_model
from research.transfer_study import word_table

TINY = dict(embedding_size=16, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
            max_position_embeddings=64)


def random_init_config(tmp_path):
  """configs/finetune/glue.py from random init of a tiny network, on a vocabulary of 40 pieces."""
  pieces = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', *(f'w{i}' for i in range(35))]
  (tmp_path / 'vocab.txt').write_text('\n'.join(pieces) + '\n')
  config = load_config('finetune/glue')
  config.update(task='SST-2', vocab=str(tmp_path / 'vocab.txt'), max_seq_length=32)
  config.model.update(vocab_size=len(pieces), **TINY)
  return config


def test_the_rows_it_gives_replace_the_starts_and_nothing_else(tmp_path):
  config = random_init_config(tmp_path)
  random_start = init.load_start(config)
  model = glue_model.Classifier(random_start.model, 2)
  drawn = init.initial_params(model, random_start, 7, 32)  # a "pretrained" encoder: another draw
  pretrained = random_start._replace(params={k: drawn[k] for k in init.ENCODER})
  shape = (config.model.vocab_size, config.model.embedding_size)
  table = np.random.default_rng(0).normal(0, 0.02, shape).astype(np.float32)
  table[:5] = 0
  table[9] = 0
  path = tmp_path / 'table.npy'
  np.save(path, table)
  own = {base: init.initial_params(model, start, 5, 32)
         for base, start in (('random', random_start), ('pretrained', pretrained))}
  library = (init.load_start, init.initial_params)
  with word_table.applied(str(path)):
    assert init.load_start(config).description == (
        f'random initialisation, word table from {path}')
    given = {base: init.initial_params(model, start, 5, 32)
             for base, start in (('random', random_start), ('pretrained', pretrained))}
  assert (init.load_start, init.initial_params) == library  # as they were, on leaving
  for base in ('random', 'pretrained'):
    words = given[base]['embeddings']['word_embeddings']['embedding']
    kept = own[base]['embeddings']['word_embeddings']['embedding']
    np.testing.assert_array_equal(words[5:9], table[5:9])
    np.testing.assert_array_equal(words[10:], table[10:])
    np.testing.assert_array_equal(words[:5], kept[:5])
    np.testing.assert_array_equal(words[9], kept[9])
    rest = lambda p: [leaf for path_, leaf in jax.tree_util.tree_flatten_with_path(p)[0]
                      if 'word_embeddings' not in str(path_)]
    for ours, theirs in zip(rest(given[base]), rest(own[base])):
      np.testing.assert_array_equal(ours, theirs)


def test_a_table_that_does_not_fit_is_one_clear_error(tmp_path):
  model = random_init_config(tmp_path).model
  good = np.zeros((model.vocab_size, model.embedding_size), np.float32)
  np.save(tmp_path / 'narrow.npy', good[:, :-1])
  with pytest.raises(UsageError, match=r'shape \[40, 15\], but this model.s word table is '
                                       r'float \[40, 16\]'):
    word_table.load_table(str(tmp_path / 'narrow.npy'), model)
  good[7, 3] = np.nan
  np.save(tmp_path / 'nan.npy', good)
  with pytest.raises(UsageError, match='NaN or infinite'):
    word_table.load_table(str(tmp_path / 'nan.npy'), model)
  with pytest.raises(UsageError, match='cannot be read as a .npy array'):
    word_table.load_table(str(tmp_path / 'missing.npy'), model)


def test_the_command_refuses_a_table_of_another_shape_before_it_reads_any_data(tmp_path):
  """Through `python -m electra_jax.finetune`'s own flags: the wrapper reaches the start."""
  config = random_init_config(tmp_path)
  np.save(tmp_path / 'table.npy', np.zeros((config.model.vocab_size, 8), np.float32))
  model_flags = [f'--config.model.{k}={v}' for k, v in config.model.items()
                 if k in (*TINY, 'vocab_size')]
  result = subprocess.run(
      [sys.executable, '-m', 'research.transfer_study.word_table',
       f'--table={tmp_path / "table.npy"}', f'--config={REPO / "configs/finetune/glue.py"}',
       '--config.task=SST-2', '--config.max_seq_length=32', f'--config.vocab={config.vocab}',
       *model_flags,
       f'--config.data_dir={tmp_path / "no-glue"}', f'--workdir={tmp_path / "wd"}'],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert "but this model's word table is float [40, 16]" in error_line(result)
