"""Every objective, embedding_sharing mode and generator set-up through the trainer, 30 steps each.

Each switch runs `train.train_and_evaluate` (what `python -m electra_jax.main` runs once its
flags are parsed) for 30 steps of a one-layer `tiny` on real text, with evaluation and Orbax
checkpoints. It is preempted at step 18 (the trainer's own preemption path: save, stop) and run
again to 30. It must log its own metrics, compile its step once (the trainer checks at every log
line and raises otherwise), continue from its checkpoint, export what transformers can load, and
give GLUE fine-tuning its discriminator to start from.
One process and one prepared corpus serve them all, and the resumed run reads its compiled
programs from JAX's persistent cache (conftest.py), so a switch costs about one compilation and
its steps.
"""

import json

import numpy as np
import pytest

from conftest import load_config, prepare_wikitext, set_fields
from electra_jax.common import cli
from electra_jax.common.errors import UsageError
from electra_jax.training import train

# Each switch as config overrides on the shrunk tiny config below.
SWITCHES = {  # 'electra' with embedding_sharing 'shared' is what tests/test_main.py runs
    'mlm': {'objective': 'mlm'},
    'electra_15': {'objective': 'electra_15'},
    'replace_mlm': {'objective': 'replace_mlm'},
    'all_tokens_mlm': {'objective': 'all_tokens_mlm'},
    'electric': {'objective': 'electric'},
    'sharing_none': {'embedding_sharing': 'none'},
    'sharing_all': {'embedding_sharing': 'all', 'model.generator_hidden_size': 1.0},
    'sharing_gdes': {'embedding_sharing': 'gdes'},
    'unigram_generator': {'generator_kind': 'unigram'},
    'temperature_schedule': {'temperature_start': 2.0},
    'whole_word_masking': {'masking': 'whole_word'},
    'mlm_span_masking': {'objective': 'mlm', 'masking': 'span'},
}
# Metrics each switch logs beyond loss, and ones it must not (its networks cannot make them).
RTD = {'disc_loss', 'disc_auc', 'disc_accuracy', 'replaced_fraction'}
MLM_ABLATION = {'mlm_loss', 'disc_mlm_loss', 'disc_mlm_accuracy', 'sampled_accuracy'}
NO_RTD = RTD - {'replaced_fraction'}
LOGGED = {
    'mlm': ({'mlm_loss', 'mlm_accuracy'}, RTD | {'sampled_accuracy'}),
    'mlm_span_masking': ({'mlm_loss', 'mlm_accuracy'}, RTD | {'sampled_accuracy'}),
    'replace_mlm': (MLM_ABLATION | {'replaced_fraction'}, NO_RTD),
    'all_tokens_mlm': (MLM_ABLATION | {'replaced_fraction', 'copy_loss', 'copy_accuracy'}, NO_RTD),
    'unigram_generator': (RTD | {'sampled_accuracy'}, {'mlm_loss', 'mlm_accuracy'}),
}
ELECTRA_LIKE = ({'mlm_loss', 'mlm_accuracy', 'sampled_accuracy'} | RTD, {'disc_mlm_loss'})
# What `export` writes for each (ElectraForPreTraining / ElectraForMaskedLM directories).
EXPORTED = {'mlm': ['mlm'], 'mlm_span_masking': ['mlm'], 'replace_mlm': ['generator', 'mlm'],
            'all_tokens_mlm': ['generator', 'mlm'], 'electric': ['discriminator'],
            'unigram_generator': ['discriminator']}
STEPS, PREEMPTED_AT = 30, 18


@pytest.fixture(scope='module')
def corpus(tmp_path_factory, wikitext):
  """WikiText-2 valid (training) and test (evaluation) prepared once with a 1,000-piece vocab."""
  del wikitext  # skips where the real data is absent
  return prepare_wikitext(tmp_path_factory.mktemp('switch_corpus'))


def switch_config(corpus, overrides: dict):
  config = load_config('tiny')
  config.model.update(vocab_size=1000, num_layers=1)
  config.update(batch_size=8, max_seq_length=32, num_train_steps=STEPS, warmup_steps=5,
                log_every=6, save_every=12, eval_every=15, eval_steps=1, keep_checkpoints=10)
  config.data.prepared_dir = str(corpus)
  return set_fields(config, overrides)


def read_lines(workdir):
  return [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]


@pytest.fixture(scope='module', params=list(SWITCHES))
def switch_run(request, corpus, tmp_path_factory):
  """The switch preempted at step 18, then run again with the same config to step 30."""
  name = request.param
  workdir = tmp_path_factory.mktemp(name)
  config = switch_config(corpus, SWITCHES[name])
  with pytest.MonkeyPatch.context() as patch:  # the SIGTERM a preempted VM gets, at step 18
    patch.setattr(train, 'preemption_check', lambda manager: lambda step: step == PREEMPTED_AT)
    cli.run(train.train_and_evaluate, config, str(workdir))
  stopped = read_lines(workdir)
  assert max(m['step'] for m in stopped) == PREEMPTED_AT
  cli.run(train.train_and_evaluate, config, str(workdir))
  return name, workdir, stopped


def test_each_switch_trains_logs_its_metrics_and_resumes(switch_run):
  name, workdir, stopped = switch_run
  saved = json.loads((workdir / 'config.json').read_text())
  for field, value in SWITCHES[name].items():
    node = saved
    for key in field.split('.'):
      node = node[key]
    assert node == value, field
  lines = read_lines(workdir)
  trains = {m['step']: m for m in lines if 'loss' in m}
  evals = {m['step']: m for m in lines if 'eval_loss' in m}
  assert sorted(trains) == [6, 12, 18, 24, 30] and sorted(evals) == [0, 15, 30]
  # What was logged before the stop is kept as it was: the resumed run appends.
  assert lines[:len(stopped)] == stopped
  wanted, unwanted = LOGGED.get(name, ELECTRA_LIKE)
  for m in trains.values():
    assert wanted <= set(m) and not unwanted & set(m), (name, sorted(m))
    assert all(np.isfinite(v) for v in m.values())
  assert wanted <= {k[5:] for k in evals[30]}
  if name in ('replace_mlm', 'all_tokens_mlm'):  # MLM_gen + MLM_disc (+ copy), each weighted 1
    for m in trains.values():
      expected = m['mlm_loss'] + m['disc_mlm_loss'] + m.get('copy_loss', 0.0)
      assert m['loss'] == pytest.approx(expected, rel=1e-5)
  if name == 'temperature_schedule':  # from 2.0 at step 0 to config.temperature (1.0) at 30
    assert {s: m['temperature'] for s, m in trains.items()} == pytest.approx(
        {s: 2.0 - (s - 1) / STEPS for s in trains})
  else:
    assert not any('temperature' in m for m in trains.values())
  steps = sorted(int(p.name) for p in (workdir / 'checkpoints').iterdir())
  assert steps == [12, 18, 24, 30]  # every 12, and where each part ended


def test_each_switch_exports_what_transformers_loads(switch_run, tmp_path):
  """Each exported network holds the weights it reads in the checkpoint: the discriminator's
  effective word table (GDES: table + delta), the generator's own embeddings and encoder
  ('none') or the discriminator's ('all'), the ablations' discriminator-sized MLM."""
  # pylint: disable=g-import-not-at-top  (torch only for this check)
  transformers = pytest.importorskip('transformers')
  from electra_jax.model import networks as model_lib
  from electra_jax.hf import exporting
  name, workdir, _ = switch_run
  run = exporting.export_run(str(workdir), str(tmp_path))
  assert run.step == STEPS
  networks = sorted(p.name for p in tmp_path.iterdir())
  assert networks == EXPORTED.get(name, ['discriminator', 'generator'])
  reads = {'discriminator': model_lib.discriminator_view(run.params),
           'generator': model_lib.generator_view(run.params), 'mlm': run.params}
  encoders = {'discriminator': 'discriminator', 'generator': 'generator', 'mlm': 'discriminator'}
  classes = {'discriminator': transformers.ElectraForPreTraining,
             'generator': transformers.ElectraForMaskedLM, 'mlm': transformers.ElectraForMaskedLM}
  for network in networks:
    model = classes[network].from_pretrained(tmp_path / network)
    own = reads[network]
    np.testing.assert_array_equal(model.electra.embeddings.word_embeddings.weight.detach().numpy(),
                                  own['embeddings']['word_embeddings']['embedding'])
    query = model.electra.encoder.layer[0].attention.self.query.weight.detach().numpy().T
    np.testing.assert_array_equal(
        query, own[encoders[network]]['layer_0']['attention']['query']['kernel'])
  if name in ('replace_mlm', 'all_tokens_mlm'):  # the MLM's own output bias, not the generator's
    mlm = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / 'mlm')
    np.testing.assert_array_equal(mlm.generator_lm_head.bias.detach().numpy(),
                                  run.params['mlm_head']['output_bias'])
  # All-Tokens MLM's copy head has no transformers counterpart: it stays in the checkpoint.
  assert ('copy_head' in run.params) == (name == 'all_tokens_mlm')


def test_fine_tuning_starts_from_each_switchs_discriminator(switch_run):
  """A GLUE run from the workdir starts from the encoder the discriminator (or the MLM) reads:
  its embeddings (GDES: table + delta) and encoder, as the checkpoint holds them."""
  # pylint: disable=g-import-not-at-top
  import jax
  from electra_jax.common import config as config_lib
  from electra_jax.model import networks as model_lib
  from electra_jax.finetune import init
  from electra_jax.finetune.glue import model as glue_model
  from electra_jax.hf import exporting
  from conftest import REPO
  name, workdir, _ = switch_run
  config = config_lib.load_config_file(str(REPO / 'configs' / 'finetune' / 'glue.py'))
  config.update(task='MRPC', init_from=str(workdir), max_seq_length=32)
  start = init.load_start(config)
  assert start.description.endswith(f'(step {STEPS})')
  params = init.initial_params(glue_model.Classifier(start.model, 2), start, 0, 32)
  reads = model_lib.discriminator_view(exporting.load_run(str(workdir)).params)
  for part in init.ENCODER:
    for ours, theirs in zip(jax.tree.leaves(params[part]), jax.tree.leaves(reads[part])):
      np.testing.assert_array_equal(ours, theirs)

  # config.init_step: an earlier checkpoint the run kept, or one clear error.
  config.init_step = 12
  earlier = init.load_start(config)
  assert earlier.description.endswith('(step 12)')
  reads = model_lib.discriminator_view(exporting.load_run(str(workdir), 12).params)
  for part in init.ENCODER:
    for ours, theirs in zip(jax.tree.leaves(earlier.params[part]), jax.tree.leaves(reads[part])):
      np.testing.assert_array_equal(ours, theirs)
  assert not np.array_equal(jax.tree.leaves(earlier.params['embeddings'])[0],
                            jax.tree.leaves(start.params['embeddings'])[0])
  config.init_step = 13
  with pytest.raises(UsageError, match=r'no checkpoint of step 13; it has steps 12, .*30'):
    init.load_start(config)
