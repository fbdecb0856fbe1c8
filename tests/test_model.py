"""Model shapes and sizes against the paper's table, and the forward pass against float64 numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from conftest import load_config
from electra_jax.common import config as config_lib
from electra_jax.model import layers, networks as model_lib


def param_shapes(config, seq=16):
  model = model_lib.Electra(config.model)
  return jax.eval_shape(lambda: model_lib.init_params(model, jax.random.PRNGKey(0), seq))


def size(tree):
  return sum(x.size for x in jax.tree.leaves(tree))


@pytest.mark.parametrize('name,width,heads,ffn', [('small', 64, 1, 256), ('base', 256, 4, 1024),
                                                  ('large', 256, 4, 1024)])
def test_generator_sizes_follow_the_paper(name, width, heads, ffn):
  config = load_config(name)
  shapes = param_shapes(config)
  gen = shapes['generator']
  assert config_lib.generator_width(config.model) == width
  assert gen['layer_0']['attention']['query']['kernel'].shape == (width, width)
  assert gen['layer_0']['intermediate']['kernel'].shape == (width, ffn)
  assert len([k for k in gen if k.startswith('layer_')]) == config.model.num_layers
  assert max(1, width // 64) == heads
  # The generator's MLM head maps back to E and projects onto the tied word-embedding table.
  assert shapes['generator_head']['dense']['kernel'].shape == (width, config.model.embedding_size)
  assert shapes['generator_head']['output_bias'].shape == (config.model.vocab_size,)


def test_small_discriminator_has_13_5m_parameters():
  shapes = param_shapes(load_config('small'))
  disc = size(shapes['embeddings']) + size(shapes['discriminator']) + size(shapes['discriminator_head'])
  assert 13.4e6 < disc < 13.6e6, disc


def test_embeddings_shared_and_projected_only_when_widths_differ():
  config = load_config('tiny')
  config.model.generator_hidden_size = 0.5  # E=64: generator H=64, discriminator H=128
  shapes = param_shapes(config)
  assert set(shapes) == {'embeddings', 'generator', 'generator_head', 'discriminator',
                         'discriminator_head'}
  assert 'embeddings_project' not in shapes['generator']
  assert shapes['discriminator']['embeddings_project']['kernel'].shape == (64, 128)
  assert 'pooler' not in str(jax.tree_util.tree_structure(shapes))
  config.model.generator_hidden_size = 0.25  # generator H=32 != E: it gets its own projection
  assert param_shapes(config)['generator']['embeddings_project']['kernel'].shape == (64, 32)


def test_gelu_is_exact_erf():
  x = np.linspace(-6, 6, 1001)
  reference = 0.5 * x * (1 + erf(x / np.sqrt(2)))
  np.testing.assert_allclose(np.asarray(layers.gelu(jnp.asarray(x, jnp.float32))), reference,
                             atol=2e-6)


# ---- float64 numpy reference of the discriminator (BERT post-LN encoder) -------------------------

def _ln(x, p):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-12) * p['scale'] + p['bias']


def _dense(x, p):
  return x @ p['kernel'] + p['bias']


def _gelu(v):
  return 0.5 * v * (1 + erf(v / np.sqrt(2)))


def _reference_encoder(p, ids, segments, num_heads):
  """The embedding block and the discriminator-sized encoder, on float64 parameters `p`."""
  gelu = _gelu
  emb = p['embeddings']
  x = (emb['word_embeddings']['embedding'][ids] + emb['position_embeddings']['embedding'][
      np.arange(ids.shape[1])][None] + emb['token_type_embeddings']['embedding'][segments])
  x = _ln(x, emb['layer_norm'])
  enc = p['discriminator']
  x = _dense(x, enc['embeddings_project'])
  bias = np.where(ids != 0, 0.0, -10000.0)[:, None, None, :]
  b, l, h = x.shape
  for i in range(len([k for k in enc if k.startswith('layer_')])):
    layer = enc[f'layer_{i}']
    heads = lambda t: t.reshape(b, l, num_heads, h // num_heads).transpose(0, 2, 1, 3)
    q, k, v = (heads(_dense(x, layer['attention'][n])) for n in ('query', 'key', 'value'))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(h // num_heads) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, l, h)
    x = _ln(x + _dense(context, layer['attention_output']), layer['attention_layer_norm'])
    x = _ln(x + _dense(gelu(_dense(x, layer['intermediate'])), layer['output']),
            layer['output_layer_norm'])
  return x


def _float64(params):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), params)


def _reference_discriminator(params, ids, segments, num_heads):
  p = _float64(params)
  head = p['discriminator_head']
  x = _reference_encoder(p, ids, segments, num_heads)
  return _dense(_gelu(_dense(x, head['dense'])), head['prediction'])[..., 0]


def _reference_masked_lm(params, ids, segments, positions, num_heads):
  """BERT's MLM head at `positions`: dense -> GELU -> LayerNorm -> tied embeddings + bias."""
  p = _float64(params)
  head = p['mlm_head']
  x = np.take_along_axis(_reference_encoder(p, ids, segments, num_heads), positions[..., None], 1)
  x = _ln(_gelu(_dense(x, head['dense'])), head['layer_norm'])
  return x @ p['embeddings']['word_embeddings']['embedding'].T + head['output_bias']


def test_discriminator_matches_float64_reference():
  config = load_config('tiny')
  config.model.vocab_size = 50
  model = model_lib.Electra(config.model)
  params = model_lib.init_params(model, jax.random.PRNGKey(0), 12)
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 50, (3, 12))
  ids[:, 0], ids[1, 8:] = 2, 0  # [CLS] first; padding in row 1
  segments = np.zeros_like(ids)
  segments[:, 6:] = 1
  ours = model.apply({'params': params}, jnp.asarray(ids), jnp.asarray(segments),
                     method='discriminate')
  reference = _reference_discriminator(params, ids, segments, config.model.num_heads)
  valid = ids != 0
  np.testing.assert_allclose(np.asarray(ours)[valid], reference[valid], atol=2e-5, rtol=1e-4)


def test_masked_lm_is_the_discriminator_encoder_with_an_mlm_head():
  """objective=mlm: Electra's embeddings and discriminator, as they are, plus mlm_head."""
  config = load_config('tiny')
  config.model.vocab_size = 50
  electra = param_shapes(config)
  model = model_lib.MaskedLM(config.model)
  params = jax.tree.map(lambda x: x + 0.01 * np.random.default_rng(0).normal(size=x.shape),
                        model_lib.init_params(model, jax.random.PRNGKey(0), 12))
  assert set(params) == {'embeddings', 'discriminator', 'mlm_head'}
  for name in ('embeddings', 'discriminator'):
    assert jax.tree.map(np.shape, params[name]) == jax.tree.map(np.shape, electra[name]), name
  assert params['mlm_head']['dense']['kernel'].shape == (128, 64)  # H -> E
  rng = np.random.default_rng(1)
  ids = rng.integers(5, 50, (3, 12))
  ids[:, 0], ids[1, 8:] = 2, 0
  segments = (np.arange(12)[None] >= 6).astype(np.int64).repeat(3, 0)
  positions = np.array([[1, 4, 7], [2, 3, 5], [11, 10, 9]])
  ours = model.apply({'params': params}, jnp.asarray(ids), jnp.asarray(segments),
                     jnp.asarray(positions))
  reference = _reference_masked_lm(params, ids, segments, positions, config.model.num_heads)
  assert ours.shape == (3, 3, 50) and ours.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(ours), reference, atol=2e-5, rtol=1e-4)
