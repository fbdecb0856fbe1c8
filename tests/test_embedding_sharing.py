"""config.embedding_sharing: what the generator shares with the discriminator.

'gdes' (DeBERTa-v3's gradient-disentangled sharing): the discriminator reads
stop_gradient(word table) + its own zero-initialised residual, so the RTD loss sends the
generator's word table exactly nothing; 'shared' (the default) is untouched. 'none': an embedding
block each, so each loss trains only its own. 'all': the generator runs the discriminator's
encoder. Export writes each network's own weights; tests/test_every_switch.py trains and exports
each mode through the trainer.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from electra_jax.model import networks as model_lib
from electra_jax.common import config as config_lib
from electra_jax.hf import exporting

MODEL = ml_collections.ConfigDict({**config_lib.default_config().model.to_dict(), **dict(
    vocab_size=40, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
    intermediate_size=32, generator_hidden_size=0.5, generator_layers=1.0,
    max_position_embeddings=16,
    type_vocab_size=2, dropout_rate=0.0, attention_dropout_rate=0.0)})
IDS = jnp.array([[2, 7, 9, 11, 3, 0], [2, 5, 6, 8, 13, 3]])
LABELS = jnp.array([[0., 1., 0., 0., 0., 0.], [0., 0., 1., 0., 1., 0.]])
WORDS = ('embeddings', 'word_embeddings', 'embedding')


@pytest.fixture(scope='module')
def models():
  shared, gdes = model_lib.Electra(MODEL), model_lib.Electra(MODEL, embedding_sharing='gdes')
  params = model_lib.init_params(gdes, jax.random.PRNGKey(0), IDS.shape[1])
  return shared, gdes, params


def rtd_loss(model, params):
  logits = model.apply({'params': params}, IDS, jnp.zeros_like(IDS), method='discriminate')
  per_token = -(LABELS * jax.nn.log_sigmoid(logits) + (1 - LABELS) * jax.nn.log_sigmoid(-logits))
  return jnp.sum(per_token * (IDS != 0))


def mlm_loss(model, params):
  positions = jnp.array([[1, 2], [3, 4]])
  logits = model.apply({'params': params}, IDS, jnp.zeros_like(IDS), positions, method='generate')
  return -jnp.sum(jax.nn.log_softmax(logits)[..., 0])


def get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def test_gdes_starts_as_shared_and_keeps_rtd_gradients_off_the_generators_table(models):
  shared, gdes, params = models
  np.testing.assert_array_equal(params['embedding_delta'], 0.0)
  without_delta = {k: v for k, v in params.items() if k != 'embedding_delta'}
  # At init (delta = 0) the two compute the same discriminator.
  np.testing.assert_array_equal(rtd_loss(gdes, params), rtd_loss(shared, without_delta))

  grads = jax.jit(jax.grad(lambda p: rtd_loss(gdes, p)))(params)
  np.testing.assert_array_equal(get(grads, WORDS), 0.0)  # exactly zero, not just small
  delta_grad = np.asarray(grads['embedding_delta'])
  # The discriminator's effective table moves: the rows of the tokens it read.
  read = np.unique(np.asarray(IDS[IDS != 0]))
  assert np.all(np.abs(delta_grad[read]).sum(-1) > 0)
  assert np.all(delta_grad[np.setdiff1d(np.arange(40), read)] == 0)
  # Under 'shared' the same loss does reach the table, with what GDES sends the delta.
  shared_grads = jax.jit(jax.grad(lambda p: rtd_loss(shared, p)))(without_delta)
  np.testing.assert_allclose(get(shared_grads, WORDS), delta_grad, rtol=1e-5, atol=1e-7)

  # The generator's MLM loss trains the table and never the delta.
  mlm_grads = jax.jit(jax.grad(lambda p: mlm_loss(gdes, p)))(params)
  np.testing.assert_array_equal(mlm_grads['embedding_delta'], 0.0)
  assert np.abs(get(mlm_grads, WORDS)).sum() > 0


def test_export_and_fine_tuning_take_the_discriminators_effective_table(models):
  _, gdes, params = models
  params = jax.tree.map(np.asarray, params)
  params['embedding_delta'] = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
  table = get(params, WORDS).copy()
  name = 'electra.embeddings.word_embeddings.weight'
  np.testing.assert_array_equal(exporting.network_tensors(params, 'discriminator')[name],
                                table + params['embedding_delta'])
  np.testing.assert_array_equal(exporting.network_tensors(params, 'generator')[name], table)
  view = model_lib.discriminator_view(params)
  assert 'embedding_delta' not in view and 'embedding_delta' in params  # input not modified
  np.testing.assert_array_equal(get(params, WORDS), table)
  # What the discriminator computes with the delta equals it on the folded table.
  folded = gdes.apply({'params': {**view, 'embedding_delta': np.zeros((40, 8), np.float32)}},
                      IDS, jnp.zeros_like(IDS), method='discriminate')
  np.testing.assert_allclose(
      gdes.apply({'params': params}, IDS, jnp.zeros_like(IDS), method='discriminate'), folded,
      rtol=1e-5, atol=1e-6)


def test_embedding_sharing_is_checked(tmp_path):
  from electra_jax.common import config as config_lib  # pylint: disable=g-import-not-at-top
  from electra_jax.common.errors import UsageError  # pylint: disable=g-import-not-at-top
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  config.embedding_sharing = 'tied'
  with pytest.raises(UsageError,
                     match="embedding_sharing='tied': use one of shared, gdes, none, all"):
    config_lib.validate(config, 1)
  config.update(embedding_sharing='gdes', objective='mlm')
  with pytest.raises(UsageError, match="applies to objectives electra and electra_15, not 'mlm'"):
    config_lib.validate(config, 1)
  config.objective = 'electra_15'
  config_lib.validate(config, 1)

  # A workdir remembers its sharing (runs saved before the field existed are 'shared').
  config_lib.save_config(config, str(tmp_path))
  config.embedding_sharing = 'shared'
  with pytest.raises(UsageError, match="embedding_sharing 'gdes'.*--config.embedding_sharing=gdes"):
    config_lib.check_workdir_config(config, str(tmp_path))


# ---- 'none' and 'all' (the paper's section 3.2) ----------------------------------------------

# 'all' needs the generator's shape to be the discriminator's: 64-wide heads, a 4x FFN.
SAME_SIZE = ml_collections.ConfigDict({**MODEL.to_dict(), 'hidden_size': 64, 'num_heads': 1,
                                       'intermediate_size': 256, 'generator_hidden_size': 1.0})


def test_none_gives_each_network_its_own_embeddings_and_each_loss_trains_only_its_own():
  none = model_lib.Electra(MODEL, embedding_sharing='none')
  params = model_lib.init_params(none, jax.random.PRNGKey(0), IDS.shape[1])
  assert set(params['generator_embeddings']) == set(params['embeddings'])
  generator_words = params['generator_embeddings']['word_embeddings']['embedding']
  assert not np.array_equal(get(params, WORDS), generator_words)
  rtd = jax.jit(jax.grad(lambda p: rtd_loss(none, p)))(params)
  mlm = jax.jit(jax.grad(lambda p: mlm_loss(none, p)))(params)
  for block in ('word_embeddings', 'position_embeddings', 'token_type_embeddings', 'layer_norm'):
    for leaf in jax.tree.leaves(rtd['generator_embeddings'][block]):
      np.testing.assert_array_equal(leaf, 0.0)
    for leaf in jax.tree.leaves(mlm['embeddings'][block]):
      np.testing.assert_array_equal(leaf, 0.0)
  assert np.abs(get(rtd, WORDS)).sum() > 0
  assert np.abs(mlm['generator_embeddings']['word_embeddings']['embedding']).sum() > 0
  # The generator's tied output matrix is its own table too: its logits move with it alone.
  bumped = {**params, 'embeddings': jax.tree.map(lambda x: x + 1.0, params['embeddings'])}
  positions = jnp.array([[1, 2], [3, 4]])
  generate = lambda p: none.apply({'params': p}, IDS, jnp.zeros_like(IDS), positions,
                                  method='generate')
  np.testing.assert_array_equal(generate(bumped), generate(params))

  exported = {n: exporting.network_tensors(jax.tree.map(np.asarray, params), n)
              for n in ('discriminator', 'generator')}
  name = 'electra.embeddings.word_embeddings.weight'
  np.testing.assert_array_equal(exported['discriminator'][name], get(params, WORDS))
  np.testing.assert_array_equal(exported['generator'][name],
                                params['generator_embeddings']['word_embeddings']['embedding'])


def test_all_runs_the_generator_on_the_discriminators_encoder():
  tied = model_lib.Electra(SAME_SIZE, embedding_sharing='all')
  params = model_lib.init_params(tied, jax.random.PRNGKey(1), IDS.shape[1])
  assert 'generator' not in params and {'discriminator', 'generator_head'} <= set(params)
  # The same logits as an untied model whose generator holds a copy of the discriminator.
  untied = model_lib.Electra(SAME_SIZE)
  copied = {**params, 'generator': params['discriminator']}
  positions = jnp.array([[1, 2], [3, 4]])
  logits = lambda model, p: model.apply({'params': p}, IDS, jnp.zeros_like(IDS), positions,
                                        method='generate')
  np.testing.assert_array_equal(logits(tied, params), logits(untied, copied))
  # Both losses train the one encoder.
  for loss in (mlm_loss, rtd_loss):
    grads = jax.jit(jax.grad(lambda p, loss=loss: loss(tied, p)))(params)
    assert np.abs(grads['discriminator']['layer_0']['attention']['query']['kernel']).sum() > 0
  exported = exporting.network_tensors(jax.tree.map(np.asarray, params), 'generator')
  key = 'electra.encoder.layer.0.attention.self.query.weight'
  query = params['discriminator']['layer_0']['attention']['query']['kernel']
  np.testing.assert_array_equal(exported[key], np.asarray(query).T)


def test_all_refuses_a_generator_of_another_size():
  from electra_jax.common import config as config_lib  # pylint: disable=g-import-not-at-top
  from electra_jax.common.errors import UsageError  # pylint: disable=g-import-not-at-top
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  config.embedding_sharing = 'all'
  config.model.update(MODEL.to_dict())
  config.max_seq_length = IDS.shape[1]
  with pytest.raises(UsageError, match=r"ties every generator weight.*\(8, 1, 32, 1\), the "
                                       r"discriminator \(16, 2, 32, 1\).*generator_hidden_size=1.0"):
    config_lib.validate(config, 1)
  config.model.update(SAME_SIZE.to_dict())
  config_lib.validate(config, 1)
