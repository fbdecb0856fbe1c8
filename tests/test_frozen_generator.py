"""generator_kind='frozen' (config.generator_init): ELECTRA with a frozen pretrained generator
(Fast-ELECTRA).

A tiny MLM run on WikiText-2 is the generator. An ELECTRA run started from it keeps the
generator bitwise equal to the MLM's weights, holds no optimizer state for it and trains the
discriminator. It also resumes exactly after a stop, exports and fine-tunes. A Hugging Face
ElectraForMaskedLM directory works as the source too, and so does a BertForMaskedLM, whose
logits under our generator are transformers'. The run takes its generator's shape and vocabulary
from the source, with no sharing flag. Each misuse is one UsageError.
"""

import json
import shutil

import jax
import numpy as np
import pytest

from conftest import REPO, load_config, prepare_wikitext, set_fields
from electra_jax.common import cli
from electra_jax.common import config as config_lib
from electra_jax.common.errors import UsageError
from electra_jax.data import vocab as vocab_lib
from electra_jax.hf import exporting, importing
from electra_jax.model import networks
from electra_jax.training import checkpoint, flops, generator_modes, train
STEPS = 4
# Small enough to compile in seconds: a 64-wide, one-head, one-layer network is the MLM and,
# at generator_hidden_size=1.0, both networks of the ELECTRA run.
MODEL = dict(vocab_size=1000, hidden_size=64, num_heads=1, intermediate_size=256, num_layers=1)


@pytest.fixture(scope='module')
def corpus(tmp_path_factory, wikitext):
  """WikiText-2 valid, prepared once with a 1,000-piece vocabulary at length 32."""
  del wikitext  # skips where the real data is absent
  return prepare_wikitext(tmp_path_factory.mktemp('frozen_corpus'), eval_text=False)


def run_config(corpus, **overrides):
  config = load_config('tiny')
  config.model.update(MODEL)
  config.update(batch_size=8, max_seq_length=32, num_train_steps=STEPS, warmup_steps=0,
                log_every=2, save_every=2, eval_every=0, keep_checkpoints=10)
  config.data.prepared_dir = str(corpus) if corpus else ''
  return set_fields(config, overrides)


def frozen_config(corpus, source, **overrides):
  """generator_init alone: the width, depth and sharing follow from the source."""
  return run_config(corpus, generator_init=str(source), **overrides)


def held(params):
  return {name: params[name] for name in generator_modes.GENERATOR}


def train_run(config, workdir, stop_at=None):
  """train_and_evaluate as main runs it; `stop_at`: stopped there as by a SIGTERM, then resumed."""
  if stop_at is not None:
    with pytest.MonkeyPatch.context() as patch:
      patch.setattr(train, 'preemption_check', lambda manager: lambda step: step == stop_at)
      cli.run(train.train_and_evaluate, config, str(workdir), importing.read_generator)
    assert sorted(p.name for p in (workdir / 'checkpoints').iterdir()) == ['2']
  cli.run(train.train_and_evaluate, config, str(workdir), importing.read_generator)
  return workdir


def params_at(workdir, step=None):
  return exporting.load_run(str(workdir), step).params


def generator_of_mlm(params):
  return {new: params[old] for old, new in generator_modes.RENAMED['mlm'].items()}


def assert_equal_trees(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    assert np.array_equal(x, y)


@pytest.fixture(scope='module')
def mlm_source(corpus, tmp_path_factory):
  return train_run(run_config(corpus, objective='mlm', num_train_steps=2),
                   tmp_path_factory.mktemp('mlm_source'))


@pytest.fixture(scope='module')
def frozen_run(corpus, mlm_source, tmp_path_factory):
  return train_run(frozen_config(corpus, mlm_source), tmp_path_factory.mktemp('frozen'))


def test_the_generator_stays_the_mlm_runs_and_only_the_discriminator_trains(mlm_source,
                                                                            frozen_run):
  source = generator_of_mlm(params_at(mlm_source))
  at_2, at_4 = params_at(frozen_run, 2), params_at(frozen_run, 4)
  for params in (at_2, at_4):
    assert_equal_trees(held(params), source)
  for name in ('embeddings', 'discriminator', 'discriminator_head'):
    assert any(not np.array_equal(a, b)
               for a, b in zip(jax.tree.leaves(at_2[name]), jax.tree.leaves(at_4[name]))), name
  # The optimizer state has no generator entry at all; the discriminator has its moments.
  manager = checkpoint.make_manager(str(frozen_run), 10)
  opt_state = manager.item_metadata(STEPS)['opt_state']
  manager.close()
  paths = ['/'.join(str(getattr(k, 'key', getattr(k, 'idx', k))) for k in path)
           for path, _ in jax.tree_util.tree_leaves_with_path(opt_state)]
  assert not [p for p in paths if set(p.split('/')) & set(generator_modes.GENERATOR)]
  assert any('/discriminator/' in f'/{p}/' for p in paths)
  # The frozen generator still predicts: its MLM accuracy is logged, and the RTD loss trains.
  lines = [json.loads(l) for l in (frozen_run / 'metrics.jsonl').read_text().splitlines()]
  assert {'mlm_accuracy', 'disc_loss', 'disc_auc'} <= set(lines[-1])
  saved = json.loads((frozen_run / 'config.json').read_text())
  assert saved['generator_init'] == str(mlm_source)


@pytest.mark.parametrize('accumulation', [1, 2])
def test_a_stopped_run_resumes_to_the_params_of_an_uninterrupted_one(
    corpus, mlm_source, frozen_run, tmp_path, accumulation):
  config = frozen_config(corpus, mlm_source, grad_accum_steps=accumulation)
  uninterrupted = (frozen_run if accumulation == 1
                   else train_run(config, tmp_path / 'uninterrupted'))
  resumed = train_run(config, tmp_path / 'resumed', stop_at=2)
  final = params_at(resumed)
  assert_equal_trees(final, params_at(uninterrupted))
  assert_equal_trees(held(final), generator_of_mlm(params_at(mlm_source)))


def test_a_hugging_face_generator_loads_and_trains_with_its_vocabulary(mlm_source, tmp_path,
                                                                       wikitext):
  exporting.export_run(str(mlm_source), str(tmp_path / 'hf'))
  hf_dir = tmp_path / 'hf' / 'mlm'  # an ElectraForMaskedLM at the MLM's sizes
  # No vocabulary is named: the run takes the generator's (and prepares its data with it).
  config = frozen_config(None, hf_dir, num_train_steps=2, **{
      'data.train_files': str(wikitext / 'wiki.train.PARTIAL-first-1019-lines.raw')})
  workdir = train_run(config, tmp_path / 'run')
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['data']['vocab_model'] == str(hf_dir / 'vocab.model')
  assert (vocab_lib.vocab_fingerprint(vocab_lib.load_vocab(str(workdir / 'vocab.model'))) ==
          vocab_lib.vocab_fingerprint(vocab_lib.load_vocab(str(mlm_source / 'vocab.model'))))
  assert_equal_trees(held(params_at(workdir)),
                     generator_of_mlm(params_at(mlm_source)))


def test_the_run_exports_and_fine_tunes(frozen_run, mlm_source, tmp_path):
  transformers = pytest.importorskip('transformers')
  # pylint: disable=g-import-not-at-top
  from electra_jax.finetune import init
  from electra_jax.finetune.glue import model as glue_model, run as glue_run
  exporting.export_run(str(frozen_run), str(tmp_path / 'hf'))
  params = params_at(frozen_run)
  discriminator = transformers.ElectraForPreTraining.from_pretrained(tmp_path / 'hf' /
                                                                      'discriminator')
  query = discriminator.electra.encoder.layer[0].attention.self.query.weight.detach().numpy().T
  np.testing.assert_array_equal(query, params['discriminator']['layer_0']['attention']['query']
                                ['kernel'])
  # The exported generator is the MLM run's network, unchanged.
  generator = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / 'hf' / 'generator')
  mlm = params_at(mlm_source)
  np.testing.assert_array_equal(generator.electra.embeddings.word_embeddings.weight.detach().numpy(),
                                mlm['embeddings']['word_embeddings']['embedding'])
  # A discriminator directory is no generator source.
  with pytest.raises(UsageError, match='holds a discriminator or an encoder without an MLM head'):
    importing.read_generator(str(tmp_path / 'hf' / 'discriminator'), run_config(None).model)

  # GLUE fine-tuning starts from the discriminator, and runs (a slice of real MRPC).
  glue = tmp_path / 'glue' / 'MRPC'
  glue.mkdir(parents=True)
  for split, rows in (('train', 24), ('dev', 8), ('test', 4)):
    lines = (REPO.parent / 'shared' / 'data' / 'glue' / 'MRPC' / f'{split}.tsv').read_text(
        encoding='utf-8-sig').splitlines()
    (glue / f'{split}.tsv').write_text('\n'.join(lines[:rows + 1]) + '\n')
  config = config_lib.load_config_file(str(REPO / 'configs' / 'finetune' / 'glue.py'))
  config.update(task='mrpc', init_from=str(frozen_run), data_dir=str(tmp_path / 'glue'),
                max_seq_length=32, batch_size=8, eval_batch_size=8, num_epochs=1.0, seeds='0')
  start = init.load_start(config)
  initial = init.initial_params(glue_model.Classifier(start.model, 2), start, 0, 32)
  for part in init.ENCODER:
    assert_equal_trees(initial[part], params[part])
  summary = glue_run.fine_tune(config, str(tmp_path / 'finetuned'))
  assert set(summary['median']['MRPC']) == {'accuracy', 'f1'}


def test_flops_count_the_frozen_generators_forward_pass_only():
  config = run_config(None, embedding_sharing='none')
  counts = flops.forward_flops(config)
  generator = sum(counts[part] for part in flops.GENERATOR_PARTS)
  assert 0 < generator < sum(counts.values())
  trained_jointly = flops.train_step_flops(config)
  config.update(generator_init='/some/run', generator_kind='frozen')
  assert flops.forward_flops(config) == counts  # the same work forward...
  assert flops.train_step_flops(config) == trained_jointly - 2 * generator  # ...no backward


# ---- refusals ---------------------------------------------------------------------------------

def refusal_config(tmp_path, **overrides):
  config = run_config(None, generator_init=str(tmp_path), **{'data.train_files': 'x.txt'})
  config.update(overrides)
  return config_lib.resolve(config)


def test_a_frozen_generator_needs_no_sharing_flag_and_refuses_a_tied_one(tmp_path):
  config = refusal_config(tmp_path)
  assert (config.generator_kind, config.embedding_sharing) == ('frozen', 'none')
  config_lib.validate(config, 1)
  for sharing in ('gdes', 'all'):
    with pytest.raises(UsageError, match=f"embedding_sharing='{sharing}' ties generator weights "
                                         'to the discriminator.s, and a frozen generator owns'):
      refusal_config(tmp_path, embedding_sharing=sharing)


@pytest.mark.parametrize('overrides, message', [
    ({'two_stage_steps': 2}, "two_stage_steps=2 with generator_kind='frozen'"),
    ({'objective': 'mlm'}, "generator_kind='frozen' applies to objective electra or electra_15, "
                           "not 'mlm'"),
    ({'generator_kind': 'unigram'}, "generator_init='.*' with generator_kind='unigram'"),
])
def test_settings_without_a_generator_to_freeze_are_refused(tmp_path, overrides, message):
  with pytest.raises(UsageError, match=message):
    config_lib.validate(refusal_config(tmp_path, **overrides), 1)


def test_a_missing_directory_is_refused_by_name(tmp_path):
  missing = tmp_path / 'nowhere'
  with pytest.raises(UsageError, match=f"generator_init='{missing}' .*does not exist"):
    config_lib.validate(refusal_config(missing), 1)
  config_lib.validate(refusal_config(tmp_path), 1)  # the same settings with a directory pass


def test_a_generator_of_another_vocabulary_is_refused_before_anything_is_written(
    mlm_source, corpus, tmp_path):
  other = tmp_path / 'other.txt'
  other.write_text('\n'.join(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the', 'a']) + '\n')
  (tmp_path / 'x.txt').write_text('The corpus, which must exist: it is checked first.\n')
  config = frozen_config(None, mlm_source, **{'data.vocab_model': str(other),
                                              'data.train_files': str(tmp_path / 'x.txt')})
  workdir = tmp_path / 'run'
  with pytest.raises(UsageError, match=f"trained on the vocabulary {mlm_source}/vocab.model, and "
                                       f'this run reads another, {other}.*--config.data.'
                                       f'vocab_model={mlm_source}/vocab.model'):
    train.train_and_evaluate(config, str(workdir))
  written = {p.name for p in workdir.iterdir()}
  assert not written & {'config.json', 'vocab.model', 'vocab.txt', 'data', 'checkpoints'}, written


def test_the_run_takes_its_generators_shape_from_the_source(mlm_source, tmp_path):
  config = frozen_config(None, mlm_source, **{'model.generator_hidden_size': 0.5,
                                              'model.vocab_size': 77})
  fitted = generator_modes.fitted(config_lib.resolve(config))
  m = fitted.model
  assert (config_lib.generator_width(m), config_lib.generator_depth(m), m.vocab_size) == (64, 1, 1000)
  assert fitted.data.vocab_model == str(mlm_source / 'vocab.model')
  # A source that no generator setting can hold (heads other than width // 64) says so, and one
  # of another embedding width names the flag.
  source = tmp_path / 'bert'
  source.mkdir()
  bert = dict(model_type='bert', hidden_size=64, num_attention_heads=2, intermediate_size=256,
              num_hidden_layers=1, vocab_size=1000, max_position_embeddings=512,
              type_vocab_size=2)
  (source / 'config.json').write_text(json.dumps(bert))
  with pytest.raises(UsageError, match='heads 2 .*no setting holds 2 heads'):
    generator_modes.fitted(config_lib.resolve(frozen_config(None, source)))
  (source / 'config.json').write_text(json.dumps({**bert, 'num_attention_heads': 1}))
  with pytest.raises(UsageError, match=' embedding_size 64 .*; set --config.model.embedding_size'
                                       '=64$'):
    generator_modes.fitted(config_lib.resolve(frozen_config(
        None, source, **{'model.embedding_size': 32})))


def test_a_changed_generator_init_is_refused_on_resume(frozen_run, mlm_source):
  config = exporting.load_run_config(str(frozen_run))
  config.generator_init = ''
  with pytest.raises(UsageError, match=f"holds a run with generator_init '{mlm_source}', not ''"):
    config_lib.check_workdir_config(config, str(frozen_run))


# ---- a Hugging Face BertForMaskedLM as the source ---------------------------------------------

LOGITS_ATOL = 1e-4  # float32 logits, ours against transformers'; measured 1.8e-6


def bert_config(**overrides):
  """A transformers BertConfig of the run's generator's shape (E = H = 64, one layer)."""
  transformers = pytest.importorskip('transformers')
  m = run_config(None).model
  return transformers.BertConfig(
      vocab_size=m.vocab_size, hidden_size=64, num_hidden_layers=1, num_attention_heads=1,
      intermediate_size=256, max_position_embeddings=m.max_position_embeddings,
      type_vocab_size=m.type_vocab_size, **overrides)


@pytest.fixture(scope='module')
def bert_dir(corpus, tmp_path_factory):
  """A random BertForMaskedLM over the corpus's vocabulary, saved by transformers. Every weight
  is moved off its init, so that no bias is zero and no LayerNorm the identity."""
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  torch.manual_seed(0)
  model = transformers.BertForMaskedLM(bert_config())
  with torch.no_grad():
    for value in model.parameters():
      value.add_(0.1 * torch.randn_like(value))
  directory = tmp_path_factory.mktemp('bert')
  model.save_pretrained(directory)
  shutil.copy(corpus / 'vocab.model', directory / 'vocab.model')
  return directory


def masked_wikitext(vocab_path, wikitext, length=32):
  """Two real sequences, [CLS] text [SEP] (the second padded, with a second segment), and at
  five positions of each, the first three [MASK]ed: (input_ids, segment_ids, positions)."""
  lines = [l.strip() for l in (wikitext / 'wiki.valid.raw').read_text().splitlines()
           if len(l.split()) > 20][:2]
  pieces = vocab_lib.load_vocab(str(vocab_path)).encode(lines)
  ids, segments = np.zeros((2, length), np.int32), np.zeros((2, length), np.int32)
  for row, (piece_ids, used) in enumerate(zip(pieces, (length - 2, 20))):
    ids[row, :used + 2] = [2, *piece_ids[:used], 3]
  segments[1, 10:22] = 1
  positions = np.array([[1, 5, 9, 17, 30], [2, 4, 12, 15, 20]], np.int32)
  ids[np.arange(2)[:, None], positions[:, :3]] = 4
  return ids, segments, positions


def test_a_bert_masked_lm_predicts_under_our_generator_what_it_does_in_transformers(
    bert_dir, corpus, wikitext):
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  config = generator_modes.fitted(config_lib.resolve(frozen_config(corpus, bert_dir)))
  source = importing.read_generator(str(bert_dir), config.model)
  assert source.name == f"the BertForMaskedLM in '{bert_dir}'"
  model = networks.Electra(config.model, embedding_sharing='none')
  params = networks.init_params(model, jax.random.PRNGKey(0), 32)
  generator_modes.check_fits(source, params)
  params = {**generator_modes.trainable(params), **source.params}
  ids, segments, positions = masked_wikitext(corpus / 'vocab.model', wikitext)
  ours = np.asarray(model.apply({'params': params}, ids, segments, positions,
                                method=networks.Electra.generate))
  bert = transformers.BertForMaskedLM.from_pretrained(bert_dir, dtype=torch.float32).eval()
  with torch.no_grad():
    theirs = bert(input_ids=torch.tensor(ids, dtype=torch.long),
                  attention_mask=torch.tensor(ids != 0, dtype=torch.long),
                  token_type_ids=torch.tensor(segments, dtype=torch.long)).logits.numpy()
  theirs = np.take_along_axis(theirs, positions[..., None], axis=1)
  print(f'max |ours - transformers| over {theirs.size} logits: {np.abs(ours - theirs).max():.2e}')
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=LOGITS_ATOL)
  assert np.abs(theirs).max() > 1 and (ours.argmax(-1) == theirs.argmax(-1)).all()


def test_a_bert_generator_stays_bitwise_what_was_loaded_while_the_discriminator_trains(
    bert_dir, corpus, tmp_path):
  workdir = train_run(frozen_config(corpus, bert_dir), tmp_path / 'run')
  at_2, at_4 = params_at(workdir, 2), params_at(workdir, 4)
  loaded = importing.read_generator(str(bert_dir), run_config(None).model).params
  for params in (at_2, at_4):
    assert_equal_trees(held(params), loaded)
  assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(at_2['discriminator']),
                                                      jax.tree.leaves(at_4['discriminator'])))
  last = json.loads((workdir / 'metrics.jsonl').read_text().splitlines()[-1])
  assert np.isfinite(last['disc_loss']) and 0 <= last['mlm_accuracy'] <= 1


@pytest.mark.parametrize('architecture, overrides, message', [
    ('BertModel', {},
     "'{dir}' has no masked-LM head: it lacks cls.predictions.transform.dense.weight, "
     'cls.predictions.transform.dense.bias, cls.predictions.transform.LayerNorm.weight, '
     'cls.predictions.transform.LayerNorm.bias, cls.predictions.bias (a BertModel is the '
     'encoder alone and predicts no tokens); pass a BertForMaskedLM or BertForPreTraining '
     'directory'),
    ('BertForMaskedLM', {'hidden_act': 'gelu_new'},
     '{dir}/config.json has hidden_act "gelu_new" (ours is exact "gelu"): electra_jax cannot '
     'compute this model exactly, so it does not import it')])
def test_a_bert_without_a_masked_lm_head_or_of_another_activation_is_refused(
    tmp_path, architecture, overrides, message):
  transformers = pytest.importorskip('transformers')
  getattr(transformers, architecture)(bert_config(**overrides)).save_pretrained(tmp_path)
  with pytest.raises(UsageError) as refused:
    importing.read_generator(str(tmp_path), run_config(None).model)
  assert str(refused.value) == message.format(dir=tmp_path)
