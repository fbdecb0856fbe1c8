"""Hugging Face export and import, judged by transformers itself (PyTorch, CPU, float32).

One tiny model is really pretrained once for the module (`python -m electra_jax.main` on
WikiText-2 valid) and exported with `python -m electra_jax.export`; the other cases use
random parameters, jittered so that every bias and LayerNorm differs from its initial value
and a swapped or dropped tensor cannot go unnoticed.
"""

import json
import logging
import os
import shutil
import subprocess
import sys

os.environ.setdefault('HF_HUB_OFFLINE', '1')  # everything below must work without a network

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers

from conftest import REPO, SHARED_DATA, WIKITEXT, error_line, real_file
from electra_jax.common import config as config_lib
from electra_jax.training import flops
from electra_jax.data import packing, vocab as vocab_lib
from electra_jax.common.errors import UsageError
from electra_jax.hf import exporting, files, importing, model_config
from electra_jax.model.networks import Electra, MaskedLM, init_params
from electra_jax.finetune import init as finetune_init
from electra_jax.objective import masking, mlm
from test_tokenizer_export import google_vocab

TOLERANCE = 1e-4
TRAIN_STEPS = 60
TRAINED_MODEL = {'vocab_size': 1000, 'embedding_size': 64, 'hidden_size': 128, 'num_layers': 2,
                 'num_heads': 2, 'intermediate_size': 512, 'generator_hidden_size': 0.5}


def tiny_model(**changes):
  model = config_lib.default_config().model
  model.update(vocab_size=1000, embedding_size=32, hidden_size=64, num_layers=2, num_heads=2,
               intermediate_size=128, generator_hidden_size=0.5, max_position_embeddings=128)
  model.update(**changes)
  return model


def jittered(tree, seed):
  leaves, treedef = jax.tree.flatten(tree)
  rng = np.random.default_rng(seed)
  return jax.tree.unflatten(treedef, [np.asarray(x) + rng.normal(0, 0.05, np.shape(x))
                                      .astype(np.float32) for x in leaves])


def random_params(model, seed=0):
  return jittered(jax.device_get(init_params(Electra(model), jax.random.PRNGKey(seed), 8)), seed)


def pair_batch(vocab_size, length=24, cls=2, sep=3, seed=0):
  """Rows of different lengths: A/B pairs, one single segment; zero padding after each."""
  rng = np.random.default_rng(seed)
  shapes = [(10, 11), (6, 5), (8, 0), (3, 4)]  # (len A, len B); the first row is full
  input_ids = np.zeros((len(shapes), length), np.int32)
  segment_ids = np.zeros_like(input_ids)
  for row, (a, b) in enumerate(shapes):
    pieces = lambda n: list(rng.integers(5, vocab_size, n))
    pair = packing.SegmentPair(pieces(a), pieces(b), length, b == 0)
    packing.fill_example(pair, input_ids[row], segment_ids[row], cls, sep)
  return input_ids, segment_ids


def our_logits(params, model, input_ids, segment_ids):
  """Discriminator logits [B, L] and generator logits at every position [B, L, V]."""
  @jax.jit
  def logits(params, input_ids, segment_ids):
    electra = Electra(model)
    positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    return (electra.apply({'params': params}, input_ids, segment_ids,
                          method=Electra.discriminate),
            electra.apply({'params': params}, input_ids, segment_ids, positions,
                          method=Electra.generate))
  return jax.device_get(logits(params, input_ids, segment_ids))


def torch_logits(net, input_ids, segment_ids):
  with torch.no_grad():
    return net.eval()(input_ids=torch.tensor(input_ids), token_type_ids=torch.tensor(segment_ids),
                      attention_mask=torch.tensor(input_ids != 0)).logits.numpy()


def max_difference(ours, theirs, input_ids):
  """Over non-padded positions only: padded ones differ by design (-10000 vs dtype minimum)."""
  return float(np.max(np.abs(ours - theirs)[input_ids != 0]))


def compare_with_transformers(params, model, directory, input_ids, segment_ids, label):
  disc, gen = our_logits(params, model, input_ids, segment_ids)
  hf_disc = torch_logits(transformers.ElectraForPreTraining.from_pretrained(
      os.path.join(directory, 'discriminator')), input_ids, segment_ids)
  hf_gen = torch_logits(transformers.ElectraForMaskedLM.from_pretrained(
      os.path.join(directory, 'generator')), input_ids, segment_ids)
  differences = (max_difference(disc, hf_disc, input_ids), max_difference(gen, hf_gen, input_ids))
  print(f'{label}: max abs logit difference discriminator {differences[0]:.2e}, '
        f'generator {differences[1]:.2e}')
  assert max(differences) <= TOLERANCE, differences
  return differences


@pytest.fixture(scope='module')
def vocab(tmp_path_factory, wikitext):
  prefix = tmp_path_factory.mktemp('vocab') / 'vocab'
  return vocab_lib.train_vocab([str(wikitext / 'wiki.valid.raw')], 1000, str(prefix))


def cli(module, *args):
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}
  return subprocess.run([sys.executable, '-m', module, *map(str, args)], env=env, cwd=REPO,
                        capture_output=True, text=True, timeout=600)


def check_cli(module, *args):
  result = cli(module, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@pytest.fixture(scope='module')
def trained(tmp_path_factory, wikitext):
  """A tiny model pretrained for TRAIN_STEPS steps, exported by the command line."""
  workdir = tmp_path_factory.mktemp('trained')
  model_flags = [f'--config.model.{k}={v}' for k, v in TRAINED_MODEL.items()]
  check_cli('electra_jax.main', f'--config={REPO / "configs" / "tiny.py"}', f'--workdir={workdir}',
            f'--config.data.train_files={wikitext / "wiki.valid.raw"}', *model_flags,
            '--config.batch_size=16', '--config.max_seq_length=64', '--config.learning_rate=2e-3',
            '--config.warmup_steps=20', f'--config.num_train_steps={TRAIN_STEPS}',
            f'--config.log_every={TRAIN_STEPS}', f'--config.save_every={TRAIN_STEPS}',
            '--config.eval_every=0')
  out = workdir / 'export'
  result = check_cli('electra_jax.export', f'--workdir={workdir}', f'--out={out}')
  assert f'exported step {TRAIN_STEPS}' in result.stdout
  return workdir, out


# ---- export: transformers computes what we compute -------------------------------------------

@pytest.mark.parametrize('label, model_changes, projected', [
    ('E=32 H=64 G=32', {}, {'discriminator': True, 'generator': False}),
    ('E=64 H=64 G=32', {'embedding_size': 64}, {'discriminator': False, 'generator': True}),
    ('E=32 H=64 G=32, generator 1 of 2 layers', {'generator_layers': 0.5},
     {'discriminator': True, 'generator': False}),
])
def test_random_export_matches_transformers(tmp_path, vocab, label, model_changes, projected):
  model = tiny_model(**model_changes)
  params = random_params(model)
  exporting.export_params(params, model, vocab, str(tmp_path))
  for kind, has_projection in projected.items():
    names = safetensors.numpy.load_file(str(tmp_path / kind / 'model.safetensors'))
    assert ('electra.embeddings_project.weight' in names) == has_projection, kind
  generator_layers = sum(1 for name in params['generator'] if name.startswith('layer_'))
  assert generator_layers == (1 if 'generator_layers' in model_changes else model.num_layers)
  hf_config = json.loads((tmp_path / 'generator' / 'config.json').read_text())
  assert hf_config['num_hidden_layers'] == generator_layers
  compare_with_transformers(params, model, tmp_path, *pair_batch(model.vocab_size),
                            f'random init, {label}')


def test_mlm_export_matches_transformers_at_the_masked_positions(tmp_path, vocab):
  """objective=mlm: one ElectraForMaskedLM at the discriminator's sizes, in DIR/mlm."""
  model = tiny_model()
  params = jittered(jax.device_get(init_params(MaskedLM(model), jax.random.PRNGKey(0), 8)), 0)
  written = exporting.export_params(params, model, vocab, str(tmp_path), 'mlm')
  assert list(written) == ['mlm'] and sorted(os.listdir(tmp_path)) == ['mlm']
  config = json.loads((tmp_path / 'mlm' / 'config.json').read_text())
  assert config['architectures'] == ['ElectraForMaskedLM']
  assert (config['hidden_size'], config['num_attention_heads'], config['intermediate_size']) == (
      model.hidden_size, model.num_heads, model.intermediate_size)
  input_ids, segment_ids = pair_batch(model.vocab_size)
  masked = jax.device_get(masking.bert_mask_inputs(jax.random.PRNGKey(1), jnp.asarray(input_ids),
                                                   0.15, model.vocab_size))
  ours = np.asarray(MaskedLM(model).apply({'params': params}, masked.input_ids, segment_ids,
                                          masked.positions))
  net = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / 'mlm').eval()
  labels = np.full(input_ids.shape, -100, np.int64)
  rows = np.arange(len(input_ids))[:, None].repeat(masked.positions.shape[1], 1)
  selected = masked.weights > 0
  labels[rows[selected], masked.positions[selected]] = masked.targets[selected]
  with torch.no_grad():
    output = net(input_ids=torch.tensor(masked.input_ids), token_type_ids=torch.tensor(segment_ids),
                 attention_mask=torch.tensor(input_ids != 0), labels=torch.tensor(labels))
  theirs = np.take_along_axis(output.logits.numpy(), masked.positions[..., None], 1)
  difference = float(np.max(np.abs(ours - theirs)[selected]))
  our_loss = float(mlm.cross_entropy(jnp.asarray(ours), masked, masked.weights.sum()))
  print(f'mlm export: max abs logit difference at {selected.sum()} masked positions '
        f'{difference:.2e}; loss {our_loss:.6f} vs {float(output.loss):.6f}')
  assert difference <= TOLERANCE
  np.testing.assert_allclose(our_loss, float(output.loss), rtol=1e-5)


def test_exported_discriminator_loads_for_fine_tuning(tmp_path, vocab):
  model = tiny_model()
  exporting.export_params(random_params(model), model, vocab, str(tmp_path))
  directory = tmp_path / 'discriminator'
  pretraining = transformers.ElectraForPreTraining.from_pretrained(directory)
  encoder = transformers.AutoModel.from_pretrained(directory)
  classifier = transformers.AutoModelForSequenceClassification.from_pretrained(directory,
                                                                               num_labels=3)
  for name, value in encoder.state_dict().items():
    torch.testing.assert_close(value, pretraining.electra.state_dict()[name], rtol=0, atol=0)
  input_ids, segment_ids = pair_batch(model.vocab_size)
  with torch.no_grad():
    logits = classifier.eval()(input_ids=torch.tensor(input_ids),
                               token_type_ids=torch.tensor(segment_ids),
                               attention_mask=torch.tensor(input_ids != 0)).logits
  assert logits.shape == (len(input_ids), 3)
  config = json.loads((directory / 'config.json').read_text())
  assert config['model_type'] == 'electra' and config['architectures'] == ['ElectraForPreTraining']
  metadata = safetensors.safe_open(str(directory / 'model.safetensors'), 'np').metadata()
  assert metadata == {'format': 'pt'}


def real_pairs(vocab, length=64, count=4):
  """Packed like pretraining data from consecutive wiki.test.raw lines: A/B pairs, padded."""
  lines = [line for line in (WIKITEXT / 'wiki.test.raw').read_text().splitlines()
           if len(line.split()) > 40][:2 * count]
  input_ids = np.zeros((count, length), np.int32)
  segment_ids = np.zeros_like(input_ids)
  encoded = vocab.encode(lines)
  for row, budget in enumerate((61, 40, 25, 12)):  # the first row is full, the others padded
    first, second = encoded[2 * row][:(budget + 1) // 2], encoded[2 * row + 1][:budget // 2]
    packing.fill_example(packing.SegmentPair(first, second, length, False), input_ids[row],
                         segment_ids[row], vocab.cls_id, vocab.sep_id)
  return input_ids, segment_ids


def test_trained_export_matches_transformers(trained):
  workdir, out = trained
  run = exporting.load_run(str(workdir))
  assert run.step == TRAIN_STEPS
  input_ids, segment_ids = real_pairs(run.vocab)
  assert (input_ids[0] != 0).all() and (input_ids[1:] == 0).any(axis=1).all()
  compare_with_transformers(run.params, run.config.model, out, input_ids, segment_ids,
                            f'trained {TRAIN_STEPS} steps')


def test_export_reads_the_parameters_alone(trained, monkeypatch):
  """load_run restores the checkpoint's params branch only: no optimizer is built, and what it
  reads equals the params of the whole restored train state, bit for bit."""
  # pylint: disable-next=g-import-not-at-top
  from electra_jax.training import checkpoint, optim, train
  workdir, _ = trained
  config = exporting.load_run_config(str(workdir))
  replicated = jax.sharding.NamedSharding(train.make_mesh(), jax.sharding.PartitionSpec())
  state = train.abstract_train_state(config, train.make_model(config),
                                     optim.make_optimizer(config), replicated)
  manager = checkpoint.make_manager(str(workdir), config.keep_checkpoints)
  whole = jax.device_get(checkpoint.restore(manager, TRAIN_STEPS, state).params)
  manager.close()

  def no_optimizer(*args, **kwargs):
    raise AssertionError('export built an optimizer')
  monkeypatch.setattr(optim, 'make_optimizer', no_optimizer)
  before = sorted(p.relative_to(workdir) for p in workdir.rglob('*'))
  params = exporting.load_run(str(workdir)).params
  assert sorted(p.relative_to(workdir) for p in workdir.rglob('*')) == before  # wrote nothing
  assert jax.tree.structure(params) == jax.tree.structure(whole)
  for read, restored in zip(jax.tree.leaves(params), jax.tree.leaves(whole)):
    assert isinstance(read, np.ndarray) and read.dtype == restored.dtype
    np.testing.assert_array_equal(read, restored)


def test_each_export_carries_a_model_card_the_hub_reads(trained, wikitext):
  huggingface_hub = pytest.importorskip('huggingface_hub')
  workdir, out = trained
  config = exporting.load_run_config(str(workdir))
  for network, pipeline in (('discriminator', None), ('generator', 'fill-mask')):
    path = out / network / 'README.md'
    metadata = huggingface_hub.ModelCard.load(path).data.to_dict()
    assert metadata.get('pipeline_tag') == pipeline and metadata['library_name'] == 'transformers'
    assert metadata['tags'] == ['electra', 'electra_jax']
    card = path.read_text()
    hf_config = json.loads((out / network / 'config.json').read_text())
    assert (f"| encoder | {hf_config['num_hidden_layers']} layers, hidden size "
            f"{hf_config['hidden_size']}, ") in card
    assert f'| steps | {TRAIN_STEPS} of {TRAIN_STEPS}, batch 16 × 64 tokens (61,440 tokens' in card
    compute = TRAIN_STEPS * flops.train_step_flops(config)
    assert f'| pretraining compute | {compute:.3g} FLOPs' in card
    assert '| training text | `wiki.valid.raw` |' in card
    # The generator's card loads it to fill masks, not as a classifier (it said so before).
    fills_masks = network == 'generator'
    assert ('Load it with `AutoModelForMaskedLM`' in card) == fills_masks
    assert ('`AutoModelForSequenceClassification`' in card) != fills_masks
    assert str(wikitext) not in card and str(workdir) not in card  # no local paths
    assert 'held-out' not in card  # this run never evaluated
    assert card.endswith("The training text's language and the model's license are not "
                         'recorded by electra_jax: add `language:` and `license:` to the block '
                         'at the top before publishing, or export with --language and '
                         '--license.\n')


def test_the_text_language_and_license_reach_the_model_card(trained):
  """--language and --license fill in what the run cannot know, as the Hub reads it; a value
  the Hub would misread is refused before anything is written."""
  huggingface_hub = pytest.importorskip('huggingface_hub')
  workdir, _ = trained
  out = workdir / 'export-en'
  check_cli('electra_jax.export', f'--workdir={workdir}', f'--out={out}', '--language=en',
            '--license=cc-by-sa-3.0')  # WikiText-2's text and license
  for network in ('discriminator', 'generator'):
    metadata = huggingface_hub.ModelCard.load(out / network / 'README.md').data.to_dict()
    assert metadata['language'] == ['en'] and metadata['license'] == 'cc-by-sa-3.0'
    assert 'not recorded' not in (out / network / 'README.md').read_text()
  refused = cli('electra_jax.export', f'--workdir={workdir}', f'--out={workdir / "refused"}',
                '--language=English')
  assert refused.returncode != 0 and not (workdir / 'refused').exists()
  assert refused.stderr.strip().splitlines()[-1] == (
      "electra_jax: error: --language='English': English is not an ISO 639 language code; "
      'give codes such as en, or en,fr')


def test_a_model_card_quotes_the_last_evaluation_up_to_the_exported_step(tmp_path):
  from electra_jax.hf import model_card  # pylint: disable=g-import-not-at-top
  lines = [{'step': 30, 'eval_disc_auc': 0.61, 'eval_mlm_accuracy': 0.1},
           {'step': 40, 'loss': 20.0},
           {'step': 60, 'eval_disc_auc': 0.654321, 'eval_mlm_accuracy': 0.123456, 'eval_loss': 3.5},
           {'step': 90, 'eval_disc_auc': 0.7, 'eval_mlm_accuracy': 0.2}]
  (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(m) + '\n' for m in lines))
  assert model_card.last_evaluation(str(tmp_path), 89)['step'] == 60
  assert model_card.last_evaluation(str(tmp_path), 29) == {}
  config = config_lib.default_config()
  config.objective = 'mlm'
  config.data.train_files = '/home/me/corpus/*.txt,/data/books/'
  hf = model_config.to_hf(config.model, 'mlm')
  card = model_card.model_card('mlm', config, hf, 89, model_card.last_evaluation(str(tmp_path), 89))
  assert ('| held-out, step 60 | discriminator ROC AUC 0.6543, masked-token accuracy 0.1235, '
          'loss 3.5000 |') in card
  assert '| training text | `*.txt`, `books` |' in card and '/home/me' not in card
  assert '- mlm\npipeline_tag: fill-mask\n---\n\n# A masked language model, pretrained' in card
  assert ('Load it with `AutoModelForMaskedLM` to fill masks, or with '
          '`AutoModelForSequenceClassification`') in card  # a BERT baseline does both


def masked_word_texts(vocab, count, seed=0):
  """Short windows of wiki.test.raw with one whole word (a single piece) replaced by [MASK]."""
  rng = np.random.default_rng(seed)
  lines = [line.split() for line in (WIKITEXT / 'wiki.test.raw').read_text().splitlines()
           if len(line.split()) >= 12 and not line.strip().startswith('=')]
  texts, targets = [], []
  for index in rng.permutation(len(lines)):
    words = lines[index]
    single_piece = [i for i, w in enumerate(words)
                    if w.isalpha() and len(vocab.encode([w])[0]) == 1]
    if not single_piece:
      continue
    i = single_piece[rng.integers(len(single_piece))]
    # A window well inside the 64 positions the model was trained on.
    texts.append(' '.join(words[max(0, i - 10):i] + ['[MASK]'] + words[i + 1:i + 10]))
    targets.append(vocab.encode([words[i]])[0][0])
    if len(texts) == count:
      return texts, targets
  raise AssertionError('not enough lines')


def top5_hit_rate(directory, texts, targets):
  fill_mask = transformers.pipeline('fill-mask', model=str(directory), top_k=5)
  predictions = fill_mask(texts, batch_size=64)
  assert all(len(p) == 5 and {'token', 'token_str', 'score', 'sequence'} <= set(p[0])
             for p in predictions)
  return np.mean([any(p['token'] == t for p in top) for top, t in zip(predictions, targets)])


def test_fill_mask_improves_with_pretraining(trained, tmp_path):
  workdir, out = trained
  run = exporting.load_run(str(workdir))
  untrained = init_params(Electra(run.config.model), jax.random.PRNGKey(run.config.seed), 8)
  exporting.export_params(jax.device_get(untrained), run.config.model, run.vocab, str(tmp_path))
  texts, targets = masked_word_texts(run.vocab, 200)
  trained_rate = top5_hit_rate(out / 'generator', texts, targets)
  untrained_rate = top5_hit_rate(tmp_path / 'generator', texts, targets)
  print(f'fill-mask top-5 hit rate on {len(texts)} masked words of wiki.test.raw: trained '
        f'({TRAIN_STEPS} steps) {trained_rate:.3f}, untrained {untrained_rate:.3f}')
  assert trained_rate >= untrained_rate + 0.05 and trained_rate >= 3 * untrained_rate


# ---- import -----------------------------------------------------------------------------------

def test_export_import_export_is_identical(trained, tmp_path):
  _, out = trained
  workdir = tmp_path / 'imported'
  result = check_cli('electra_jax.import_hf', f'--hf_dir={out}', f'--workdir={workdir}',
                     f'--config={REPO / "configs" / "tiny.py"}', '--config.max_seq_length=64')
  assert 'python -m electra_jax.main' in result.stdout
  run = exporting.load_run(str(workdir))
  assert run.step == 0 and run.vocab.fingerprint() == vocab_lib.load_vocab(
      str(out / 'discriminator' / 'vocab.model')).fingerprint()
  again = tmp_path / 'again'
  exporting.export_params(run.params, run.config.model, run.vocab, str(again))
  for kind in ('discriminator', 'generator'):
    first = safetensors.numpy.load_file(str(out / kind / 'model.safetensors'))
    second = safetensors.numpy.load_file(str(again / kind / 'model.safetensors'))
    assert sorted(first) == sorted(second)
    for name in first:
      assert first[name].dtype == second[name].dtype and np.array_equal(first[name], second[name])
    for name in ('config.json', 'tokenizer.json', 'tokenizer_config.json', 'vocab.model'):
      assert (out / kind / name).read_bytes() == (again / kind / name).read_bytes(), name


def transformers_pair(seed=0, num_layers=2, generator_layers=None):
  """A randomly initialised transformers discriminator and generator sharing embeddings."""
  torch.manual_seed(seed)
  shared = dict(vocab_size=1000, embedding_size=32, max_position_embeddings=128)
  disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(
      hidden_size=64, num_attention_heads=2, intermediate_size=128, num_hidden_layers=num_layers,
      **shared))
  gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
      hidden_size=32, num_attention_heads=1, intermediate_size=128,
      num_hidden_layers=generator_layers or num_layers, **shared))
  with torch.no_grad():
    for net in (disc, gen):
      for parameter in net.parameters():
        parameter.add_(0.05 * torch.randn_like(parameter))
  gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
  return disc, gen


def import_config():
  config = config_lib.default_config()
  config.max_seq_length = 64
  return config


@pytest.mark.parametrize('generator_layers', [2, 1])
def test_transformers_model_imports_with_equal_logits(tmp_path, vocab, generator_layers):
  """Both networks, each in its own directory, as saved by save_pretrained; the generator as
  deep as the discriminator or shallower."""
  disc, gen = transformers_pair(generator_layers=generator_layers)
  disc.save_pretrained(tmp_path / 'disc')
  gen.save_pretrained(tmp_path / 'gen')
  shutil.copy(vocab.model_path, tmp_path / 'gen' / 'vocab.model')
  workdir = tmp_path / 'run'
  config = importing.import_checkpoint(import_config(), str(workdir), str(tmp_path / 'disc'),
                                       generator_dir=str(tmp_path / 'gen'))
  assert config.model.generator_hidden_size == 32 and config.model.embedding_size == 32
  assert config.model.generator_layers == generator_layers / 2
  run = exporting.load_run(str(workdir))
  input_ids, segment_ids = pair_batch(1000)
  ours_disc, ours_gen = our_logits(run.params, run.config.model, input_ids, segment_ids)
  differences = (max_difference(ours_disc, torch_logits(disc, input_ids, segment_ids), input_ids),
                 max_difference(ours_gen, torch_logits(gen, input_ids, segment_ids), input_ids))
  print(f'transformers random init -> import: max abs logit difference discriminator '
        f'{differences[0]:.2e}, generator {differences[1]:.2e}')
  assert max(differences) <= TOLERANCE


def test_google_discriminator_with_wordpiece_imports_and_pretrains(tmp_path, wikitext):
  """google/electra-*-discriminator's layout: config.json, weights, vocab.txt; no generator.

  The generator is then initialised afresh at the config file's width, on the
  discriminator's embeddings, and pretraining continues with WordPiece data.
  """
  disc, _ = transformers_pair(seed=1, num_layers=1)
  hf_dir = tmp_path / 'electra-discriminator'
  disc.save_pretrained(hf_dir)
  google_vocab(hf_dir / 'vocab.txt', wikitext)
  (hf_dir / 'tokenizer_config.json').write_text('{"do_lower_case": true}')
  workdir = tmp_path / 'run'
  result = check_cli('electra_jax.import_hf', f'--hf_dir={hf_dir}', f'--workdir={workdir}',
                     f'--config={REPO / "configs" / "tiny.py"}', '--config.max_seq_length=64',
                     '--config.model.generator_hidden_size=16')
  model_flags = result.stdout.split('--config.data.train_files=FILES')[1].split()
  run = exporting.load_run(str(workdir))
  assert (run.vocab.pad_id, run.vocab.unk_id, run.vocab.cls_id, run.vocab.sep_id,
          run.vocab.mask_id) == (0, 100, 101, 102, 103)
  assert run.params['generator']['layer_0']['intermediate']['kernel'].shape == (16, 64)
  assert not run.params['generator_head']['output_bias'].any()  # fresh: zeros
  # Our WordPiece ids are those of transformers' own tokenizer for this directory.
  lines = (wikitext / 'wiki.test.raw').read_text().splitlines()[:1200]
  hf_tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
  assert run.vocab.encode(lines) == hf_tokenizer(lines, add_special_tokens=False)['input_ids']
  input_ids, segment_ids = pair_batch(1000, cls=101, sep=102)
  ours_disc, _ = our_logits(run.params, run.config.model, input_ids, segment_ids)
  assert max_difference(ours_disc, torch_logits(disc, input_ids, segment_ids),
                        input_ids) <= TOLERANCE

  # The trainer continues with the flags import_hf printed, on WordPiece data; it exports.
  check_cli('electra_jax.main', f'--config={REPO / "configs" / "tiny.py"}', f'--workdir={workdir}',
            f'--config.data.train_files={wikitext / "wiki.valid.raw"}', *model_flags,
            '--config.batch_size=8', '--config.max_seq_length=64', '--config.num_train_steps=3',
            '--config.log_every=3', '--config.save_every=3', '--config.eval_every=0')
  out = tmp_path / 'export'
  assert exporting.export_run(str(workdir), str(out)).step == 3
  exported = transformers.AutoTokenizer.from_pretrained(out / 'discriminator')
  pairs = exported(lines[:300], lines[300:600])
  ours = [[101, *a, 102, *b, 102] for a, b in zip(run.vocab.encode(lines[:300]),
                                                  run.vocab.encode(lines[300:600]))]
  assert pairs['input_ids'] == ours


# ---- BERT checkpoints: the discriminator's encoder --------------------------------------------

def bert_checkpoint(directory, wikitext, architecture, seed=3):
  """A jittered random transformers BERT as save_pretrained writes it, with a Google-style
  vocab.txt beside it; returns its BertModel, the encoder to compare with."""
  torch.manual_seed(seed)
  net = getattr(transformers, architecture)(transformers.BertConfig(
      vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
      intermediate_size=128, max_position_embeddings=128))
  with torch.no_grad():
    for parameter in net.parameters():
      parameter.add_(0.05 * torch.randn_like(parameter))
  net.save_pretrained(directory)
  google_vocab(directory / 'vocab.txt', wikitext)
  (directory / 'tokenizer_config.json').write_text('{"do_lower_case": true}')
  return net if architecture == 'BertModel' else net.bert


class SequenceOutput(nn.Module):
  """The discriminator's sequence output, as fine-tuning computes it (finetune.init.encode)."""
  config: ml_collections.ConfigDict
  dtype: jnp.dtype = jnp.float32
  attention: str = 'auto'

  @nn.compact
  def __call__(self, input_ids, segment_ids):
    return finetune_init.encode(self, input_ids, segment_ids, deterministic=True)


def hidden_state_difference(params, model, bert_model):
  input_ids, segment_ids = pair_batch(1000, cls=101, sep=102)
  ours = jax.device_get(SequenceOutput(model).apply({'params': params}, input_ids, segment_ids))
  with torch.no_grad():
    theirs = bert_model.eval()(input_ids=torch.tensor(input_ids),
                               token_type_ids=torch.tensor(segment_ids),
                               attention_mask=torch.tensor(input_ids != 0)).last_hidden_state
  return max_difference(ours, theirs.numpy(), input_ids)


@pytest.mark.parametrize('architecture,left_out', [
    ('BertModel', 'pooler.dense.weight'),
    ('BertForMaskedLM', 'cls.predictions.transform.dense.weight'),
    ('BertForPreTraining', 'cls.seq_relationship.weight')])
def test_a_bert_checkpoint_starts_fine_tuning_as_its_encoder(tmp_path, wikitext, caplog,
                                                            architecture, left_out):
  """BERT's encoder is ELECTRA's discriminator with E = H: fine-tuning from a BERT directory
  computes transformers' BertModel sequence output, and the log names what was left out."""
  bert_model = bert_checkpoint(tmp_path / 'bert', wikitext, architecture)
  with caplog.at_level(logging.INFO, logger='absl'):
    start = finetune_init.from_hf(str(tmp_path / 'bert'))
  assert 'read as an ELECTRA discriminator\'s encoder' in caplog.text and left_out in caplog.text
  assert start.model.embedding_size == start.model.hidden_size == 64
  assert 'embeddings_project' not in start.params['discriminator']
  assert (start.vocab.cls_id, start.vocab.sep_id) == (101, 102)
  difference = hidden_state_difference(start.params, start.model, bert_model)
  print(f'{architecture} -> fine-tuning start: max abs hidden-state difference {difference:.2e}')
  assert difference <= TOLERANCE


def test_a_bert_checkpoint_imports_for_electra_pretraining(tmp_path, wikitext):
  """import_hf: the BERT is the discriminator's encoder; its replaced-token head and the
  generator start afresh. A file with TensorFlow-era LayerNorm names (gamma, beta) reads the
  same."""
  bert_model = bert_checkpoint(tmp_path / 'bert', wikitext, 'BertForPreTraining')
  tensors = safetensors.numpy.load_file(str(tmp_path / 'bert' / 'model.safetensors'))
  old_names = {name.replace('LayerNorm.weight', 'LayerNorm.gamma')
               .replace('LayerNorm.bias', 'LayerNorm.beta'): value
               for name, value in tensors.items()}
  assert len(old_names) == len(tensors) and 'bert.embeddings.LayerNorm.gamma' in old_names
  shutil.copytree(tmp_path / 'bert', tmp_path / 'old')
  safetensors.numpy.save_file(old_names, str(tmp_path / 'old' / 'model.safetensors'),
                              metadata={'format': 'pt'})
  for name in ('bert', 'old'):
    config = importing.import_checkpoint(import_config(), str(tmp_path / f'run_{name}'),
                                         str(tmp_path / name))
    assert config.model.embedding_size == 64 and config.model.num_layers == 2
    run = exporting.load_run(str(tmp_path / f'run_{name}'))
    assert set(run.params) >= {'embeddings', 'discriminator', 'discriminator_head', 'generator'}
    assert hidden_state_difference(run.params, run.config.model, bert_model) <= TOLERANCE


def test_a_fine_tuned_bert_is_refused_by_name(tmp_path, wikitext):
  bert_checkpoint(tmp_path / 'bert', wikitext, 'BertForSequenceClassification')
  with pytest.raises(UsageError) as error:
    finetune_init.from_hf(str(tmp_path / 'bert'))
  assert 'BertForSequenceClassification' in str(error.value)
  assert 'BertForMaskedLM' in str(error.value)  # names what it takes instead


# ---- mistakes: one clear message -------------------------------------------------------------

@pytest.fixture(scope='module')
def hf_pair_dir(tmp_path_factory, vocab):
  directory = tmp_path_factory.mktemp('hf_pair')
  disc, gen = transformers_pair(seed=2)
  disc.save_pretrained(directory / 'discriminator')
  gen.save_pretrained(directory / 'generator')
  shutil.copy(vocab.model_path, directory / 'discriminator' / 'vocab.model')
  return directory


def import_error(tmp_path, hf_dir, **kwargs):
  with pytest.raises(UsageError) as error:
    importing.import_checkpoint(import_config(), str(tmp_path / 'run'), str(hf_dir), **kwargs)
  assert not (tmp_path / 'run').exists()
  return str(error.value)


def edited_copy(hf_pair_dir, tmp_path, edit_tensors=None, edit_config=None):
  directory = tmp_path / 'edited'
  shutil.copytree(hf_pair_dir / 'discriminator', directory)
  if edit_tensors:
    tensors = safetensors.numpy.load_file(str(directory / 'model.safetensors'))
    edit_tensors(tensors)
    safetensors.numpy.save_file(tensors, str(directory / 'model.safetensors'),
                                metadata={'format': 'pt'})
  if edit_config:
    config = json.loads((directory / 'config.json').read_text())
    edit_config(config)
    (directory / 'config.json').write_text(json.dumps(config))
  return directory


def test_not_a_checkpoint_directory(tmp_path, hf_pair_dir):
  (tmp_path / 'empty').mkdir()
  assert 'no config.json' in import_error(tmp_path, tmp_path / 'empty')
  roberta = edited_copy(hf_pair_dir, tmp_path, edit_config=lambda c: c.update(
      model_type='roberta'))
  assert '"roberta" model, not ELECTRA' in import_error(tmp_path, roberta)


def test_missing_unexpected_and_misshapen_tensors(tmp_path, hf_pair_dir):
  name = 'electra.encoder.layer.1.output.dense.weight'
  missing = edited_copy(hf_pair_dir, tmp_path / 'a', edit_tensors=lambda t: t.pop(name))
  assert name in import_error(tmp_path, missing) and 'lacks 1 tensor' in import_error(
      tmp_path, missing)
  extra = edited_copy(hf_pair_dir, tmp_path / 'b',
                      edit_tensors=lambda t: t.update({'classifier.weight': np.zeros((2, 64))}))
  assert 'classifier.weight' in import_error(tmp_path, extra)
  wider = edited_copy(hf_pair_dir, tmp_path / 'c',
                      edit_config=lambda c: c.update(intermediate_size=256))
  message = import_error(tmp_path, wider)
  assert 'electra.encoder.layer.0.intermediate.dense.weight' in message
  assert '[128, 64]' in message and '[256, 64]' in message


def test_vocabulary_of_another_size(tmp_path, hf_pair_dir, wikitext):
  small = vocab_lib.train_vocab([str(wikitext / 'wiki.valid.raw')], 500, str(tmp_path / 'small'))
  message = import_error(tmp_path, hf_pair_dir, vocab_path=small.model_path)
  assert '500 pieces' in message and 'vocab_size=1000' in message


def test_pickled_weights_need_an_explicit_flag(tmp_path, hf_pair_dir):
  directory = edited_copy(hf_pair_dir, tmp_path)
  tensors = safetensors.numpy.load_file(str(directory / 'model.safetensors'))
  torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, directory / 'pytorch_model.bin')
  (directory / 'model.safetensors').unlink()
  assert '--allow_pickle' in import_error(tmp_path, directory)
  unpickled = files.read_tensors(str(directory), allow_pickle=True)
  assert sorted(unpickled) == sorted(tensors)
  assert all(np.array_equal(unpickled[name], tensors[name]) for name in tensors)


def test_command_line_errors_are_one_line(tmp_path):
  for module, args in (('electra_jax.export', [f'--workdir={tmp_path}', f'--out={tmp_path}/o']),
                       ('electra_jax.import_hf', [f'--hf_dir={tmp_path}', f'--workdir={tmp_path}/w',
                                                  f'--config={REPO / "configs" / "tiny.py"}'])):
    error_line(cli(module, *args))


# ---- the linear probes read an export as they read the run -------------------------------------

def test_linear_probe_scores_an_export_as_the_run_it_came_from(trained, tmp_path):
  """The transfer study's linear_probe.py takes a Hugging Face ELECTRA directory as it takes a run: the
  exported encoder probes to the scores of the run's checkpoint, and the random-init row is the
  same network's."""
  from research.transfer_study import linear_probe  # pylint: disable=g-import-not-at-top
  workdir, out = trained
  glue = real_file(SHARED_DATA / 'glue' / 'SST-2' / 'train.tsv').parents[1]
  linear_probe.main([f'--run={workdir}', f'--run={out / "discriminator"}', f'--data_dir={glue}',
                     '--examples=300', '--max_seq_length=64', f'--out={tmp_path / "probe.json"}'])
  runs = json.loads((tmp_path / 'probe.json').read_text())['runs']
  from_run, from_hf = runs[str(workdir)], runs[str(out / 'discriminator')]
  assert from_hf['objective'] == 'hf' and set(from_hf['steps']) == {'0', 'hf'}
  assert from_hf['steps']['hf']['flops'] is None
  assert from_run['steps'][str(TRAIN_STEPS)]['flops'] > 0
  strip = lambda row: {k: v for k, v in row.items() if k != 'flops'}
  assert strip(from_hf['steps']['hf']) == strip(from_run['steps'][str(TRAIN_STEPS)])
  assert strip(from_hf['steps']['0']) == strip(from_run['steps']['0'])
  # The pretrained row is not the random one: the test would notice the export being ignored.
  assert strip(from_hf['steps']['hf']) != strip(from_hf['steps']['0'])
