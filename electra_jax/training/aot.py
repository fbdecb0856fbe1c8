"""The real train step compiled for a TPU slice on a host without one, and what it will cost.

libtpu describes a slice it is not running on (`jax.experimental.topologies`), and
`jit(step).lower(abstract inputs).compile()` builds the TPU executable on a CPU host with XLA's
memory and cost analyses. Nothing runs: step times are a roofline's lower bound. The step is
built by train.py's own functions; only its inputs are abstract.
"""

import os
import time
from typing import NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections

from electra_jax.common import cli, config as config_lib
from electra_jax.training import flops, optim, train
from electra_jax.training.compiled_program import (collective_summary, collectives, cost, memory,
                                                   pallas_kernels, random_bit_elements,
                                                   tree_bytes)
from electra_jax.common.errors import UsageError
from electra_jax.model import layers

GIB = 1 << 30


class Chip(NamedTuple):
  """One chip's data-sheet numbers (one JAX device per chip on every generation listed)."""
  hbm_bytes: int
  peak_bf16_flops: float
  hbm_bytes_per_s: float


# Cloud TPU data sheets, per chip (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e, "System
# architecture"). The peaks are flops.PEAK_BF16_FLOPS's, so MFU means the same thing everywhere.
CHIPS = {'v4': Chip(32 * GIB, flops.table_peak_flops('TPU v4'), 1200e9),
         'v5litepod': Chip(16 * GIB, flops.table_peak_flops('TPU v5 lite'), 819e9),
         'v5p': Chip(95 * GIB, flops.table_peak_flops('TPU v5p'), 2765e9),
         'v6e': Chip(32 * GIB, flops.table_peak_flops('TPU v6 lite'), 1640e9)}

# Slice shapes in chips as libtpu names them. v4 and v5p count TensorCores in the slice's name
# (two per chip, one "megacore" device); v5e and v6e count chips. A v4/v5p host holds 2x2x1
# chips; a v5e/v6e host holds up to 8 (2x4) on one-host slices and 2x2 on multi-host ones.
_CUBE = {4: '2x2x1', 8: '2x2x2', 16: '2x2x4', 32: '2x4x4', 64: '4x4x4', 128: '4x4x8'}
_PLANE = {1: '1x1', 4: '2x2', 8: '2x4', 16: '4x4', 32: '4x8', 64: '8x8', 128: '8x16',
          256: '16x16'}
_LIBTPU_NAME = {'v4': 'v4', 'v5p': 'v5', 'v5litepod': 'v5e', 'v6e': 'v6e'}


class Slice(NamedTuple):
  name: str                 # as gcloud and launch/ name it: v4-8, v5litepod-16, ...
  chip: Chip
  devices: list             # compile-only devices, one per chip
  hosts: int


def quiet_libtpu_without_a_tpu(name: str):
  """Tells libtpu, on a host with no TPU, the accelerator type and workers it would otherwise
  look for, printing five lines of errors (`E0000 ... unexpected worker hostname`)."""
  if cli.found(cli.TPU_FILES):  # a TPU VM's chips
    return
  os.environ.setdefault('TPU_ACCELERATOR_TYPE', name)
  os.environ.setdefault('TPU_WORKER_HOSTNAMES', 'localhost')


def slice_devices(name: str) -> Slice:
  """The compile-only devices of the TPU slice `name` (e.g. 'v4-8', 'v5litepod-16', 'v6e-8')."""
  generation, _, count = name.rpartition('-')
  if generation not in CHIPS or not count.isdigit():
    raise UsageError(f'--topology={name!r}: use <generation>-<size> with a generation of '
                     f'{", ".join(CHIPS)} (e.g. v4-8, v5litepod-8, v6e-8, v4-32)')
  megacore = generation in ('v4', 'v5p')
  shapes = _CUBE if megacore else _PLANE
  named = {n * 2 if megacore else n: n for n in shapes}  # size in the name -> chips
  if int(count) not in named:  # before libtpu: an odd v4 size is no slice, not half of one
    raise UsageError(f'--topology={name!r} is no {generation} slice; known {generation} sizes '
                     f'are {", ".join(f"{generation}-{n}" for n in sorted(named))}')
  chips = named[int(count)]
  per_host = (1, 1, 1) if chips == 1 else (2, 4, 1) if chips == 8 and not megacore else (2, 2, 1)
  quiet_libtpu_without_a_tpu(name)
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  try:
    topology = topologies.get_topology_desc(
        f'{_LIBTPU_NAME[generation]}:{shapes[chips]}', 'tpu',
        chip_config_name='megacore' if megacore else 'default', chips_per_host_bounds=per_host,
        num_slices=1)
  except Exception as e:  # pylint: disable=broad-except  (libtpu absent or refusing: say which)
    if 'lockfile' in str(e):
      # A second load is safe, as compiling uses no TPU; removing the lockfile is not.
      raise UsageError(
          f'cannot describe the TPU slice {name}: another process on this host holds libtpu '
          '(/tmp/libtpu_lockfile), e.g. a JAX program started without JAX_PLATFORMS=cpu; run '
          'this with ALLOW_MULTIPLE_LIBTPU_LOAD=1 (compiling uses no TPU), or after it ends') from e
    raise UsageError(f'cannot describe the TPU slice {name} on this host ({e}); compiling for '
                     'a TPU needs libtpu: pip install "jax[tpu]"') from e
  devices = list(topology.devices)
  return Slice(name, CHIPS[generation], devices, len({d.process_index for d in devices}))


def lower_pretrain_step(config: ml_collections.ConfigDict, devices):
  """(lowered train step, its abstract state, its abstract batch) of pretraining on `devices`."""
  mesh = train.make_mesh(devices)
  model_config = config.copy_and_resolve_references()
  with jax.set_mesh(mesh):  # a Pallas kernel is mapped over the mesh's shards
    # attention='auto' becomes the kernel it chooses on the slice's platform, not this host's.
    model_config.attention = layers.attention_kernel(
        config.attention, train.DTYPES[config.dtype],
        config.model.hidden_size // config.model.num_heads, config.max_seq_length,
        devices[0].platform)
    model = train.make_model(model_config)
  optimizer = optim.make_optimizer(config)
  step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
  # The state's shapes, from the model as this host runs it: every kernel has the same parameters.
  state = train.abstract_train_state(config, train.make_model(config), optimizer, replicated)
  tokens = jax.ShapeDtypeStruct((config.batch_size, config.max_seq_length), jnp.int32,
                                sharding=batch_sharding)
  batch = {'input_ids': tokens, 'segment_ids': tokens}  # what training/inputs.py delivers
  # The loop passes fold_in(state.rng, step): the state's key's shape, dtype and sharding.
  with jax.set_mesh(mesh):
    return step.lower(state, batch, state.rng), state, batch


def roofline(xla_cost: dict, model_flops_per_chip: float, chip: Chip) -> dict:
  """The step can take no less than its FLOPs at peak or its HBM bytes at full bandwidth."""
  compute_s = xla_cost['flops'] / chip.peak_bf16_flops
  memory_s = xla_cost['bytes_accessed'] / chip.hbm_bytes_per_s
  bound = max(compute_s, memory_s)
  return {'compute_s': compute_s, 'memory_s': memory_s, 'step_s_lower_bound': bound,
          'bound_by': 'compute' if compute_s >= memory_s else 'memory',
          'mfu_ceiling': model_flops_per_chip / chip.peak_bf16_flops / bound if bound else None}


def out_of_hbm(error: Exception) -> bool:
  """Whether XLA refused the program for want of HBM: the step does not fit at this shape."""
  return 'RESOURCE_EXHAUSTED' in str(error) and 'hbm' in str(error).lower()


def out_of_vmem(error: Exception) -> bool:
  """Whether one kernel needs more on-chip vector memory than the chip has: a compiler limit at
  this shape, which says nothing about whether the step fits in HBM."""
  return 'RESOURCE_EXHAUSTED' in str(error) and 'vmem' in str(error).lower()


def compile_outside_the_cache(lowered):
  """`lowered.compile()`, kept out of JAX's persistent compilation cache: a TPU executable built
  on a CPU host cannot be loaded back there, so every later compile would warn, then compile."""
  name = 'jax_persistent_cache_min_compile_time_secs'
  before = getattr(jax.config, name)
  jax.config.update(name, float('inf'))  # no compile is slow enough to be written
  try:
    return lowered.compile()
  finally:
    jax.config.update(name, before)


def footprint(state, batch) -> dict:
  return {'params': tree_bytes(state.params), 'optimizer_state': tree_bytes(state.opt_state),
          'batch': tree_bytes(batch)}


def compile_pretrain(config, devices, hbm_bytes: int):
  """(compiled step or None if it cannot fit, memory dict, seconds, state, batch)."""
  start = time.perf_counter()
  lowered, state, batch = lower_pretrain_step(config, devices)
  try:
    compiled = compile_outside_the_cache(lowered)
  except jax.errors.JaxRuntimeError as e:
    if out_of_vmem(e):
      raise UsageError(
          f'XLA:TPU cannot compile this step at {config.batch_size // len(devices)} sequences of '
          f'{config.max_seq_length} per chip: one kernel needs more on-chip vector memory (VMEM) '
          f'than the chip has ({str(e).splitlines()[0][:300]}). That is a compiler limit at '
          'this shape, not a lack of HBM: another per-chip batch (--config.batch_size) or '
          'length compiles') from None
    if not out_of_hbm(e):
      raise
    return (None, {'hbm': hbm_bytes, 'fits': False, 'error': str(e).splitlines()[0][:400]},
            time.perf_counter() - start, state, batch)
  return compiled, memory(compiled, hbm_bytes), time.perf_counter() - start, state, batch


def with_batch(config, batch_size: int, **overrides) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({**config.to_dict(), 'batch_size': batch_size, **overrides})


def largest_batch(config, devices, hbm_bytes: int, limit: int = 1 << 14) -> dict:
  """The largest per-chip batch (a multiple of grad_accum_steps) whose step fits in HBM: memory
  grows linearly in the batch, so two compilations predict it and a few more confirm it."""
  n, unit = len(devices), config.grad_accum_steps
  compiled_sizes = {}

  def total(per_chip):
    if per_chip not in compiled_sizes:
      _, mem, _, _, _ = compile_pretrain(with_batch(config, per_chip * n), devices, hbm_bytes)
      compiled_sizes[per_chip] = mem['total'] if mem['fits'] else None
    return compiled_sizes[per_chip]

  if total(unit) is None:
    return {'per_chip_batch': 0, 'compilations': len(compiled_sizes)}
  if total(2 * unit) is None:
    return {'per_chip_batch': unit, 'compilations': len(compiled_sizes)}
  per_example = (total(2 * unit) - total(unit)) / unit
  guess = unit * max(2, min(limit // unit, int(
      (hbm_bytes - total(unit)) / max(per_example, 1) // unit + 1)))
  if total(guess) is not None:
    low, high = guess, None
    while high is None and low < limit:  # the prediction fits: step up until one does not
      step = max(unit, low // 64 // unit * unit)
      if total(low + step) is None:
        high = low + step
      else:
        low += step
    high = high or limit + unit
  else:
    low, high = 2 * unit, guess
  while high - low > unit:  # bisect in multiples of `unit`
    middle = (low + high) // 2 // unit * unit
    if total(middle) is None:
      high = middle
    else:
      low = middle
  return {'per_chip_batch': low, 'global_batch': low * n, 'compilations': len(compiled_sizes),
          'bytes_at_that_batch': total(low)}


def splash_share(config: ml_collections.ConfigDict) -> float:
  """The share of the step's full L x L attention that splash computes: a modern local layer
  skips the blocks outside its window, and as the HLO cannot tell local kernels from global ones
  (same shapes), flops.py weighs the layers, a local query meeting its computed blocks' keys."""
  length = config.max_seq_length
  if config.model.architecture != 'modern':
    return 1.0
  computed, total = layers.splash_blocks(length, config.model.local_window)
  attention = lambda keys: sum(count for part, count in flops.forward_flops(config, keys).items()
                               if part.endswith('_attention'))
  return attention(length * computed / total) / attention(length)


def analyse(compiled, seconds: float, state, data, model_flops: float, sliced: Slice,
            kernel_share: float = 1.0) -> dict:
  """The record of one compiled step: memory, FLOPs, roofline, collectives, compile time.
  `kernel_share`: splash_share, the share of the kernels' full-shape FLOPs they compute."""
  text = compiled.as_text()
  kernels = pallas_kernels(text)
  for counted_here in ('flops', 'flops_not_in_xla'):
    kernels[counted_here] = round(kernels[counted_here] * kernel_share)
  kernels['splash_share'] = kernel_share
  xla = cost(compiled)
  # XLA counts a Pallas kernel's bytes but not (mostly) its FLOPs: those come from its shapes.
  counted = {**xla, 'flops': xla['flops'] + kernels['flops_not_in_xla']}
  model_per_chip = model_flops / len(sliced.devices)
  return {
      'compile_s': round(seconds, 2),
      'bytes_per_chip': {**footprint(state, data), **memory(compiled, sliced.chip.hbm_bytes)},
      'flops_per_chip': {
          'xla': xla['flops'], 'pallas_kernels_not_in_xla': kernels['flops_not_in_xla'],
          'model': model_per_chip,
          # (XLA's + the kernels' it misses) / the model's
          'xla_over_model': counted['flops'] / model_per_chip if model_per_chip else None},
      'hbm_bytes_accessed_per_chip': xla['bytes_accessed'],
      'pallas_kernels': kernels,
      'roofline': roofline(counted, model_per_chip, sliced.chip),
      'collectives': collective_summary(collectives(text), state.params),
      # rng_impl=rbg's random words per chip (0 under threefry); the whole batch's on every
      # chip unless libtpu partitions them (train.rbg_sharding_warning).
      'rng_bit_generator_elements_per_chip': random_bit_elements(text),
  }


def _gib(n: float) -> str:
  return f'{n / GIB:.2f} GiB'


def summary(record: dict) -> str:
  """The record's gist for a person, printed before its JSON line."""
  memory, chip = record['bytes_per_chip'], record['device_kind']
  where = (f"{record['step']} step on {record['topology']} ({record['chips']} chips, "
           f"{record['per_chip_batch']:g} sequences of {record['max_seq_length']} per chip)")
  if 'total' in memory:  # compiled: XLA's total against the chip's HBM
    used = (f"{_gib(memory['total'])} per chip of the {chip}'s {_gib(memory['hbm'])} HBM "
            f"({memory['total'] / memory['hbm']:.0%})")
  else:  # XLA:TPU refused to compile it: its message has the sizes
    used = f"out of the {chip}'s {_gib(memory['hbm'])} HBM per chip ({memory['error'][:200]})"
  lines = [f"{'fits' if memory['fits'] else 'does NOT fit'}: {used}; {where}"]
  if 'roofline' in record:
    roof = record['roofline']
    ceiling = f", so MFU is at most {roof['mfu_ceiling']:.0%}" if roof['mfu_ceiling'] else ''
    lines.append(f"bound by {roof['bound_by']}: a step takes at least "
                 f"{roof['step_s_lower_bound'] * 1e3:.3g} ms (compute {roof['compute_s'] * 1e3:.3g}"
                 f" ms, HBM traffic {roof['memory_s'] * 1e3:.3g} ms){ceiling}")
  if 'largest_per_chip_batch' in record:
    search = record['largest_per_chip_batch']
    lines.append(f"largest per-chip batch that fits: {search['remat_off']['per_chip_batch']} "
                 f"without remat, {search['remat_on']['per_chip_batch']} with")
  if not memory['fits']:
    lines.append('fewer sequences per chip (--config.batch_size) or --config.remat=true may fit')
  return '\n'.join(lines)


def slice_record(sliced: Slice) -> dict:
  return {'topology': sliced.name, 'chips': len(sliced.devices), 'hosts': sliced.hosts,
          'device_kind': sliced.devices[0].device_kind, 'chip': sliced.chip._asdict()}


def checked_without_data(config: ml_collections.ConfigDict,
                         num_devices: int) -> ml_collections.ConfigDict:
  """`config` resolved, and checked as training would on `num_devices` but reading no data files
  (the benchmark's, or a step compiled for a slice)."""
  config = config_lib.resolve(config)
  checked = config.copy_and_resolve_references()
  checked.data.update(train_files='(synthetic)', sources='', prepared_dir='')  # reads no data
  config_lib.validate(checked, num_devices)
  return config


def compile_pretraining(config: ml_collections.ConfigDict, topology: str,
                        search_batch: bool = True) -> dict:
  """Pretraining's step compiled for the TPU slice `topology`: one JSON-ready record."""
  sliced = slice_devices(topology)
  chips = len(sliced.devices)
  config = checked_without_data(config, chips)
  record = {'step': 'pretrain', **slice_record(sliced), 'jax': jax.__version__,
            'objective': config.objective, 'dtype': config.dtype,
            'batch_size': config.batch_size, 'per_chip_batch': config.batch_size / chips,
            'max_seq_length': config.max_seq_length, 'remat': config.remat,
            'grad_accum_steps': config.grad_accum_steps, 'rng_impl': config.rng_impl}
  if warning := train.rbg_sharding_warning(config, sliced.devices[0].platform, chips,
                                           os.environ.get('LIBTPU_INIT_ARGS', '')):
    logging.warning(warning)
  compiled, mem, seconds, state, batch = compile_pretrain(config, sliced.devices,
                                                          sliced.chip.hbm_bytes)
  if compiled is None:
    record.update({'compile_s': round(seconds, 2),
                   'bytes_per_chip': {**footprint(state, batch), **mem}})
  else:
    record.update(analyse(compiled, seconds, state, batch, flops.train_step_flops(config),
                          sliced, splash_share(config)))
  if search_batch:
    record['largest_per_chip_batch'] = {
        f'remat_{"on" if remat else "off"}': largest_batch(
            with_batch(config, config.batch_size, remat=remat), sliced.devices,
            sliced.chip.hbm_bytes)
        for remat in (False, True)}
  return record
