"""The run's vocabulary and examples as the trainer sets them up in a workdir."""

import shutil

import pytest

from conftest import load_config
from electra_jax.training import inputs
from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError


@pytest.fixture(scope='module')
def config(wikitext):
  c = load_config('tiny')
  c.model.vocab_size = 600
  c.max_seq_length = 64
  c.data.train_files = str(wikitext / 'wiki.valid.raw')
  return c


@pytest.fixture(scope='module')
def trained_workdir(config, tmp_path_factory):
  workdir = tmp_path_factory.mktemp('run')
  vocab = inputs.setup_vocab(config, str(workdir))
  return workdir, vocab


def test_vocab_is_trained_once_then_reused(config, trained_workdir):
  workdir, vocab = trained_workdir
  assert vocab.size == 600 and (workdir / 'vocab.model').exists()
  again = inputs.setup_vocab(config, str(workdir))
  assert vocab_lib.vocab_fingerprint(again) == vocab_lib.vocab_fingerprint(vocab)


def test_given_vocab_is_copied_into_a_new_run(config, trained_workdir, tmp_path):
  source, vocab = trained_workdir
  given = tmp_path / 'mine.model'
  shutil.copy(source / 'vocab.model', given)
  c = config.copy_and_resolve_references()
  c.data.vocab_model = str(given)
  run = tmp_path / 'run'
  run.mkdir()
  copied = inputs.setup_vocab(c, str(run))
  assert (run / 'vocab.model').read_bytes() == given.read_bytes()
  assert vocab_lib.vocab_fingerprint(copied) == vocab_lib.vocab_fingerprint(vocab)


def test_vocab_size_mismatch_names_the_fix(config, trained_workdir):
  workdir, _ = trained_workdir
  c = config.copy_and_resolve_references()
  c.model.vocab_size = 700
  with pytest.raises(UsageError, match='--config.model.vocab_size=600'):
    inputs.setup_vocab(c, str(workdir))


def test_a_different_vocab_for_an_existing_run_is_refused(config, trained_workdir, tmp_path):
  workdir, _ = trained_workdir
  other = vocab_lib.train_vocab([config.data.train_files], 600, str(tmp_path / 'other'), seed=1,
                                max_sentences=500)
  c = config.copy_and_resolve_references()
  c.data.vocab_model = other.model_path
  before = (workdir / 'vocab.model').read_bytes()
  with pytest.raises(UsageError, match='differs from the vocabulary this run was started with'):
    inputs.setup_vocab(c, str(workdir))
  assert (workdir / 'vocab.model').read_bytes() == before


def test_examples_are_prepared_into_the_workdir(config, trained_workdir):
  workdir, vocab = trained_workdir
  examples = inputs.load_examples(config, str(workdir), vocab, 'train')
  assert examples.gather([0])['input_ids'].shape == (1, 64)
  assert (workdir / 'data' / 'train' / 'manifest.json').exists()
  assert inputs.load_examples(config, str(workdir), vocab, 'eval') is None
