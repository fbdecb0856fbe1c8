"""The real steps compiled for a TPU slice on this CPU host (training/aot.py, electra_jax.compile).

Compiling needs libtpu (the 'test' extra installs it), never a TPU; without libtpu the tests that
compile are skipped. The CPU tests elsewhere are unaffected: conftest sets JAX_PLATFORMS=cpu.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, load_config
from electra_jax.model import layers
from electra_jax.training import aot, compiled_program, train
from electra_jax.finetune import aot as finetune_aot

requires_libtpu = pytest.mark.skipif(
    importlib.util.find_spec('libtpu') is None,
    reason='libtpu is not importable: compiling for a TPU slice needs it '
           '(pip install -e ".[test]" or pip install "jax[tpu]")')

RECORD_FIELDS = ('step', 'topology', 'chips', 'hosts', 'device_kind', 'compile_s',
                 'bytes_per_chip', 'flops_per_chip', 'hbm_bytes_accessed_per_chip', 'roofline',
                 'collectives')
MEMORY_FIELDS = ('params', 'optimizer_state', 'batch', 'arguments', 'outputs', 'temporaries',
                 'total', 'hbm', 'fits')


def small_tiny():
  """configs/tiny.py with one layer: the same step, compiled in half the time (~20 s of CPU)."""
  config = load_config('tiny')
  config.model.num_layers = 1
  config.batch_size = 16  # 2,048 tokens: no statistic has a parameter's shape
  return config


@pytest.fixture(scope='module')
def tiny_on_v4_8():
  return aot.compile_pretraining(small_tiny(), 'v4-8', search_batch=False)


def test_slice_names_resolve_as_launch_uses_them():
  with pytest.raises(Exception, match='v4-8'):
    aot.slice_devices('v3-8')  # an unknown generation names the known ones
  with pytest.raises(Exception, match='known v4 sizes'):
    aot.slice_devices('v4-12')


def test_out_of_hbm_and_out_of_vmem_are_told_apart():
  """XLA:TPU's own messages (compiled here on 2026-11-24 and 12-05): large at 512 x 512 per v4
  chip, modern_base at 32 x 1,024 per v5e chip, and base at 16 x 512 per chip on a v4-32. Only
  the first two mean the step does not fit."""
  hbm = RuntimeError('RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required '
                     'for HLO temporaries (409.32G) exceeds available HBM (30.75G).')
  hbm_v5e = RuntimeError('RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: XLA:TPU compile '
                         'permanent error. Ran out of memory in memory space hbm. Used 15.76G of '
                         '15.75G hbm. Exceeded hbm capacity by 12.53M.')
  vmem = RuntimeError('RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in '
                      'memory space vmem. Used 16.50M of 16.00M vmem. Exceeded vmem capacity '
                      'by 512.0K.')
  for fits_not in (hbm, hbm_v5e):
    assert aot.out_of_hbm(fits_not) and not aot.out_of_vmem(fits_not)
  assert aot.out_of_vmem(vmem) and not aot.out_of_hbm(vmem)
  assert not aot.out_of_hbm(RuntimeError('INTERNAL: something else'))


def test_collectives_are_parsed_from_hlo_text():
  hlo = '\n'.join([
      'ENTRY %main {',
      '  %all-reduce.1 = (f32[128,64]{1,0:T(8,128)}, bf16[10]{0}, f32[]{:T(128)}) '
      'all-reduce(%a, %b, %c), channel_id=1, metadata={op_name="jit(f)/transpose(jvp(x))/dot"}',
      '  %all-gather-start = (f32[8]{0}, f32[32]{0}) all-gather-start(%d), dimensions={0}',
      '  %all-gather-done = f32[32]{0} all-gather-done(%all-gather-start)',
      '  %ars = f32[4]{0} all-reduce-start(%e)',
      '  %ard = f32[4]{0} all-reduce-done(%ars)',
      '  %add = f32[4]{0} add(%ard, %ard)',
      '}'])
  found = compiled_program.collectives(hlo)
  assert [(c['op'], c['elements'], c['bytes']) for c in found] == [
      ('all-reduce', 128 * 64 + 10 + 1, 128 * 64 * 4 + 20 + 4),
      ('all-gather', 32, 128),  # an async pair once, counted by what it gathers
      ('all-reduce', 4, 16)]
  assert found[0]['source'] == 'jit(f)/transpose(jvp(x))/dot'


def test_pallas_kernels_flops_come_from_their_shapes_unless_xla_had_an_estimate():
  q = 'bf16[4,2,128,64]{3,2,1,0}'
  hlo = '\n'.join([
      'ENTRY %main {',
      f'  %q = {q} parameter(0)',
      '  %seg = s32[4,128,128]{2,1,0} parameter(1)',
      '  %info = s8[2,1,1]{2,1,0} constant({...})',
      f'  %splash_mha_fwd_segmented_residuals.1 = ({q}, f32[4,2,128,128]{{3,2,1,0}}) '
      'custom-call(%info, %q, %q, %q, %seg), custom_call_target="tpu_custom_call", '
      'backend_config={"custom_call_config":{"body":"..."}}',
      f'  %splash_mha_dkv_segmented_no_residuals.1 = (bf16[4,1,2,128,64]{{4,3,2,1,0}}, {q}, {q}) '
      'custom-call(%info, %q, %q, %q, %seg, %q), custom_call_target="tpu_custom_call"',
      f'  %flash_attention.1 = {q} custom-call(%q, %q, %q), custom_call_target="tpu_custom_call", '
      'backend_config={"custom_call_config":{"cost_estimate":{"flops":"1"}}}',
      '}'])
  kernels = compiled_program.pallas_kernels(hlo)
  matmul = 2 * 4 * 2 * 128 * 128 * 64  # 2·(B·H)·Lq·Lk·D
  assert kernels['count'] == 3
  assert kernels['kernels']['splash_mha_fwd_segmented_residuals']['flops'] == 2 * matmul
  assert kernels['kernels']['splash_mha_dkv_segmented_no_residuals']['flops'] == 5 * matmul
  assert kernels['flops'] == 9 * matmul
  assert kernels['flops_not_in_xla'] == 7 * matmul  # XLA took flash's forward from its estimate
  q_bytes = 4 * 2 * 128 * 64 * 2
  assert kernels['kernels']['flash_attention']['bytes'] == 4 * q_bytes  # Q, K, V read, O written


@pytest.mark.parametrize('length, window', [(8192, 128), (4096, 128), (1024, 128), (2048, 1000),
                                            (512, 0)])
def test_splash_skips_the_blocks_its_own_mask_info_leaves_out(length, window):
  """The roofline's count of the blocks a local layer computes is splash's own: the block pairs
  its MaskInfo keeps (nonzero in block_mask, whose grid it shrinks to them)."""
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask_info as info
  block = layers.pallas_block(length)
  mask = (masks.LocalMask((length, length), (window // 2, window // 2), 0) if window
          else masks.FullMask((length, length)))
  mask_info, _ = info.process_mask(masks.MultiHeadMask([mask]), (block, block))
  blocks = (length // block) ** 2
  computed = blocks if mask_info.block_mask is None else int((mask_info.block_mask != 0).sum())
  touched, total = layers.splash_blocks(length, window)
  assert (touched, total) == (computed, blocks)
  if (length, window) == (8192, 128):
    assert (touched, total) == (46, 256)  # 16 blocks of 512: the diagonal and its neighbours
  config = load_config('modern_base')
  config.max_seq_length = length
  share = aot.splash_share(config)  # 22 layers, 8 global, and the generator's 11, 4 global
  assert share == pytest.approx((12 + 21 * touched / total) / 33)


def test_the_summary_says_whether_it_fits_what_bounds_the_step_and_the_mfu_ceiling():
  """The command printed only a ~2,000-character JSON line, 'fits' buried inside it."""
  record = {'step': 'pretrain', 'topology': 'v4-8', 'chips': 4, 'device_kind': 'TPU v4',
            'per_chip_batch': 64.0, 'max_seq_length': 512,
            'bytes_per_chip': {'total': 25.9 * aot.GIB, 'hbm': 32 * aot.GIB, 'fits': True},
            'roofline': {'compute_s': 0.2093, 'memory_s': 0.2383, 'step_s_lower_bound': 0.2383,
                         'bound_by': 'memory', 'mfu_ceiling': 0.334},
            'largest_per_chip_batch': {'remat_off': {'per_chip_batch': 72},
                                       'remat_on': {'per_chip_batch': 224}}}
  assert aot.summary(record).splitlines() == [
      "fits: 25.90 GiB per chip of the TPU v4's 32.00 GiB HBM (81%); pretrain step on v4-8 "
      '(4 chips, 64 sequences of 512 per chip)',
      'bound by memory: a step takes at least 238 ms (compute 209 ms, HBM traffic 238 ms), so '
      'MFU is at most 33%',
      'largest per-chip batch that fits: 72 without remat, 224 with']
  error = ('RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO '
           'temporaries (409.32G) exceeds available HBM (30.75G).')
  record.update(per_chip_batch=512.0, bytes_per_chip={'hbm': 32 * aot.GIB, 'fits': False,
                                                      'error': error})
  del record['roofline'], record['largest_per_chip_batch']
  assert aot.summary(record).splitlines() == [
      f"does NOT fit: out of the TPU v4's 32.00 GiB HBM per chip ({error}); pretrain step on "
      'v4-8 (4 chips, 512 sequences of 512 per chip)',
      'fewer sequences per chip (--config.batch_size) or --config.remat=true may fit']


@requires_libtpu
def test_topology_compiles_stay_out_of_the_persistent_compilation_cache(tmp_path):
  """A TPU executable compiled here cannot be read back on this CPU host, so none is written.

  A plain compile of the same kind of program is the control: it does write an entry, so the
  check below would see one. Each program bakes in a fresh constant, so no entry from an earlier
  run can be found instead of written.
  """
  import time  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from pathlib import Path  # pylint: disable=g-import-not-at-top

  cache = Path(jax.config.jax_compilation_cache_dir or '')
  if not jax.config.jax_compilation_cache_dir:
    pytest.skip('no persistent compilation cache in this process (conftest sets one)')
  device = aot.slice_devices('v4-8').devices[0]
  x = jax.ShapeDtypeStruct((128, 128), jnp.float32,
                           sharding=jax.sharding.SingleDeviceSharding(device))

  def lowered():
    salt = float(time.time_ns() % 1_000_003)
    return jax.jit(lambda a: jnp.tanh(a @ a.T + salt)).lower(x)

  def entries():
    return set(cache.iterdir()) if cache.is_dir() else set()

  name = 'jax_persistent_cache_min_compile_time_secs'
  before_setting = getattr(jax.config, name)
  jax.config.update(name, 0.0)  # every compile is worth writing, unless the helper says not
  try:
    before = entries()
    lowered().compile()
    written = entries() - before
    assert written, 'the control compile wrote no cache entry: the check below would prove nothing'
    for entry in written:  # the control's entry is unreadable here: take it out again
      entry.unlink()
    before = entries()
    aot.compile_outside_the_cache(lowered())
    assert entries() == before
    assert getattr(jax.config, name) == 0.0  # the setting is restored
  finally:
    jax.config.update(name, before_setting)

@requires_libtpu
def test_tiny_compiles_for_v4_8_and_reports_what_it_costs(tiny_on_v4_8):
  record = tiny_on_v4_8
  print(json.dumps(record))
  assert all(field in record for field in RECORD_FIELDS)
  assert record['chips'] == 4 and record['hosts'] == 1 and record['device_kind'] == 'TPU v4'
  memory = record['bytes_per_chip']
  assert all(field in memory for field in MEMORY_FIELDS) and memory['fits']
  # Replicated: every chip holds all parameters (float32) and Adam's two moments of each.
  parameters = record['collectives']['gradient']['parameters']
  assert memory['params'] == 4 * parameters
  assert memory['optimizer_state'] >= 2 * memory['params']
  assert memory['batch'] == 2 * 4 * (16 // 4) * 128  # two int32 [4, 128] shards
  assert memory['aliased'] >= memory['params'] + memory['optimizer_state']  # donated state
  # XLA counts more than the model's matmuls (elementwise work, sampling, the optimizer), and
  # not several times more.
  assert 1.0 < record['flops_per_chip']['xla_over_model'] < 3.0
  roofline = record['roofline']
  assert roofline['step_s_lower_bound'] == max(roofline['compute_s'], roofline['memory_s'])
  assert 0 < roofline['mfu_ceiling'] <= 1
  assert aot.summary(record).startswith('fits: ') and 'so MFU is at most' in aot.summary(record)


@requires_libtpu
def test_pallas_attention_compiles_for_v4_8_and_the_roofline_counts_its_kernels():
  """With attention dropout off, 'auto' compiles Pallas's splash attention for the TPU, mapped
  over the chips' shards of the batch. XLA counts no FLOPs inside the kernels: the record counts
  them from the shapes, 7 matmuls of L x L x D per head and sequence (2 forward, 5 in the fused
  backward kernel), and the roofline adds them to XLA's."""
  config = small_tiny()
  config.model.attention_dropout_rate = 0.0
  record = aot.compile_pretraining(config, 'v4-8', search_batch=False)
  kernels = record['pallas_kernels']
  assert kernels['count'] == 4  # a forward and a backward kernel per layer, in each network
  per_chip, length = config.batch_size // 4, config.max_seq_length
  # the discriminator's 2 heads of 64, the generator's (width 32) 1 head of 32
  expected = sum(7 * 2 * per_chip * heads * length * length * head_dim
                 for heads, head_dim in ((2, 64), (1, 32)))
  assert kernels['flops'] == kernels['flops_not_in_xla'] == expected
  flops = record['flops_per_chip']
  assert flops['pallas_kernels_not_in_xla'] == expected
  assert record['roofline']['compute_s'] == pytest.approx(
      (flops['xla'] + expected) / record['chip']['peak_bf16_flops'])
  assert kernels['bytes'] > 0 and record['bytes_per_chip']['fits']


@requires_libtpu
def test_data_parallel_step_all_reduces_the_gradient_once_and_gathers_nothing(
    tiny_on_v4_8):
  config = small_tiny()
  m, length = config.model, config.max_seq_length
  collectives = tiny_on_v4_8['collectives']
  gradient = collectives['gradient']
  # No parameter (or optimizer state) is sharded and re-gathered, and nothing else is gathered:
  # the step sorts no token scores (the AUC is computed where it is logged, not in the step).
  assert gradient['all_gathers_of_parameter_shape'] == 0
  assert 'all-gather' not in collectives
  # One gradient's worth, exactly, with one known exception: the embedding block is shared by
  # the generator and the discriminator. XLA folds the generator's tied output layer's share of
  # the word table's gradient into the lookups' scatter-add as its starting value, so the
  # partitioner all-reduces that share alone, zeroes it on all devices but one and reduces the
  # total again: the word embeddings [V, E] once more. (A scatter-add behind an optimisation
  # barrier, tried, reduces each use's share apart: three times.) The position embeddings go as
  # two [L, E] slices instead of one [512, E] table. Nothing else: no gradient reduced twice,
  # none missing, and no per-token array.
  expected = (gradient['parameters'] + m.vocab_size * m.embedding_size
              - (m.max_position_embeddings - 2 * length) * m.embedding_size)
  assert gradient['all_reduced_array_elements'] == expected
  assert gradient['all_reduced_scalars'] < 32  # the step's statistics


@requires_libtpu
def test_rbg_makes_every_chips_bits_on_each_chip_unless_libtpu_is_told_to_partition_them(
    tiny_on_v4_8, caplog):
  """What rbg_sharding_warning tells a run, compiled: without the flag each of the 4 chips draws
  the whole batch's random words, 4 times its share; with it, its share. libtpu reads
  LIBTPU_INIT_ARGS once, when it starts, so the flagged compile runs in a process of its own."""
  assert tiny_on_v4_8['rng_bit_generator_elements_per_chip'] == 0  # threefry: arithmetic
  config = small_tiny()
  config.rng_impl = 'rbg'
  with caplog.at_level('WARNING'):
    whole = aot.compile_pretraining(config, 'v4-8', search_batch=False)
  assert "LIBTPU_INIT_ARGS='--xla_tpu_spmd_rng_bit_generator_unsafe=true'" in caplog.text
  flagged = subprocess.run(
      [sys.executable, '-m', 'electra_jax.compile', '--config=configs/tiny.py',
       '--config.model.num_layers=1', f'--config.batch_size={config.batch_size}',
       '--config.rng_impl=rbg', '--topology=v4-8', '--search_batch=false'],
      cwd=REPO, capture_output=True, text=True, timeout=600,
      env={**{k: v for k, v in os.environ.items()  # as a user's shell has them: unset
              if k not in ('TPU_ACCELERATOR_TYPE', 'TPU_WORKER_HOSTNAMES')},
           'LIBTPU_INIT_ARGS': train.RBG_PARTITION_FLAG})
  assert flagged.returncode == 0, flagged.stderr[-2000:]
  assert 'rng_impl=rbg on 4 TPU chips' not in flagged.stderr
  # libtpu, told there is no TPU to look for, prints no errors about one
  # (aot.quiet_libtpu_without_a_tpu).
  assert 'INVALID_ARGUMENT' not in flagged.stderr and 'could not determine' not in flagged.stderr
  *summary, last = flagged.stdout.strip().splitlines()
  share = json.loads(last)
  assert summary == aot.summary(share).splitlines()  # the gist, then the JSON line for scripts
  words = share['rng_bit_generator_elements_per_chip']
  # Hidden dropout alone draws a word per activation of the chip's 4 sequences.
  assert words >= 4 * config.max_seq_length * config.model.hidden_size
  assert whole['rng_bit_generator_elements_per_chip'] == 4 * words
  assert whole['bytes_per_chip']['temporaries'] > share['bytes_per_chip']['temporaries']


def test_benchmark_names_the_compile_command_for_a_topology():
  result = subprocess.run(
      [sys.executable, '-m', 'electra_jax.benchmark', '--config=configs/tiny.py',
       '--topology=v4-8'], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert result.returncode != 0
  assert result.stderr.strip().splitlines()[-1] == (
      'electra_jax: error: compiling for a TPU slice is its own command now: '
      'python -m electra_jax.compile --config=... --topology=v4-8')


def test_command_line_refuses_an_unknown_slice():
  result = subprocess.run(
      [sys.executable, '-m', 'electra_jax.compile', '--config=configs/tiny.py',
       '--topology=v9-8'], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert result.returncode != 0
  assert 'electra_jax: error:' in result.stderr and 'v9-8' in result.stderr


@requires_libtpu
def test_a_held_libtpu_is_named_with_the_way_around_it():
  """A JAX program started without JAX_PLATFORMS=cpu holds libtpu's one-per-host lock (it looks
  for a TPU); --topology then says so, and ALLOW_MULTIPLE_LIBTPU_LOAD=1 compiles beside it."""
  looking_for_a_tpu = {k: v for k, v in os.environ.items()
                       if k not in ('JAX_PLATFORMS', 'ALLOW_MULTIPLE_LIBTPU_LOAD')}
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, jax; jax.devices(); print(1, flush=True); sys.stdin.read()'],
      env=looking_for_a_tpu, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == '1'
    describe = [sys.executable, '-c', 'from electra_jax.training import aot; '
                "print(len(aot.slice_devices('v4-8').devices))"]
    alone = {k: v for k, v in os.environ.items() if k != 'ALLOW_MULTIPLE_LIBTPU_LOAD'}  # conftest's
    held = subprocess.run(describe, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=alone)
    assert held.returncode != 0
    assert ('another process on this host holds libtpu (/tmp/libtpu_lockfile)' in held.stderr
            and 'ALLOW_MULTIPLE_LIBTPU_LOAD=1' in held.stderr), held.stderr[-2000:]
    beside = subprocess.run(describe, cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, 'ALLOW_MULTIPLE_LIBTPU_LOAD': '1'})
    assert beside.returncode == 0 and beside.stdout.split()[-1] == '4', beside.stderr[-2000:]
  finally:
    holder.communicate('', timeout=60)


@pytest.mark.slow
@requires_libtpu
def test_command_line_prints_one_json_line_with_the_batch_search():
  result = subprocess.run(
      [sys.executable, '-m', 'electra_jax.compile', '--config=configs/tiny.py',
       '--topology=v4-8'], cwd=REPO, capture_output=True, text=True, timeout=3600)
  assert result.returncode == 0, result.stderr[-2000:]
  record = json.loads(result.stdout.strip().splitlines()[-1])
  search = record['largest_per_chip_batch']
  assert search['remat_off']['per_chip_batch'] >= 8  # tiny's own batch fits
  assert search['remat_on']['per_chip_batch'] >= search['remat_off']['per_chip_batch']


@pytest.mark.slow
@requires_libtpu
def test_multi_host_slice_compiles_from_one_process():
  record = aot.compile_pretraining(small_tiny(), 'v4-32', search_batch=False)
  assert record['chips'] == 16 and record['hosts'] == 4
  assert record['collectives']['gradient']['all_gathers_of_parameter_shape'] == 0


@pytest.mark.slow
@requires_libtpu
def test_finetune_step_compiles_for_v4_8():
  from electra_jax.common.config import load_config_file  # pylint: disable=g-import-not-at-top
  glue = load_config_file(str(REPO / 'configs' / 'finetune' / 'glue.py'))
  record = finetune_aot.compile_finetuning(small_tiny().model, glue, 'v4-8', 1000)
  assert record['step'] == 'finetune' and record['bytes_per_chip']['fits']
  assert record['collectives']['gradient']['all_gathers_of_parameter_shape'] == 0
  # The training set sits replicated on every chip: 1,000 x 128 int32 ids and segment ids.
  assert record['bytes_per_chip']['batch'] >= 2 * 1000 * 128 * 4
