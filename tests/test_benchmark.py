"""The benchmark's arithmetic, its command line, the PyTorch peer, fused attention, one compile."""

import importlib.util
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO, compile_train_step, load_config
from electra_jax import benchmark, objective
from electra_jax.training import flops, optim
from electra_jax.model import layers, networks as model_lib
from electra_jax.training import train

RECORD_FIELDS = (
    'framework', 'device_kind', 'device_count', 'dtype', 'batch_size', 'max_seq_length', 'steps',
    'median_step_s', 'tokens_per_s', 'model_flops_per_step', 'achieved_flops_per_s',
    'peak_flops_per_s', 'peak_source', 'mfu', 'peak_memory_bytes', 'steady_state', 'final_loss')


def hand_sized_config():
  """E 64, H 128 (2 layers, 2 heads, FFN 512), generator 32 wide; 8 x 32 tokens, vocab 300."""
  config = load_config('tiny')
  config.model.vocab_size, config.max_seq_length, config.batch_size = 300, 32, 8
  config.warmup_steps = 0
  return config


def one_layer_config():
  """The hand-sized model with one layer: the tests that compile whole steps compile less."""
  config = hand_sized_config()
  config.model.num_layers = 1
  return config


def test_flops_match_a_hand_count():
  # T = 8 * 32 = 256 tokens; N = int(0.155 * 32) = 4 slots, so P = 32 positions.
  expected = {
      # projection 2*256*64*32 + 2 layers * 2*256*(4*32*32 + 2*32*128)
      'generator': 1_048_576 + 2 * 6_291_456,
      'generator_attention': 2 * 2 * 2 * 256 * 32 * 32,        # 2 layers x (QK^T + PV)
      'generator_head': 2 * 32 * 32 * 64,
      'vocabulary_projection': 2 * 32 * 64 * 300,
      # projection 2*256*64*128 + 2 layers * 2*256*(4*128*128 + 2*128*512)
      'discriminator': 4_194_304 + 2 * 100_663_296,
      'discriminator_attention': 2 * 2 * 2 * 256 * 32 * 128,
      'discriminator_head': 2 * 256 * 128 * 128 + 2 * 256 * 128,
  }
  assert flops.forward_flops(hand_sized_config()) == expected
  assert flops.train_step_flops(hand_sized_config()) == 3 * 239_452_160
  # A generator of one layer (generator_layers=0.5): one layer's projections and attention.
  shallow = hand_sized_config()
  shallow.model.generator_layers = 0.5
  expected.update(generator=1_048_576 + 6_291_456, generator_attention=2 * 2 * 256 * 32 * 32)
  assert flops.forward_flops(shallow) == expected


def test_mlm_flops_match_a_hand_count():
  """objective=mlm: the discriminator-sized encoder and BERT's head, no generator."""
  config = hand_sized_config()
  config.objective = 'mlm'
  expected = {
      'discriminator': 4_194_304 + 2 * 100_663_296,            # as in the ELECTRA count above
      'discriminator_attention': 2 * 2 * 2 * 256 * 32 * 128,
      'mlm_head': 2 * 32 * 128 * 64,                           # H -> E at P = 32 positions
      'vocabulary_projection': 2 * 32 * 64 * 300,
  }
  assert flops.forward_flops(config) == expected
  assert flops.train_step_flops(config) == 3 * 215_662_592


def xla_over_ours(config) -> float:
  """XLA's FLOPs of the compiled train step over flops.train_step_flops's."""
  compiled, _ = compile_train_step(config)
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost
  ratio = cost['flops'] / flops.train_step_flops(config)
  print(f'XLA counts {cost["flops"]:.3e} FLOPs, {ratio:.2f}x ours')
  return ratio


@pytest.mark.parametrize('objective_name', [
    'electra', 'mlm', pytest.param('replace_mlm', marks=pytest.mark.slow),
    pytest.param('all_tokens_mlm', marks=pytest.mark.slow)])
def test_flops_are_the_bulk_of_what_xla_counts(objective_name):
  """XLA's own count of the compiled step: our matmuls plus elementwise work and the optimizer."""
  config = hand_sized_config()
  config.objective = objective_name
  assert 1.0 <= xla_over_ours(config) <= 1.5


def test_peak_table_matches_the_most_specific_kind():
  assert flops.table_peak_flops('NVIDIA H100 80GB HBM3') == 989e12
  assert flops.table_peak_flops('NVIDIA H100 PCIe') == 756e12
  assert flops.table_peak_flops('NVIDIA H200') == 989e12
  assert flops.table_peak_flops('TPU v5 lite') == 197e12
  assert flops.table_peak_flops('TPU v4') == 275e12
  assert flops.table_peak_flops('cpu') is None


def test_synthetic_batches_are_packed_like_examples():
  special = objective.SpecialIds()
  batch = benchmark.synthetic_batch(np.random.default_rng(0), 2000, 64, 300)
  ids, segments = batch['input_ids'], batch['segment_ids']
  lengths = (ids != special.pad).sum(1)
  assert ids.dtype == segments.dtype == np.int32
  assert (ids[:, 0] == special.cls).all()
  assert (ids[np.arange(2000), lengths - 1] == special.sep).all()
  is_token = ids != special.pad
  assert (np.sort(is_token, axis=1)[:, ::-1] == is_token).all()  # padding only at the end
  assert 0.93 < (lengths == 64).mean() < 0.97
  seps = (ids == special.sep).sum(1)
  assert set(seps) == {1, 2} and 0.07 < (seps == 1).mean() < 0.13
  assert (segments[ids == special.pad] == 0).all() and (segments[:, 0] == 0).all()
  assert (segments[np.arange(2000), lengths - 1] == (seps == 2)).all()  # the last [SEP] is B's
  assert ids[ids > special.mask].max() < 300


def test_timing_summary_compares_early_and_late_steps():
  times = [1.0] * 120 + [2.0] * 100 + [1.5] * 100
  summary = benchmark.timing_summary(times)
  assert summary['median_step_s'] == 1.5
  assert summary['steady_state']['early_median_s'] == 1.0
  assert summary['steady_state']['late_median_s'] == 1.5
  assert summary['steady_state']['late_steps'] == [220, 320]
  assert benchmark.timing_summary(times[:100])['steady_state'] is None


def test_benchmark_command_prints_one_json_record():
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '2'}
  result = subprocess.run(
      [sys.executable, '-m', 'electra_jax.benchmark', '--config=configs/tiny.py',
       '--config.model.vocab_size=300', '--config.batch_size=8', '--config.max_seq_length=32',
       '--config.model.attention_dropout_rate=0', '--config.attention=xla', '--steps=3', '--warmup=1',
       '--peak_matmul_size=256'],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True)
  lines = [line for line in result.stdout.splitlines() if line.strip()]
  assert len(lines) == 1
  record = json.loads(lines[0])
  assert set(RECORD_FIELDS) <= set(record)
  assert record['device_count'] == 2 and record['batch_size'] == 8 and record['steps'] == 3
  assert record['compilations'] == 1 and record['attention'] == 'xla'
  assert record['model_flops_per_step'] == 3 * 239_452_160
  assert 0 < record['mfu'] and np.isfinite(record['final_loss'])
  assert record['tokens_per_s'] == pytest.approx(8 * 32 / record['median_step_s'])
  # Steps dispatched back to back: never slower than the slowest step timed to completion.
  assert 0 < record['pipelined_step_s'] < 2 * record['max_step_s']
  assert record['pipelined_tokens_per_s'] == pytest.approx(8 * 32 / record['pipelined_step_s'])


def test_benchmark_command_reports_a_misspelt_field_in_one_line():
  result = subprocess.run(
      [sys.executable, '-m', 'electra_jax.benchmark', '--config=configs/tiny.py',
       '--config.batch_sizes=8'], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert result.returncode != 0
  assert "did you mean 'config.batch_size'" in result.stderr
  assert 'electra_jax: error:' in result.stderr and 'Traceback' not in result.stderr


# ---- fused attention -------------------------------------------------------------------------

def padded_inputs(batch=4, length=24, width=64, seed=0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(batch, length, width)), jnp.float32)
  lengths = np.array([length, length - 5, 7, 1])[:batch]
  mask = jnp.asarray(np.arange(length)[None, :] < lengths[:, None])
  return x, mask


@pytest.mark.parametrize('num_heads', [1, 4])
def test_fused_attention_equals_einsum_with_padding(num_heads):
  x, mask = padded_inputs()
  layer = lambda impl: layers.SelfAttention(num_heads, 0.1, implementation=impl)
  params = layer('einsum').init(jax.random.PRNGKey(0), x, mask, True)
  reference = layer('einsum').apply(params, x, mask, True)
  fused = layer('xla').apply(params, x, mask, True)
  np.testing.assert_allclose(fused, reference, atol=1e-5, rtol=1e-5)
  assert layers.attention_kernel('auto', jnp.bfloat16, 64) == 'einsum'  # on a CPU


def test_attention_dropout_keeps_the_einsum_path():
  """With attention dropout on, every implementation runs the einsum path with its dropout."""
  x, mask = padded_inputs()
  layer = lambda impl: layers.SelfAttention(2, 0.5, implementation=impl)
  params = layer('einsum').init(jax.random.PRNGKey(0), x, mask, True)
  run = lambda impl: layer(impl).apply(params, x, mask, False,
                                       rngs={'dropout': jax.random.PRNGKey(1)})
  np.testing.assert_array_equal(run('xla'), run('einsum'))
  assert not np.allclose(run('einsum'), layer('einsum').apply(params, x, mask, True))


def test_fused_and_einsum_train_steps_agree():
  """Both networks' outputs and two full train steps (backward included), dropout off."""
  config = one_layer_config()
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.0
  batches = [benchmark.synthetic_batch(np.random.default_rng(i), 8, 32, 300) for i in range(2)]
  mesh = train.make_mesh(jax.devices()[:1])
  losses, outputs = {}, {}
  for impl in ('einsum', 'xla'):
    model = train.make_model(config).clone(attention=impl)
    optimizer = optim.make_optimizer(config)
    step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
    state = train.create_train_state(config, model, optimizer, replicated)
    ids, segments = batches[0]['input_ids'], batches[0]['segment_ids']
    positions = jnp.tile(jnp.arange(1, 5)[None], (8, 1))
    outputs[impl] = (
        model.apply({'params': state.params}, ids, segments, positions, method='generate'),
        model.apply({'params': state.params}, ids, segments, method='discriminate'))
    losses[impl] = []
    for i, batch in enumerate(batches):
      state, stats = step(state, jax.device_put(batch, batch_sharding), jax.random.PRNGKey(i))
      losses[impl].append(float(stats['loss']))
  for fused, reference in zip(outputs['xla'], outputs['einsum']):
    np.testing.assert_allclose(fused, reference, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(losses['xla'], losses['einsum'], rtol=1e-5)


# ---- no recompilation --------------------------------------------------------------------------

def test_train_step_compiles_once_in_12_steps():
  config = one_layer_config()
  mesh = train.make_mesh(jax.devices()[:4])
  model, optimizer = train.make_model(config), optim.make_optimizer(config)
  step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
  state = train.create_train_state(config, model, optimizer, replicated)
  rng = np.random.default_rng(0)
  with jax.log_compiles():
    for i in range(12):
      batch = jax.device_put(benchmark.synthetic_batch(rng, 8, 32, 300), batch_sharding)
      state, stats = step(state, batch, jax.random.fold_in(state.rng, i))
      train.check_compiled_once(step)
  assert np.isfinite(float(stats['loss']))
  # The guard does fire: a batch of another length is a second program.
  short = jax.device_put(benchmark.synthetic_batch(rng, 8, 16, 300), batch_sharding)
  step(state, short, jax.random.PRNGKey(0))
  with pytest.raises(RuntimeError, match='compiled 2 times'):
    train.check_compiled_once(step)


# ---- the PyTorch peer --------------------------------------------------------------------------

def load_peer():
  pytest.importorskip('torch')
  pytest.importorskip('transformers')
  spec = importlib.util.spec_from_file_location('hf_peer', REPO / 'benchmarks' / 'hf_peer.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_peer_has_our_parameters_and_shares_the_embeddings():
  peer = load_peer()
  import torch  # pylint: disable=g-import-not-at-top
  config = hand_sized_config()
  generator, discriminator = peer.build_models(config, torch.device('cpu'))
  assert generator.electra.embeddings is discriminator.electra.embeddings
  assert generator.generator_lm_head.weight is (
      discriminator.electra.embeddings.word_embeddings.weight)
  _, _, params = peer.make_optimizer(config, generator, discriminator)
  ours = jax.eval_shape(lambda: model_lib.init_params(train.make_model(config),
                                                      jax.random.PRNGKey(0), 32))
  assert sum(p.numel() for p in params) == model_lib.count_params(ours)


def test_peer_runs_two_eager_steps():
  peer = load_peer()
  import torch  # pylint: disable=g-import-not-at-top
  config = hand_sized_config()
  args = peer.parse_args(['--steps=2', '--warmup=0', '--peak_matmul_size=128'])
  rng = np.random.default_rng(0)
  batches = [tuple(torch.from_numpy(b[k]).long() for k in ('input_ids', 'segment_ids'))
             for b in (benchmark.synthetic_batch(rng, 8, 32, 300) for _ in range(2))]
  record = peer.run_mode('eager', config, batches, torch.device('cpu'), args)
  assert set(RECORD_FIELDS) <= set(record)
  assert record['steps'] == 2 and np.isfinite(record['final_loss'])
  assert record['model_flops_per_step'] == 3 * 239_452_160


def modern_hand_sized_config():
  """The modern design at W 64 (2 heads, GeGLU 96), 4 layers (0 and 3 global), window 8;
  a generator as wide and half as deep; 8 x 32 tokens, vocab 300."""
  config = hand_sized_config()
  config.model.update(architecture='modern', embedding_size=64, hidden_size=64, num_heads=2,
                      intermediate_size=96, num_layers=4, local_window=8, global_every=3,
                      generator_hidden_size=1.0, generator_layers=0.5)
  return config


def test_modern_flops_match_a_hand_count():
  # T = 256, P = 32; local layers see 2 * (8 // 2) + 1 = 9 keys, global ones all 32.
  layer = 2 * 256 * (4 * 64 * 64 + 3 * 64 * 96)  # Q, K, V, output; GeGLU's W -> 2F -> W
  expected = {
      'generator': 2 * layer,                                    # 2 layers: 0 global, 1 local
      'generator_attention': 2 * 2 * 256 * (32 + 9) * 64,
      'generator_head': 2 * 32 * 64 * 64,
      'vocabulary_projection': 2 * 32 * 64 * 300,
      'discriminator': 4 * layer,
      'discriminator_attention': 2 * 2 * 256 * (2 * 32 + 2 * 9) * 64,
      'discriminator_head': 2 * 256 * 64 * 64 + 2 * 256 * 64,
  }
  assert flops.forward_flops(modern_hand_sized_config()) == expected


def test_modern_flops_are_the_bulk_of_what_xla_counts():
  """Past 2 x window a local layer attends in blocks (three half-windows of keys a query), so
  XLA's count stays near ours, which gives it the window's keys alone."""
  config = modern_hand_sized_config()
  config.max_seq_length = 64
  assert 1.0 <= xla_over_ours(config) <= 1.5
