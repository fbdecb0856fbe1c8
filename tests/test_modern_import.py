"""A ModernBERT directory read in, with transformers building it (random weights, no network):
as a fine-tuning start (a ModernBertForMaskedLM, as ModernBERT is published, and a bare
ModernBertModel), as a run's start (its encoder the discriminator's, its bottom layers and MLM
head the generator's), and as a frozen generator. Each is checked against transformers' own
outputs within 1e-4, or tensor for tensor."""

import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import tokenizers
from tokenizers import models, pre_tokenizers, processors

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

from conftest import load_config, prepare_wikitext, set_fields  # noqa: E402
from electra_jax.common import cli  # noqa: E402
from electra_jax.common.errors import UsageError  # noqa: E402
from electra_jax.finetune import init as finetune_init  # noqa: E402
from electra_jax.hf import exporting, importing  # noqa: E402
from electra_jax.model import networks  # noqa: E402
from electra_jax.training import generator_modes, train  # noqa: E402

WIDTH, LAYERS, HEADS, FFN, WINDOW, LENGTH = 64, 4, 2, 96, 16, 40
MODERN = {'architecture': 'modern', 'vocab_size': 1000, 'embedding_size': WIDTH,
          'hidden_size': WIDTH, 'num_layers': LAYERS, 'num_heads': HEADS,
          'intermediate_size': FFN, 'local_window': WINDOW, 'generator_hidden_size': 1.0,
          'generator_layers': 0.5, 'max_position_embeddings': 64, 'dropout_rate': 0.0,
          'attention_dropout_rate': 0.0}


@pytest.fixture(scope='module')
def corpus(tmp_path_factory, wikitext):
  del wikitext  # skips where the real data is absent
  return prepare_wikitext(tmp_path_factory.mktemp('modern_import_corpus'), eval_text=False)


@pytest.fixture(scope='module')
def hf_dirs(corpus, tmp_path_factory):
  """A ModernBertForMaskedLM and its bare ModernBertModel, each with the corpus's vocabulary."""
  config = transformers.ModernBertConfig(
      vocab_size=1000, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
      intermediate_size=FFN, local_attention=WINDOW, max_position_embeddings=64,
      pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3)
  torch.manual_seed(0)
  mlm = transformers.ModernBertForMaskedLM(config).eval()
  root = tmp_path_factory.mktemp('modernbert')
  for name, model in (('mlm', mlm), ('encoder', mlm.model)):
    model.save_pretrained(root / name)
    shutil.copy(corpus / 'vocab.model', root / name / 'vocab.model')
  return root / 'mlm', root / 'encoder', mlm


def batch(length=LENGTH):
  ids = np.random.default_rng(0).integers(5, 1000, (3, length))
  ids[1, 23:] = 0
  ids[2, 9:] = 0
  return ids


def torch_hidden(model, ids):
  with torch.no_grad():
    return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(ids != 0),
                 output_hidden_states=True)


class Encoder(nn.Module):
  config: ml_collections.ConfigDict
  attention: str = 'einsum'
  dtype = jnp.float32

  @nn.compact
  def __call__(self, ids):
    return finetune_init.encode(self, ids, ids * 0, True)


@pytest.mark.parametrize('which', ['mlm', 'encoder'])
def test_a_modernbert_directory_starts_fine_tuning(hf_dirs, which):
  mlm_dir, encoder_dir, mlm = hf_dirs
  finetune = ml_collections.ConfigDict({'init_from': str(mlm_dir if which == 'mlm'
                                                         else encoder_dir),
                                        'init_step': 0, 'vocab': '', 'dropout': -1.0,
                                        'reinit': ''})
  start = finetune_init.load_start(finetune)
  assert start.model.architecture == 'modern' and start.vocab.size == 1000
  assert (start.model.num_layers, start.model.global_every, start.model.local_window,
          start.model.rope_theta, start.model.local_rope_theta) == (LAYERS, 3, WINDOW, 160_000.0,
                                                                    10_000.0)
  ids = batch()
  ours = np.asarray(Encoder(start.model).apply({'params': start.params}, jnp.asarray(ids)))
  want = torch_hidden(mlm.model, ids).last_hidden_state.numpy()
  real = ids != 0
  np.testing.assert_allclose(ours[real], want[real], atol=1e-4, rtol=1e-4)


def run_config(corpus, **overrides):
  config = load_config('tiny')
  config.model.update(MODERN)
  config.update(batch_size=8, max_seq_length=32, num_train_steps=2, warmup_steps=0,
                log_every=1, save_every=2, eval_every=0, embedding_sharing='gdes')
  config.data.prepared_dir = str(corpus)
  return set_fields(config, overrides)


def test_a_modernbert_mlm_starts_a_run_that_trains(corpus, hf_dirs, tmp_path):
  mlm_dir, _, mlm = hf_dirs
  workdir = tmp_path / 'run'
  config = importing.import_checkpoint(run_config(corpus), str(workdir), str(mlm_dir))
  assert config.model.architecture == 'modern' and config.model.generator_layers == 0.5
  run = exporting.load_run(str(workdir))
  model = networks.Electra(networks.ModelConfig.of(run.config.model), embedding_sharing='gdes')
  ids = batch(32)
  real = ids != 0
  # The generator: the MLM's bottom 2 layers, its final norm and head, as transformers computes
  # them with the top layers cut off.
  cut = transformers.ModernBertForMaskedLM(mlm.config).eval()
  cut.load_state_dict(mlm.state_dict())
  cut.model.layers = cut.model.layers[:2]
  positions = jnp.broadcast_to(jnp.arange(32), ids.shape)
  generated = np.asarray(model.apply({'params': run.params}, ids, ids * 0, positions,
                                     method=networks.Electra.generate))
  with torch.no_grad():
    want = cut(input_ids=torch.tensor(ids), attention_mask=torch.tensor(real)).logits.numpy()
  np.testing.assert_allclose(generated[real], want[real], atol=1e-4, rtol=1e-4)
  # The discriminator's encoder is the whole MLM's: its weights, tensor for tensor.
  tensors = {k: v.numpy() for k, v in mlm.state_dict().items()}
  for i in range(LAYERS):
    np.testing.assert_array_equal(run.params['discriminator'][f'layer_{i}']['mlp_in']['kernel'],
                                  tensors[f'model.layers.{i}.mlp.Wi.weight'].T)
  np.testing.assert_array_equal(networks.discriminator_view(run.params)['embeddings'][
      'word_embeddings']['embedding'], tensors['model.embeddings.tok_embeddings.weight'])
  cli.run(train.train_and_evaluate, config, str(workdir), importing.read_generator)
  assert exporting.load_run(str(workdir)).step == 2


def test_a_modernbert_mlm_is_a_frozen_generator(corpus, hf_dirs, tmp_path):
  mlm_dir, encoder_dir, mlm = hf_dirs
  config = run_config(corpus, generator_init=str(mlm_dir), embedding_sharing='none',
                      **{'model.generator_layers': 1.0})
  cli.run(train.train_and_evaluate, config, str(tmp_path / 'run'), importing.read_generator)
  params = exporting.load_run(str(tmp_path / 'run')).params
  tensors = {k: v.numpy() for k, v in mlm.state_dict().items()}
  held = {name: params[name] for name in generator_modes.GENERATOR}
  np.testing.assert_array_equal(held['generator_embeddings']['word_embeddings']['embedding'],
                                tensors['model.embeddings.tok_embeddings.weight'])
  np.testing.assert_array_equal(held['generator']['layer_3']['attention']['qkv']['kernel'],
                                tensors['model.layers.3.attn.Wqkv.weight'].T)
  np.testing.assert_array_equal(held['generator_head']['output_bias'], tensors['decoder.bias'])
  with pytest.raises(UsageError, match='without an MLM head'):
    importing.read_generator(str(encoder_dir), config.model)


def test_a_modernbert_padded_as_published_is_read_with_padding_at_0(tmp_path):
  """Published ModernBERT pads with id 50283 (near the end of its tokenizer.json), electra_jax
  with 0: the tokenizer and the vocabulary rows of the weights are read with the two swapped, so
  our encoder on our ids gives transformers' output on its own ids."""
  size, pad = 1000, 997
  words = [f'w{i}' for i in range(size - 5)]
  specials = ['[CLS]', '[SEP]', '[PAD]', '[MASK]', '[UNK]']  # ids 995..999, as ModernBERT's
  tokenizer = tokenizers.Tokenizer(models.WordLevel(
      {t: i for i, t in enumerate(words + specials)}, unk_token='[UNK]'))
  tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  tokenizer.add_special_tokens(specials)
  tokenizer.post_processor = processors.TemplateProcessing(
      single='[CLS] $A [SEP]', special_tokens=[('[CLS]', 995), ('[SEP]', 996)])
  config = transformers.ModernBertConfig(
      vocab_size=size, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
      intermediate_size=FFN, local_attention=WINDOW, max_position_embeddings=64,
      pad_token_id=pad, cls_token_id=995, sep_token_id=996, bos_token_id=995, eos_token_id=996)
  torch.manual_seed(1)
  mlm = transformers.ModernBertForMaskedLM(config).eval()
  mlm.save_pretrained(tmp_path / 'mlm')
  tokenizer.save(str(tmp_path / 'mlm' / 'tokenizer.json'))
  finetune = ml_collections.ConfigDict({'init_from': str(tmp_path / 'mlm'), 'init_step': 0,
                                        'vocab': '', 'dropout': -1.0, 'reinit': ''})
  start = finetune_init.load_start(finetune)
  assert (start.vocab.pad_id, start.vocab.cls_id, start.vocab.file_pad_id) == (0, 995, pad)
  assert start.vocab.encode(['w3 w0 w994']) == [[3, pad, 994]]  # w0 takes the padding's id
  theirs = np.random.default_rng(1).integers(0, size - 5, (3, LENGTH))
  theirs[:, 1] = 0  # the token that ModernBERT numbers 0 is in every sequence
  theirs[1, 23:] = pad
  theirs[2, 9:] = pad
  ours = np.where(theirs == pad, 0, np.where(theirs == 0, pad, theirs))
  got = np.asarray(Encoder(start.model).apply({'params': start.params}, jnp.asarray(ours)))
  with torch.no_grad():
    want = mlm.model(input_ids=torch.tensor(theirs),
                     attention_mask=torch.tensor(theirs != pad)).last_hidden_state.numpy()
  np.testing.assert_allclose(got[ours != 0], want[ours != 0], atol=1e-4, rtol=1e-4)
  # The MLM's output bias (its decoder is the tied word table) is swapped with the rows.
  bias = mlm.decoder.bias.detach().numpy()
  read = importing.files.read_model_dir(str(tmp_path / 'mlm')).tensors['decoder.bias']
  np.testing.assert_array_equal(read[[0, pad, 5]], bias[[pad, 0, 5]])
  # A vocabulary that pads elsewhere than the weights is refused.
  finetune.vocab = str(tmp_path / 'zero.json')
  tokenizers.Tokenizer(models.WordLevel({t: i for i, t in enumerate(
      ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + words)}, unk_token='[UNK]')).save(
          finetune.vocab)
  with pytest.raises(UsageError, match=f'pads with id 0, but .* pad_token_id={pad}'):
    finetune_init.load_start(finetune)
