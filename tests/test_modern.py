"""The 'modern' architecture (model/modern.py) against transformers' ModernBERT classes, which
build the reference with random weights (no network): both ways, with padding, at a length
past one local window, within 1e-4 in float32."""

import os
import subprocess
import sys
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

from conftest import REPO, WIKITEXT  # noqa: E402
from electra_jax.hf import exporting, modern as hf_modern  # noqa: E402
from electra_jax.model import modern, networks  # noqa: E402

VOCAB, WIDTH, HEADS, LAYERS, FFN, WINDOW, LENGTH = 97, 64, 4, 4, 96, 8, 24


class Net(nn.Module):
  """Embeddings, a modern encoder and a head: one ModernBERT network, as networks.py composes
  them."""
  mlm: bool
  dtype: jnp.dtype = jnp.float32

  def setup(self):
    self.embeddings = modern.ModernEmbeddings(VOCAB, WIDTH, 0.0, self.dtype)
    self.encoder = modern.ModernEncoder(WIDTH, LAYERS, HEADS, FFN, 0.0, 0.0, WINDOW, 3,
                                        160_000.0, 10_000.0, self.dtype, attention='einsum')
    self.head = modern.ModernHead(WIDTH, VOCAB if self.mlm else 0, self.dtype)

  def __call__(self, ids):
    hidden = self.encoder(self.embeddings(ids, ids, True), ids != 0, True)
    if not self.mlm:
      return self.head(hidden)
    projected, bias = self.head(hidden)
    return self.embeddings.attend(projected) + bias


def assert_ours_match(params, mlm: bool, ids, want):
  """Our logits within 1e-4 of transformers' (float32) in float32, and within 2e-2 computed in
  bfloat16 (parameters float32, as training keeps them)."""
  real = ids != 0
  for dtype, tolerance in ((jnp.float32, 1e-4), (jnp.bfloat16, 2e-2)):
    got = np.asarray(Net(mlm, dtype).apply({'params': params}, jnp.asarray(ids, jnp.int32)),
                     np.float32)
    print(f'{jnp.dtype(dtype).name}: max |ours - transformers| '
          f'{np.abs(got[real] - want[real]).max():.2e}')
    np.testing.assert_allclose(got[real], want[real], atol=tolerance, rtol=tolerance)


def hf_model(mlm: bool):
  config = transformers.ModernBertConfig(
      vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
      intermediate_size=FFN, local_attention=WINDOW, global_attn_every_n_layers=3,
      pad_token_id=0, num_labels=1, max_position_embeddings=64, attn_implementation='eager')
  torch.manual_seed(0)
  cls = transformers.ModernBertForMaskedLM if mlm else transformers.ModernBertForTokenClassification
  return cls(config).eval()


def batch():
  rng = np.random.default_rng(0)
  ids = rng.integers(5, VOCAB, (3, LENGTH))
  ids[1, 17:] = 0  # padding at the end
  ids[2, 9:] = 0
  return ids


@pytest.mark.parametrize('mlm', [False, True], ids=['token_classification', 'masked_lm'])
def test_transformers_weights_give_transformers_logits(mlm):
  reference = hf_model(mlm)
  tensors = {k: v.numpy() for k, v in reference.state_dict().items()}
  kind = 'generator' if mlm else 'discriminator'
  params = hf_modern.from_hf(tensors, 'encoder', 'head', kind, LAYERS, 'test')
  ids = batch()
  with torch.no_grad():
    want = reference(torch.tensor(ids), attention_mask=torch.tensor(ids != 0)).logits.numpy()
  want = want if mlm else want[..., 0]
  assert_ours_match(params, mlm, ids, want)


@pytest.mark.parametrize('mlm', [False, True], ids=['token_classification', 'masked_lm'])
def test_our_weights_load_into_transformers_and_give_our_logits(mlm):
  ids = batch()
  params = Net(mlm).init(jax.random.key(1), jnp.asarray(ids, jnp.int32))['params']
  # Heads and norms start at constants: perturb every tensor so each one is checked.
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(2), len(leaves))
  params = jax.tree.unflatten(tree, [x + 0.05 * jax.random.normal(k, x.shape)
                                     for x, k in zip(leaves, keys)])
  kind = 'generator' if mlm else 'discriminator'
  tensors = hf_modern.to_hf(params, 'encoder', 'head', kind)
  reference = hf_model(mlm)
  missing, unexpected = reference.load_state_dict({k: torch.tensor(v) for k, v in tensors.items()},
                                                  strict=False)
  assert not unexpected and not missing, (missing, unexpected)
  with torch.no_grad():
    want = reference(torch.tensor(ids), attention_mask=torch.tensor(ids != 0)).logits.numpy()
  want = want if mlm else want[..., 0]
  assert_ours_match(params, mlm, ids, want)


def test_a_local_layer_sees_only_its_window():
  """The gradient of a local layer's output at q with respect to token k is zero exactly when
  |q - k| > window // 2, and nonzero inside the band."""
  layer = modern.ModernLayer(HEADS, FFN, 0.0, 0.0, 10_000.0, WINDOW, False, attention='einsum')
  x = jax.random.normal(jax.random.key(0), (1, LENGTH, WIDTH))
  mask = jnp.ones((1, LENGTH), bool)
  params = layer.init(jax.random.key(1), x, mask, True)
  query = 12
  grads = jax.grad(lambda x: layer.apply(params, x, mask, True)[0, query].sum())(x)
  reach = np.abs(np.asarray(grads[0])).sum(-1) > 0
  distance = np.abs(np.arange(LENGTH) - query)
  np.testing.assert_array_equal(reach, distance <= WINDOW // 2)


# ---- a trained tiny modern run, exported by the command line and read by transformers ------

MODERN_TINY = {'architecture': 'modern', 'vocab_size': 1000, 'embedding_size': 64,
               'hidden_size': 64, 'num_layers': 4, 'num_heads': 2, 'intermediate_size': 96,
               'generator_hidden_size': 1.0, 'generator_layers': 0.5, 'local_window': 16,
               'dropout_rate': 0.0, 'attention_dropout_rate': 0.0}
TRAIN_STEPS = 80


def cli(*args):
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}
  result = subprocess.run([sys.executable, '-m', *map(str, args)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@pytest.fixture(scope='module')
def trained(tmp_path_factory, wikitext):
  workdir = tmp_path_factory.mktemp('modern')
  cli('electra_jax.main', f'--config={REPO / "configs" / "tiny.py"}', f'--workdir={workdir}',
      f'--config.data.train_files={wikitext / "wiki.valid.raw"}',
      *[f'--config.model.{k}={v}' for k, v in MODERN_TINY.items()],
      '--config.embedding_sharing=gdes', '--config.batch_size=16', '--config.max_seq_length=64',
      '--config.learning_rate=2e-3', '--config.warmup_steps=20',
      f'--config.num_train_steps={TRAIN_STEPS}', f'--config.log_every={TRAIN_STEPS}',
      f'--config.save_every={TRAIN_STEPS}', '--config.eval_every=0')
  out = workdir / 'export'
  cli('electra_jax.export', f'--workdir={workdir}', f'--out={out}')
  return workdir, out


def real_batch(vocab, length=64):
  """WikiText lines as [CLS] text [SEP], the first row full and the others padded."""
  lines = [line for line in (WIKITEXT / 'wiki.test.raw').read_text().splitlines()
           if len(line.split()) > 40][:4]
  ids = np.zeros((len(lines), length), np.int32)
  for row, (line, keep) in enumerate(zip(lines, (length - 2, 40, 25, 12))):
    pieces = vocab.encode([line])[0][:keep]
    ids[row, :len(pieces) + 2] = [vocab.cls_id, *pieces, vocab.sep_id]
  return ids


def torch_out(model, ids):
  with torch.no_grad():
    return model.eval()(input_ids=torch.tensor(ids), attention_mask=torch.tensor(ids != 0))


def test_the_export_gives_our_logits_in_transformers(trained):
  workdir, out = trained
  run = exporting.load_run(str(workdir))
  model = networks.Electra(networks.ModelConfig.of(run.config.model), embedding_sharing='gdes')
  ids = real_batch(run.vocab)
  assert (ids[0] != 0).all() and (ids[1:] == 0).any(axis=1).all()
  positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
  ours_disc = np.asarray(model.apply({'params': run.params}, ids, ids * 0,
                                     method=networks.Electra.discriminate))
  ours_gen = np.asarray(model.apply({'params': run.params}, ids, ids * 0, positions,
                                    method=networks.Electra.generate))
  detector = transformers.ModernBertForTokenClassification.from_pretrained(out / 'discriminator')
  generator = transformers.ModernBertForMaskedLM.from_pretrained(out / 'generator')
  assert generator.config.num_hidden_layers == 2 and detector.config.num_hidden_layers == 4
  real = ids != 0
  np.testing.assert_allclose(ours_disc[real], torch_out(detector, ids).logits.numpy()[..., 0][real],
                             atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(ours_gen[real], torch_out(generator, ids).logits.numpy()[real],
                             atol=1e-4, rtol=1e-4)
  encoder, info = transformers.ModernBertModel.from_pretrained(out / 'discriminator',
                                                               output_loading_info=True)
  assert not info['missing_keys'], info
  hidden = torch_out(encoder, ids).last_hidden_state.numpy()
  assert np.isfinite(hidden).all() and hidden.shape == (*ids.shape, 64)
  tokenizer = transformers.AutoTokenizer.from_pretrained(out / 'discriminator')
  line = (WIKITEXT / 'wiki.test.raw').read_text().splitlines()[10]
  assert tokenizer(line)['input_ids'] == [run.vocab.cls_id, *run.vocab.encode([line])[0],
                                          run.vocab.sep_id]


def test_the_trained_export_detects_random_replacements_in_transformers(trained):
  _, out = trained
  detector = transformers.ModernBertForTokenClassification.from_pretrained(out / 'discriminator')
  tokenizer = transformers.AutoTokenizer.from_pretrained(out / 'discriminator')
  lines = [line for line in (WIKITEXT / 'wiki.test.raw').read_text().splitlines()
           if len(line.split()) > 30][:64]
  rng = np.random.default_rng(0)
  scores, labels = [], []
  for line in lines:
    ids = np.array(tokenizer(line, truncation=True, max_length=64)['input_ids'])
    replaced = np.zeros(len(ids), bool)
    replaced[1:-1] = rng.random(len(ids) - 2) < 0.15
    ids[replaced] = rng.integers(5, tokenizer.vocab_size, replaced.sum())
    logits = torch_out(detector, ids[None]).logits.numpy()[0, :, 0]
    scores += list(logits[1:-1])
    labels += list(replaced[1:-1])
  from sklearn.metrics import roc_auc_score
  auc = roc_auc_score(labels, scores)
  print(f'AUC of the exported discriminator on random replacements, read by transformers: {auc:.3f}')
  assert auc > 0.55, auc


@pytest.mark.parametrize('documents', [False, True])
def test_banded_local_attention_equals_the_dense_band(documents):
  """Past twice the window, a local layer attends in blocks (cost ~ L x window); it computes what
  the dense band mask computes, padding and document ids included."""
  length, window = 80, 8
  x = jax.random.normal(jax.random.key(0), (2, length, WIDTH))
  mask = jnp.arange(length)[None, :] < jnp.asarray([length, 53])[:, None]
  if documents:
    mask = jnp.where(mask, 1 + jnp.arange(length)[None, :] // 23, 0)
  layer = modern.RotaryAttention(HEADS, 0.0, 10_000.0, window, implementation='einsum')
  params = jax.tree.map(lambda w: w * 8.0, layer.init(jax.random.key(1), x, mask, True))
  banded = layer.apply(params, x, mask, True)
  dense = modern.RotaryAttention(HEADS, 0.0, 10_000.0, window, implementation='xla').apply(
      params, x, mask, True)
  real = np.asarray(mask) != 0
  np.testing.assert_allclose(np.asarray(banded)[real], np.asarray(dense)[real], atol=1e-5,
                             rtol=1e-5)


@pytest.mark.slow  # run with -m slow (about 30 s of a 2-core CI machine)
def test_an_8192_token_step_trains_and_local_layers_cost_the_window():
  """ModernBERT's length on a CPU: a tiny modern encoder at 8,192 tokens computes finite outputs
  and gradients, and XLA's FLOP count of a local layer grows with the window, not with L²."""
  def layer_flops(length, window):
    layer = modern.RotaryAttention(2, 0.0, 10_000.0, window, implementation='einsum')
    x = jax.ShapeDtypeStruct((1, length, 64), jnp.float32)
    mask = jax.ShapeDtypeStruct((1, length), jnp.bool_)
    params = jax.eval_shape(lambda: layer.init(jax.random.key(0), jnp.zeros(x.shape),
                                               jnp.ones(mask.shape, bool), True))
    step = jax.jit(jax.grad(lambda p, x, m: layer.apply(p, x, m, True).sum()))
    return step.lower(params, x, mask).compile().cost_analysis()['flops']
  local_4k, local_8k = layer_flops(4096, 128), layer_flops(8192, 128)
  global_4k, global_8k = layer_flops(4096, 0), layer_flops(8192, 0)
  print(f"FLOPs of a layer's forward and backward: local (128) {local_4k:.3g} at 4,096 and "
        f'{local_8k:.3g} at 8,192; global {global_4k:.3g} and {global_8k:.3g}')
  assert 1.9 < local_8k / local_4k < 2.2  # linear in the length
  assert global_8k / global_4k > 3.5      # quadratic
  assert local_8k < global_8k / 10
  encoder = modern.ModernEncoder(32, 3, 2, 48, 0.0, 0.0, 128, 3, 160_000.0, 10_000.0)
  ids = jax.random.randint(jax.random.key(1), (1, 8192), 5, 100)
  x = jax.random.normal(jax.random.key(2), (1, 8192, 32))
  params = encoder.init(jax.random.key(3), x, ids != 0, True)
  loss, grads = jax.value_and_grad(lambda p: encoder.apply(p, x, ids != 0, True).sum())(params)
  assert np.isfinite(float(loss)) and all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def finetuned_config(pooling='cls'):
  from electra_jax.common.config import default_config  # pylint: disable=g-import-not-at-top
  model = default_config().model
  model.update(architecture='modern', vocab_size=VOCAB, embedding_size=WIDTH, hidden_size=WIDTH,
               num_layers=LAYERS, num_heads=HEADS, intermediate_size=FFN, local_window=WINDOW,
               dropout_rate=0.0, attention_dropout_rate=0.0)
  return ml_collections.ConfigDict({'model': model, 'task': 'MRPC', 'pooling': pooling,
                                    'head_dropout': 0.1})


@pytest.mark.parametrize('network,pooling', [('sequence', 'cls'), ('sequence', 'mean'),
                                             ('tagger', 'cls'), ('qa', 'cls')])
def test_finetuned_heads_export_as_modernberts_task_classes(network, pooling, tmp_path):
  """Each family's head on a modern encoder, written as finetune/export.py writes a seed, is
  transformers' ModernBertFor<task> class computing our logits."""
  from electra_jax.finetune import export as finetune_export  # pylint: disable=g-import-not-at-top
  from electra_jax.finetune.glue.model import Classifier  # pylint: disable=g-import-not-at-top
  from electra_jax.finetune.squad.model import QuestionAnswerer  # pylint: disable=g-import-not-at-top
  from electra_jax.finetune.tagging.run import Tagger  # pylint: disable=g-import-not-at-top
  from electra_jax.hf import files  # pylint: disable=g-import-not-at-top
  config = finetuned_config(pooling)
  labels = {'sequence': ['0', '1'], 'tagger': ['B-NP', 'I-NP', 'O'], 'qa': ['start', 'end']}
  model = {'sequence': lambda: Classifier(config.model, 2, pooling=pooling, head='transformers',
                                          attention='einsum'),
           'tagger': lambda: Tagger(config.model, 3, attention='einsum'),
           'qa': lambda: QuestionAnswerer(config.model, head='plain', attention='einsum')}[network]()
  ids = jnp.asarray(batch(), jnp.int32)
  segments = (ids != 0).astype(jnp.int32)  # every real token may hold an answer
  params = model.init(jax.random.key(2), ids, segments)['params']
  ours = model.apply({'params': params}, ids, segments)
  special = types.SimpleNamespace(pad_id=0, cls_id=1, sep_id=2)
  hf_config = finetune_export.model_config_json(config, network, labels[network], special)
  files.write_model_dir(str(tmp_path), hf_config, hf_modern.to_hf(params, 'discriminator', 'head',
                                                                   network))
  theirs = getattr(transformers, hf_config['architectures'][0]).from_pretrained(
      tmp_path, attn_implementation='eager')
  out = torch_out(theirs, np.asarray(ids))
  real = np.asarray(ids) != 0
  if network == 'qa':
    for name in ('start_logits', 'end_logits'):
      np.testing.assert_allclose(np.asarray(ours[name])[real], getattr(out, name).numpy()[real],
                                 atol=1e-4, rtol=1e-4)
  elif network == 'tagger':
    np.testing.assert_allclose(np.asarray(ours)[real], out.logits.numpy()[real], atol=1e-4,
                               rtol=1e-4)
  else:
    np.testing.assert_allclose(np.asarray(ours), out.logits.numpy(), atol=1e-4, rtol=1e-4)


def test_the_export_comes_back_as_the_run_it_was(trained, tmp_path):
  """import_hf on our own export (discriminator/ and generator/, GDES): every tensor returns."""
  from conftest import load_config  # pylint: disable=g-import-not-at-top
  from electra_jax.hf import importing  # pylint: disable=g-import-not-at-top
  workdir, out = trained
  run = exporting.load_run(str(workdir))
  config = load_config('tiny')
  config.update(embedding_sharing='gdes', max_seq_length=64)
  config.data.train_files = 'unused.txt'
  imported = importing.import_checkpoint(config, str(tmp_path / 'run'), str(out))
  assert imported.model.generator_layers == 0.5 and imported.model.local_window == 16
  back = exporting.load_run(str(tmp_path / 'run')).params
  assert jax.tree.structure(back) == jax.tree.structure(run.params)
  for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(run.params)):
    np.testing.assert_allclose(a, b, atol=1e-6)
