"""A new user's mistakes, each made for real with a command: every one ends in one
`electra_jax: error:` line that names the cause and the fix, and writes nothing."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, SHARED_DATA, WIKITEXT, error_line
from electra_jax.common.errors import UsageError


def env(**changes):
  environment = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1', **changes}
  return {k: v for k, v in environment.items() if v is not None}


def command(*args, cwd=REPO, timeout=300, **environment):
  return subprocess.run([sys.executable, *args], env=env(**environment), cwd=cwd,
                        capture_output=True, text=True, timeout=timeout)


TINY = f'--config={REPO / "configs" / "tiny.py"}'
TRAIN_FILES = f'--config.data.train_files={WIKITEXT / "wiki.valid.raw"}'


@pytest.fixture(scope='module')
def inputs(tmp_path_factory, wikitext):
  """What the commands read, real so that each gets as far as it would: a transformers directory
  (a random tiny ELECTRA as export writes it) and a run imported from it (a checkpoint at 0)."""
  # pylint: disable=g-import-not-at-top
  import jax
  from electra_jax.common import config as config_lib
  from electra_jax.data import vocab as vocab_lib
  from electra_jax.hf import exporting
  from electra_jax.model.networks import Electra, init_params
  root = tmp_path_factory.mktemp('inputs')
  model = config_lib.default_config().model
  model.update(vocab_size=1000, embedding_size=32, hidden_size=64, num_layers=1, num_heads=2,
               intermediate_size=128, max_position_embeddings=128)
  vocab = vocab_lib.train_vocab([str(wikitext / 'wiki.valid.raw')], 1000, str(root / 'vocab'))
  params = jax.device_get(init_params(Electra(model), jax.random.PRNGKey(0), 8))
  exporting.export_params(params, model, vocab, str(root / 'hf'))
  imported = command('-m', 'electra_jax.import_hf', TINY, f'--hf_dir={root / "hf"}',
                     f'--workdir={root / "run"}')
  assert imported.returncode == 0, imported.stderr[-3000:]
  return root


# Every command that writes a directory, with that directory's flag last.
WRITERS = {
    'main': lambda inputs: ['-m', 'electra_jax.main', TINY, TRAIN_FILES, '--workdir'],
    'prepare': lambda inputs: ['-m', 'electra_jax.prepare', TINY, TRAIN_FILES, '--out'],
    'export': lambda inputs: ['-m', 'electra_jax.export', f'--workdir={inputs / "run"}', '--out'],
    'import_hf': lambda inputs: ['-m', 'electra_jax.import_hf', TINY,
                                 f'--hf_dir={inputs / "hf"}', '--workdir'],
    'finetune': lambda inputs: [
        '-m', 'electra_jax.finetune', f'--config={REPO / "configs" / "finetune" / "glue.py"}',
        '--config.task=SST-2', f'--config.data_dir={SHARED_DATA / "glue"}',
        f'--config.init_from={inputs / "run"}', '--workdir'],
}


@pytest.mark.parametrize('name', WRITERS)
def test_a_directory_flag_that_is_a_file_or_cannot_be_written_is_refused_in_one_line(
    name, inputs, tmp_path):
  file = tmp_path / 'a_file'
  file.write_text('not a directory\n')
  *args, flag = WRITERS[name](inputs)
  for path, message in (
      (file, re.escape(f'{flag}={file} is a file, not a directory; pass a directory (one that '
                       'does not exist yet is made)')),
      (file / 'run', re.escape(f'{flag}={file}/run lies under {file}, which is a file, not a '
                               'directory; pass a directory (one that does not exist yet is '
                               'made)')),
      # The reason is the kernel's: no such file for root, permission denied for others.
      ('/proc/electra_jax_run', f'{flag}=/proc/electra_jax_run cannot be written: making a '
                                r'directory in /proc fails \([^)]+\); pass a directory you can '
                                'write to')):
    result = command(*args, f'{flag}={path}')
    assert re.fullmatch(f'electra_jax: error: {message}', error_line(result)), name
  assert file.read_text() == 'not a directory\n' and sorted(os.listdir(tmp_path)) == ['a_file']


@pytest.mark.parametrize('steps', [0, -5])
def test_a_run_of_no_steps_is_refused_rather_than_done(steps, tmp_path):
  """num_train_steps 0 or -5 exited 0 having trained nothing, as if the run were done."""
  workdir = tmp_path / 'run'
  result = command('-m', 'electra_jax.main', TINY, TRAIN_FILES, f'--workdir={workdir}',
                   f'--config.num_train_steps={steps}')
  assert error_line(result) == (f'electra_jax: error: config.num_train_steps={steps}: use a value '
                                'in [1, inf)')
  assert not workdir.exists()


def test_every_count_and_size_must_be_positive_and_is_refused_before_other_checks():
  """Before the checks that divide by them (hidden_size % num_heads), each in one line."""
  # pylint: disable=g-import-not-at-top
  from electra_jax.common import config as config_lib
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  counts = {name: field.allowed for name, field in config_lib.FIELDS.items()
            if field.allowed in ('[1, inf)', '(0, inf)', '[0, inf)')}
  assert {'batch_size', 'model.hidden_size', 'model.generator_layers', 'eval_every'} <= set(counts)
  for name, interval in counts.items():
    low = 0 if interval.startswith('[0') else 1
    edge = config.copy_and_resolve_references()
    edge.update_from_flattened_dict({name: low if interval[0] == '[' else 0.5})
    config_lib.check_allowed(edge, counts)  # the edge itself is allowed
    for value in (low - 1, -5) if interval[0] == '[' else (0.0, -5.0):
      refused = config.copy_and_resolve_references()
      refused.update_from_flattened_dict({name: value})
      with pytest.raises(UsageError, match=rf'^config\.{name}={value}(\.0)?: use a value in '
                                           rf'{re.escape(interval)}$'):
        config_lib.validate(refused, 1)


def test_fine_tuning_refuses_a_count_of_zero_in_one_line(inputs, tmp_path):
  workdir = tmp_path / 'finetuned'
  result = command('-m', 'electra_jax.finetune',
                   f'--config={REPO / "configs" / "finetune" / "glue.py"}', '--config.task=MRPC',
                   f'--config.data_dir={SHARED_DATA / "glue"}',
                   f'--config.init_from={inputs / "run"}', '--config.log_every=0',
                   f'--workdir={workdir}')
  assert error_line(result) == 'electra_jax: error: config.log_every=0: use a value in [1, inf)'
  assert not workdir.exists()


def test_a_relative_config_path_outside_the_repo_names_where_it_looked_and_the_configs(tmp_path):
  result = command('-m', 'electra_jax.main', '--config=configs/tiny.py',
                   f'--workdir={tmp_path / "run"}', cwd=tmp_path)
  assert error_line(result) == (
      f"electra_jax: error: config file 'configs/tiny.py' does not exist in {tmp_path} (the "
      'current directory, where a relative path starts); the packaged configs are in '
      f'{REPO / "configs"}: pass --config={REPO / "configs" / "tiny.py"}')
  # pylint: disable=g-import-not-at-top
  from electra_jax.common import config as config_lib
  assert config_lib.missing_config_file('/nowhere/mine.py').endswith(
      f'the packaged configs are in {REPO / "configs"}: e.g. '
      f'--config={REPO / "configs" / "tiny.py"}')
  # Installed without the repository (a wheel), there is no configs/ to point at.
  assert config_lib.missing_config_file('/nowhere/tiny.py', str(tmp_path / 'none')) == (
      "config file '/nowhere/tiny.py' does not exist; pass the path of a config file, e.g. the "
      "repository's configs/tiny.py")


def test_a_folder_given_as_train_files_gets_a_glob_that_matches_its_files(tmp_path):
  result = command('-m', 'electra_jax.main', TINY, f'--config.data.train_files={WIKITEXT}',
                   f'--workdir={tmp_path / "run"}')
  assert error_line(result) == (
      f"electra_jax: error: '{WIKITEXT}' (data.train_files) matches only directories; name the "
      f"files, e.g. '{WIKITEXT}/*.raw' (3 files)")
  # A manifest beside folders of text (WikiExtractor's AA/, AB/) loses to the text.
  from electra_jax.data import text  # pylint: disable=g-import-not-at-top
  for folder in ('AA', 'AB'):
    (tmp_path / 'wiki' / folder).mkdir(parents=True)
    for i in range(2):
      (tmp_path / 'wiki' / folder / f'wiki_0{i}').write_text('<doc>\nText.\n</doc>\n')
  (tmp_path / 'wiki' / 'MANIFEST.tsv').write_text('a\tb\n')
  with pytest.raises(UsageError, match=re.escape(f"e.g. '{tmp_path}/wiki/*/*' (4 files)")):
    text.resolve_files(str(tmp_path / 'wiki'))
  (tmp_path / 'empty').mkdir()
  with pytest.raises(UsageError, match='they hold no files, nor do their subdirectories'):
    text.resolve_files(str(tmp_path / 'empty'))


@pytest.mark.parametrize('name', ['main', 'prepare'])
def test_an_eval_glob_that_matches_nothing_is_refused_before_any_work(name, tmp_path):
  """main trained the vocabulary and prepared the training split before it looked."""
  *args, flag = WRITERS[name](None)
  result = command(*args, f'{flag}={tmp_path / "run"}',
                   f'--config.data.eval_files={tmp_path}/held_out/*.txt')
  assert result.stderr.strip() == error_line(result) == (
      f"electra_jax: error: no file matches '{tmp_path}/held_out/*.txt' (data.eval_files); "
      'check the path or glob')
  assert os.listdir(tmp_path) == []


def test_an_unknown_slice_size_is_named_with_the_known_ones_before_libtpu_is_asked():
  """v4-9 was read as v4-8 (9 // 2 chips) and compiled for it, or, without libtpu, refused as
  needing libtpu."""
  result = command('-m', 'electra_jax.compile', TINY, '--topology=v4-9', timeout=120)
  assert error_line(result) == (
      "electra_jax: error: --topology='v4-9' is no v4 slice; known v4 sizes are v4-8, v4-16, "
      'v4-32, v4-64, v4-128, v4-256')
  from electra_jax.training import aot  # pylint: disable=g-import-not-at-top
  for name in ('v5p-7', 'v5litepod-3', 'v6e-512'):
    with pytest.raises(UsageError, match=f"--topology='{name}' is no .* slice; known"):
      aot.slice_devices(name)


def test_fine_tuning_without_data_dir_names_its_own_fields_for_the_data(inputs, tmp_path):
  """The hint was pretraining's data.tfds_data_dir, a field fine-tuning refuses."""
  empty = tmp_path / 'tfds'
  empty.mkdir()
  result = command('-m', 'electra_jax.finetune',
                   f'--config={REPO / "configs" / "finetune" / "glue.py"}', '--config.task=MRPC',
                   f'--config.init_from={inputs / "run"}', f'--config.tfds_data_dir={empty}',
                   f'--workdir={tmp_path / "finetuned"}')
  assert error_line(result) == (
      f"electra_jax: error: TFDS dataset 'glue/mrpc' is not prepared in data_dir '{empty}'; pass "
      '--config.data_dir=DIR, a local GLUE folder (MRPC/train.tsv, dev.tsv, test.tsv), or build '
      'it there with `tfds build glue/mrpc --data_dir=DIR --file_format=array_record`, or point '
      '--config.tfds_data_dir at a copy (e.g. gs://tfds-data/datasets for the prebuilt catalog)')


def test_a_cpu_host_runs_the_commands_without_probing_for_a_tpu(inputs, tmp_path):
  """With JAX_PLATFORMS unset, JAX tried the TPU first, and its failure (`Unable to initialize
  backend 'tpu'`, libtpu's host-bounds and lockfile errors) opened every command's output."""
  from electra_jax.common import cli  # pylint: disable=g-import-not-at-top
  if cli.found(cli.ACCELERATOR_FILES):
    pytest.skip('this host has an accelerator: JAX is left to find it')
  refused = command('-m', 'electra_jax.main', TINY, TRAIN_FILES, f'--workdir={tmp_path / "run"}',
                    '--config.objective=nope', JAX_PLATFORMS=None)
  assert refused.stderr.strip() == error_line(refused)  # that line alone
  exported = command('-m', 'electra_jax.export', f'--workdir={inputs / "run"}',
                     f'--out={tmp_path / "exported"}', JAX_PLATFORMS=None)  # runs on the CPU
  assert exported.returncode == 0, exported.stderr[-3000:]
  assert 'tpu' not in exported.stderr.lower(), exported.stderr[-3000:]
  # The user's choice stands, an empty one (JAX picks) included.
  chosen = 'from electra_jax.common import cli; cli.keep_jax_off_absent_accelerators(); ' \
           'import jax; print(repr(jax.config.jax_platforms))'
  for platforms, seen in ((None, "'cpu'"), ('', "''"), ('cpu', "'cpu'")):
    assert command('-c', chosen, JAX_PLATFORMS=platforms).stdout.strip() == seen, platforms


def finetune_from(init_from, workdir, *flags):
  return command('-m', 'electra_jax.finetune',
                 f'--config={REPO / "configs" / "finetune" / "glue.py"}', '--config.task=MRPC',
                 f'--config.data_dir={SHARED_DATA / "glue"}', f'--config.init_from={init_from}',
                 f'--workdir={workdir}', *flags)


def test_a_vocabulary_beside_a_pretraining_run_is_refused_not_ignored(inputs, tmp_path):
  workdir = tmp_path / 'finetuned'
  result = finetune_from(inputs / 'run', workdir, f'--config.vocab={inputs / "vocab.model"}')
  assert error_line(result) == (
      f"electra_jax: error: config.vocab='{inputs / 'vocab.model'}' with config.init_from the "
      f"pretraining run '{inputs / 'run'}': fine-tuning reads the vocabulary the run was trained "
      'with, so this one would be ignored; drop --config.vocab')
  assert not workdir.exists()


def test_a_checkpoint_without_its_metadata_is_named_without_orbax_noise(inputs, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  run = tmp_path / 'run'
  shutil.copytree(inputs / 'run', run)
  (run / 'checkpoints' / '0' / 'default' / '_METADATA').unlink()
  result = finetune_from(run, tmp_path / 'finetuned')
  metadata = run / 'checkpoints' / '0' / 'default' / '_METADATA'
  assert error_line(result) == (
      f'electra_jax: error: checkpoint {run / "checkpoints"}/0 cannot be read: {metadata} is '
      'missing (an interrupted write or a partial copy)')
  assert 'could not be restored' not in result.stderr and 'TypeError' not in result.stderr
