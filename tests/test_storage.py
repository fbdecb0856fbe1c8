"""A run directory at a gs:// URI (a pod slice's workdir), on a stand-in for Cloud Storage.

Real GCS needs the internet and credentials, which the tests do not have. The stand-in is an
fsspec file system registered for the gs:// protocol that keeps its objects under a temporary
directory: etils.epath reaches it exactly as it reaches gcsfs. Like an object store it creates
no directories and refuses append mode. Orbax is not run against it: Orbax writes arrays
through TensorStore's own GCS driver, which fsspec does not serve, so only the checkpoint path
that make_manager hands Orbax is checked here.
"""

import json
import os
import sys

from etils.epath import backend as epath_backend
from fsspec.implementations.local import LocalFileSystem
import pytest
from tensorboardX import record_writer

from conftest import WIKITEXT, load_config
from electra_jax.training import checkpoint, inputs, report
from electra_jax.common import cli, config as config_lib, storage
from electra_jax.training import train
from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError
from electra_jax.hf import exporting

RUN = 'gs://bucket/runs/tiny'


def fake_gcs(root):
  """An fsspec file system class whose gs://BUCKET/KEY objects are files root/BUCKET/KEY."""

  class FakeGCS(LocalFileSystem):
    protocol = ('gs', 'gcs')

    def __init__(self, **kwargs):
      kwargs.pop('finalize_on_close', None)  # what epath passes gcsfs
      super().__init__(auto_mkdir=True, **kwargs)  # objects need no parent directories

    @classmethod
    def _strip_protocol(cls, path):
      path = str(path)
      for prefix in ('gs://', 'gcs://'):
        if path.startswith(prefix):
          return os.path.join(root, path[len(prefix):]).rstrip('/')
      return super()._strip_protocol(path)

    def _open(self, path, mode='rb', **kwargs):
      if 'a' in mode:
        raise OSError('an object store cannot append to an object')
      return super()._open(path, mode, **kwargs)

  return FakeGCS


class FakeEventWriterFactory:
  """tensorboardX's gs:// writer factory, writing the event file under `root` instead."""

  def __init__(self, root):
    self.root = root

  def open(self, path):
    local = os.path.join(self.root, path[len('gs://'):])
    os.makedirs(os.path.dirname(local), exist_ok=True)
    return open(local, 'wb')  # pylint: disable=consider-using-with

  def directory_check(self, path):
    del path  # like GCS's: an object store needs no directory


@pytest.fixture
def bucket(tmp_path, monkeypatch):
  """The stand-in GCS for gs:// paths; returns the local directory that holds its objects."""
  root = tmp_path / 'gcs'
  root.mkdir()
  gcs = fake_gcs(str(root))
  monkeypatch.setenv('EPATH_USE_TF', '0')  # epath would take tf.io.gfile where TF is installed
  registry = sys.modules['fsspec.registry']._registry  # pylint: disable=protected-access
  monkeypatch.setitem(registry, 'gs', gcs)
  monkeypatch.setitem(registry, 'gcs', gcs)
  monkeypatch.setitem(record_writer.REGISTERED_FACTORIES, 'gs', FakeEventWriterFactory(str(root)))
  monkeypatch.setitem(storage.SCHEMES, 'gs', ((), ''))  # gcsfs and google-cloud-storage
  epath_backend.fsspec_backend._get_filesystem.cache_clear()  # pylint: disable=protected-access
  yield root
  epath_backend.fsspec_backend._get_filesystem.cache_clear()  # pylint: disable=protected-access


def run_dir(root):
  return root / RUN[len('gs://'):]


def test_config_json_round_trip(bucket):
  config = load_config('tiny')
  config_lib.save_config(config, RUN)
  assert sorted(os.listdir(run_dir(bucket))) == ['config.json']  # written whole, no .tmp
  config_lib.check_workdir_config(config, RUN)
  assert exporting.load_run_config(RUN).model.to_dict() == config.model.to_dict()
  config.model.hidden_size *= 2
  with pytest.raises(UsageError, match='holds a run of a different model'):
    config_lib.check_workdir_config(config, RUN)


def test_metrics_survive_a_restart_and_a_trim_without_append(bucket):
  def lines():
    return [json.loads(line)['step'] for line in
            (run_dir(bucket) / 'metrics.jsonl').read_text().splitlines()]

  writer = report.MetricsWriter(RUN)
  writer.write(10, {'loss': 2.0})
  writer.write(20, {'loss': 1.5})
  writer.close()
  assert lines() == [10, 20]
  report.trim_metrics_file(RUN, 20)  # nothing to drop
  writer = report.MetricsWriter(RUN)  # the restarted run
  writer.write(30, {'loss': 1.0})
  writer.close()
  assert lines() == [10, 20, 30]
  report.trim_metrics_file(RUN, 10)
  assert lines() == [10]
  assert [n for n in os.listdir(run_dir(bucket)) if n.startswith('events.out.tfevents')]


def test_checkpoints_go_to_the_uri_itself():
  assert checkpoint.checkpoint_dir(RUN) == RUN + '/checkpoints'
  assert checkpoint.checkpoint_dir(RUN + '/') == RUN + '/checkpoints'
  assert checkpoint.checkpoint_dir('runs/x') == os.path.join(os.getcwd(), 'runs/x/checkpoints')


def test_local_dir_defaults():
  config = load_config('tiny')
  home_cache = os.path.expanduser('~/.cache/electra_jax')
  assert inputs.local_dir(config, 'runs/x') == 'runs/x/data'
  remote = inputs.local_dir(config, RUN)
  assert os.path.dirname(remote) == home_cache
  assert inputs.local_dir(config, RUN + '/') == remote
  assert inputs.local_dir(config, 'gs://bucket/runs/other') != remote
  config.data.local_dir = '~/prepared'
  assert inputs.local_dir(config, RUN) == os.path.expanduser('~/prepared')
  config.data.local_dir = 'gs://bucket/data'
  with pytest.raises(UsageError, match='data.local_dir'):
    inputs.local_dir(config, RUN)


def test_vocab_goes_to_the_run_and_data_stays_local(bucket, tmp_path, wikitext):
  del wikitext
  config = load_config('tiny')
  config.model.vocab_size, config.max_seq_length = 300, 64
  config.data.train_files = str(WIKITEXT / 'wiki.train.PARTIAL-first-1019-lines.raw')
  config.data.vocab_sample_sentences = 500
  config.data.local_dir = str(tmp_path / 'host0')
  vocab = inputs.setup_vocab(config, RUN)
  assert sorted(os.listdir(run_dir(bucket))) == ['vocab.model', 'vocab.vocab']
  assert vocab.model_path == str(tmp_path / 'host0' / 'vocab.model')
  assert (run_dir(bucket) / 'vocab.model').read_bytes() == \
      (tmp_path / 'host0' / 'vocab.model').read_bytes()

  examples = inputs.load_examples(config, RUN, vocab, 'train')
  assert examples.directory == str(tmp_path / 'host0' / 'train')
  assert (tmp_path / 'host0' / 'train' / 'manifest.json').exists()
  assert not (run_dir(bucket) / 'data').exists()

  # Another host (its own local directory) takes the run's vocabulary instead of training one.
  config.data.local_dir = str(tmp_path / 'host1')
  other = inputs.setup_vocab(config, RUN)
  assert other.model_path == str(tmp_path / 'host1' / 'vocab.model')
  assert vocab_lib.vocab_fingerprint(other) == vocab_lib.vocab_fingerprint(vocab)
  exported = inputs.load_run_vocab(RUN, str(tmp_path / 'export'))
  assert vocab_lib.vocab_fingerprint(exported) == vocab_lib.vocab_fingerprint(vocab)


def test_a_missing_file_system_package_is_one_error_line(monkeypatch):
  modules, install = storage.SCHEMES['gs']
  if all(map(storage._installed, modules)):  # pylint: disable=protected-access
    monkeypatch.setitem(storage.SCHEMES, 'gs', (('gcsfs_not_here',), install))  # as if absent
  config = load_config('tiny')
  config.data.train_files = 'corpus.txt'
  with pytest.raises(SystemExit) as exit_info:
    cli.run(train.train_and_evaluate, config, RUN)
  message = str(exit_info.value)
  assert message.startswith('electra_jax: error: ') and '\n' not in message
  assert "pip install 'electra_jax[gcs]'" in message
  with pytest.raises(UsageError, match='ftp:// is not supported'):
    storage.check_uri('ftp://host/run', '--workdir')
