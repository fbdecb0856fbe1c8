"""config.embedding_sharing='gdes': DeBERTa-v3's gradient-disentangled embedding sharing.

The discriminator reads stop_gradient(word table) + its own zero-initialised residual, so the
RTD loss sends the generator's word table exactly nothing; 'shared' (the default) is untouched.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from electra_jax.core import model as model_lib
from electra_jax.hf import exporting

MODEL = ml_collections.ConfigDict(dict(
    vocab_size=40, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
    intermediate_size=32, generator_hidden_size=0.5, max_position_embeddings=16,
    type_vocab_size=2, dropout_rate=0.0, attention_dropout_rate=0.0))
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
  from electra_jax.core import config as config_lib  # pylint: disable=g-import-not-at-top
  from electra_jax.core.errors import UsageError  # pylint: disable=g-import-not-at-top
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  config.embedding_sharing = 'tied'
  with pytest.raises(UsageError, match="embedding_sharing='tied': use one of shared, gdes"):
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
