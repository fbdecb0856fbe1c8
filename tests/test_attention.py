"""The fused attention paths against the einsum path, and the rule that chooses between them.

Pallas's TPU splash attention runs here in Pallas's interpret mode (the kernel as written,
executed on the CPU), so the numbers compared are the kernel's own, not a reference's.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from electra_jax.model import layers

# The smallest sizes the kernel takes: a 128-token block, 2 heads of 64 (base's and small's).
BATCH, LENGTH, HEADS, HEAD_DIM = 2, 128, 2, 64
WIDTH = HEADS * HEAD_DIM
REAL_TOKENS = (LENGTH, 77)  # the second sequence ends in 51 padding tokens, as the packer pads


def batch_mesh():
  """Two of the four CPU devices, one sequence each: the kernel runs under shard_map, per shard."""
  return jax.make_mesh((2,), ('data',), devices=jax.devices()[:2],
                       axis_types=(jax.sharding.AxisType.Auto,))


def padding_mask():
  return jnp.arange(LENGTH)[None, :] < jnp.asarray(REAL_TOKENS)[:, None]


def sharpened(params):
  """The layer's init (std 0.02) gives near-uniform attention, which hides a wrong mask or scale:
  scale Q and K so the scores spread over several units, and V so the outputs are of order 1."""
  factor = {'query': 10.0, 'key': 10.0, 'value': 5.0}
  return {name: jax.tree.map(lambda w, f=factor[name]: w * f, leaf)
          for name, leaf in params.items()}


def assert_close(actual, expected, tol):
  """Every leaf's largest difference within `tol` of the largest expected value of the tree (1 at
  least): the key bias's gradient is 0 in exact arithmetic (softmax ignores a shift shared by all
  keys), so both paths give it rounding noise of the size of the other gradients'."""
  actual = [np.asarray(a, np.float32) for a in jax.tree.leaves(actual)]
  expected = [np.asarray(e, np.float32) for e in jax.tree.leaves(expected)]
  scale = max([1.0] + [float(np.abs(e).max()) for e in expected])
  for a, e in zip(actual, expected, strict=True):
    assert np.abs(a - e).max() <= tol * scale, (np.abs(a - e).max(), scale)


def layer_and_inputs(dtype):
  x = jax.random.normal(jax.random.key(1), (BATCH, LENGTH, WIDTH), jnp.float32).astype(dtype)
  # The Pallas kernel runs in Pallas's interpret mode here; the other paths ignore the field.
  module = lambda impl: layers.SelfAttention(HEADS, 0.1, dtype, impl, interpret=True)
  params = sharpened(module('einsum').init(jax.random.key(0), x, padding_mask(), True)['params'])
  return module, params, x


@pytest.mark.parametrize('dtype,tol', [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_pallas_attention_equals_the_einsum_path_forward_and_backward(dtype, tol):
  module, params, x = layer_and_inputs(dtype)
  mask = padding_mask()
  cotangent = jax.random.normal(jax.random.key(2), (BATCH, LENGTH, WIDTH), jnp.float32)

  def loss(impl, params, x):
    out = module(impl).apply({'params': params}, x, mask, True)
    return jnp.sum(out.astype(jnp.float32) * cotangent), out

  grad = lambda impl: jax.grad(lambda p, x: loss(impl, p, x), argnums=(0, 1), has_aux=True)
  (einsum_params, einsum_x), einsum_out = grad('einsum')(params, x)
  with jax.set_mesh(batch_mesh()):
    (pallas_params, pallas_x), pallas_out = grad('pallas')(params, x)

  assert pallas_out.dtype == einsum_out.dtype == dtype
  assert_close(pallas_out, einsum_out, tol)  # every row, the padded query rows included
  assert_close(pallas_x, einsum_x, tol)
  assert sorted(einsum_params) == ['key', 'query', 'value']  # Q, K and V's kernels and biases
  assert_close(pallas_params, einsum_params, tol)
  # The comparison can fail: with its padding keys attended, the padded sequence's real tokens
  # come out far from the masked answer.
  unmasked = module('einsum').apply({'params': params}, x, jnp.ones_like(mask), True)
  real = slice(0, REAL_TOKENS[1])
  gap = np.asarray(unmasked[1, real], np.float32) - np.asarray(einsum_out[1, real], np.float32)
  assert np.abs(gap).max() > 100 * tol


def jaxpr_of(module, mask, deterministic):
  x = jnp.zeros((BATCH, LENGTH, WIDTH), jnp.bfloat16)
  params = jax.eval_shape(lambda: module.init(jax.random.key(0), x, mask, True))
  rngs = {'dropout': jax.random.key(3)}
  return str(jax.make_jaxpr(lambda p: module.apply(p, x, mask, deterministic, rngs=rngs))(params))


def test_auto_chooses_pallas_on_a_tpu_and_it_runs_only_where_attention_dropout_is_off():
  """'auto' for a TPU (as training/aot.py resolves it before building the model) is Pallas where
  a mesh maps it over the batch's shards; the layer given it then runs the kernel only where
  attention dropout is off and the mask is padding."""
  mask = padding_mask()
  pallas = lambda rate: layers.SelfAttention(HEADS, rate, jnp.bfloat16, 'pallas')
  # No mesh to map the kernel over the batch's shards: einsum.
  assert layers.attention_kernel('auto', jnp.bfloat16, HEAD_DIM, LENGTH, 'tpu') == 'einsum'
  with jax.set_mesh(batch_mesh()):
    assert layers.attention_kernel('auto', jnp.bfloat16, HEAD_DIM, LENGTH, 'tpu') == 'pallas'
    assert 'pallas_call' in jaxpr_of(pallas(0.1), mask, True)
    assert 'pallas_call' in jaxpr_of(pallas(0.0), mask, False)
    # Pretraining with the paper's attention dropout: the einsum path, which applies it.
    assert 'pallas_call' not in jaxpr_of(pallas(0.1), mask, False)
    # A query-by-key mask (Electric's towers) is not segment ids: the einsum path.
    causal = jnp.tril(jnp.ones((BATCH, LENGTH, LENGTH), bool))
    assert 'pallas_call' not in jaxpr_of(pallas(0.0), causal, True)
    # Tracing for this CPU: no kernel of a TPU.
    assert 'pallas_call' not in jaxpr_of(layers.SelfAttention(HEADS, 0.0, jnp.bfloat16), mask,
                                         True)


@pytest.mark.parametrize('platform,dtype,length,expected', [
    ('tpu', jnp.bfloat16, 128, 'pallas'),
    ('tpu', jnp.float32, 512, 'pallas'),
    ('tpu', jnp.bfloat16, 384, 'pallas'),
    ('tpu', jnp.bfloat16, 200, 'einsum'),  # not a multiple of the kernel's 128-token block
    ('tpu', jnp.bfloat16, 64, 'einsum'),
    ('gpu', jnp.bfloat16, 128, 'cudnn'),
    ('gpu', jnp.float32, 128, 'einsum'),
    ('cpu', jnp.bfloat16, 128, 'einsum'),
])
def test_attention_kernel_rule(platform, dtype, length, expected):
  with jax.set_mesh(batch_mesh()):
    assert layers.attention_kernel('auto', dtype, HEAD_DIM, length, platform) == expected


def test_explicit_pallas_where_it_cannot_run_is_refused_with_the_fix():
  with jax.set_mesh(batch_mesh()):
    assert layers.attention_kernel('pallas', jnp.bfloat16, HEAD_DIM, 512) == 'pallas'
    with pytest.raises(ValueError, match=r"multiple of 128.*attention='auto'"):
      layers.attention_kernel('pallas', jnp.bfloat16, HEAD_DIM, 200)
  assert jax.device_count() == 4  # conftest's: without a mesh the kernel cannot be partitioned
  with pytest.raises(ValueError, match=r'no mesh is set.*jax.set_mesh\(mesh\)'):
    layers.attention_kernel('pallas', jnp.bfloat16, HEAD_DIM, 512)
  with pytest.raises(ValueError, match='use one of'):
    layers.attention_kernel('splash', jnp.bfloat16, HEAD_DIM, 128)


def test_pallas_blocks_fit_the_lengths_used():
  """One block spans the sequence up to 512 (each of Q, K, V read once); beyond, blocks of 512 or
  the largest multiple of 128 that divides the length."""
  for length, block in ((128, 128), (256, 256), (384, 384), (512, 512), (1024, 512), (640, 128)):
    assert layers.pallas_block(length) == block


def test_the_pallas_paths_projections_are_nn_dense_heads_first():
  """HeadsFirstDense has nn.Dense's parameters (so checkpoints, exports and the einsum path share
  them) and computes its function, laid out [B, H, L, D] and scaled."""
  x = jax.random.normal(jax.random.key(4), (BATCH, LENGTH, WIDTH), jnp.float32)
  dense = nn.Dense(WIDTH, kernel_init=nn.initializers.truncated_normal(stddev=0.02))
  heads_first = layers.HeadsFirstDense(WIDTH, HEADS)
  params, same = dense.init(jax.random.key(5), x), heads_first.init(jax.random.key(5), x)
  assert jax.tree.structure(same) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, b)
  params = {'params': sharpened({'query': params['params']})['query']}
  expected = dense.apply(params, x).reshape(BATCH, LENGTH, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
  np.testing.assert_allclose(heads_first.apply(params, x, 0.125), 0.125 * expected,
                             rtol=1e-6, atol=1e-6)
