"""Throughput of the real train step, against the device's limit.

python -m electra_jax.benchmark --config=configs/small.py [--config.batch_size=16 ...] --steps=50

The step training runs is fed batches shaped like packed examples, already on the devices. The
first step compiles; `--warmup` more run untimed; each of `--steps` steps is timed to completion
and the median is reported as one JSON line. `--steps` more run as training runs them, each
dispatched while the device works on the one before: their mean is `pipelined_step_s`.

FLOPs are training/flops.py's analytic model FLOPs for the config's objective. The peak is an
accelerator's data-sheet bfloat16 peak, or, on a CPU, the best rate of a large matmul in the
step's dtype, measured in the same process.
"""

import json
import statistics
import time
import timeit

from absl import app, flags
import jax
import jax.numpy as jnp
import ml_collections
from ml_collections import config_flags
import numpy as np

from electra_jax.common import cli
from electra_jax import objective
from electra_jax.training import aot, flops, optim, train
from electra_jax.model.layers import attention_kernel

USAGE = ('python -m electra_jax.benchmark --config=configs/small.py [--config.batch_size=B '
         '--config.max_seq_length=L ...] [--steps=N]')

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Run config file (configs/*.py).',
                                          lock_config=True)
_STEPS = flags.DEFINE_integer('steps', 50, 'Timed steps (after compilation and warm-up).')
_WARMUP = flags.DEFINE_integer('warmup', 3, 'Untimed steps after the compiling one.')
_MATMUL_SIZE = flags.DEFINE_integer('peak_matmul_size', 2048,
                                    'Side of the square matmul that measures a CPU\'s peak.')
_TOPOLOGY = flags.DEFINE_string('topology', None, 'Moved: python -m electra_jax.compile '
                                 '--config=... --topology=NAME.')
flags.mark_flags_as_required(['config'])

# Distinct batches cycled through: enough that no step sees the previous step's data.
NUM_BATCHES = 4
# Windows of the timed steps compared by the steady-state check (needs --steps >= 220).
EARLY_WINDOW = (10, 110)
LATE_WINDOW_SIZE = 100


def synthetic_batch(rng: np.random.Generator, batch_size: int, length: int, vocab_size: int,
                    special: objective.SpecialIds = objective.SpecialIds()) -> dict:
  """Random tokens packed like real examples: [CLS] A [SEP] B [SEP] and then padding. As the
  packer makes them, 5% of rows are a random shorter length and 10% have no B segment."""
  lengths = np.where(rng.random(batch_size) < 0.95, length,
                     rng.integers(5, length + 1, batch_size))
  ids = rng.integers(max(special.ids()) + 1, vocab_size, (batch_size, length))
  first_sep = np.where(rng.random(batch_size) < 0.1, lengths - 1,
                       rng.integers(2, lengths - 2))
  columns = np.arange(length)[None, :]
  ids[:, 0] = special.cls
  ids[np.arange(batch_size), first_sep] = special.sep
  ids[np.arange(batch_size), lengths - 1] = special.sep
  ids[columns >= lengths[:, None]] = special.pad
  segment_ids = (columns > first_sep[:, None]) & (columns < lengths[:, None])
  return {'input_ids': ids.astype(np.int32), 'segment_ids': segment_ids.astype(np.int32)}


def device_peak(dtype, matmul_size: int) -> tuple[float | None, str]:
  """(peak FLOP/s of all devices, where the number comes from)."""
  devices = jax.devices()
  if devices[0].platform == 'cpu':
    # Simulated CPU devices share the host's cores, so the host's rate is the peak of all of them.
    x = jnp.ones((matmul_size, matmul_size), dtype)
    matmul = jax.jit(lambda a: a @ a)
    jax.block_until_ready(matmul(x))  # compiles
    best = min(timeit.repeat(lambda: jax.block_until_ready(matmul(x)), number=1, repeat=5))
    return (2 * matmul_size**3 / best, f'measured: best {jnp.dtype(dtype).name} '
            f'{matmul_size}x{matmul_size} matmul in this process')
  peak = flops.table_peak_flops(devices[0].device_kind)
  if peak is None:
    return None, f'unknown device kind {devices[0].device_kind!r}'
  return peak * len(devices), 'data sheet: dense bfloat16 per device x devices'


def peak_memory_bytes() -> int | None:
  """The largest peak allocation of any local device, where the backend reports one (not CPU)."""
  peaks = [(d.memory_stats() or {}).get('peak_bytes_in_use') for d in jax.local_devices()]
  return max((p for p in peaks if p is not None), default=None)


def timing_summary(step_seconds: list[float]) -> dict:
  """Median step time, its spread, and (for long runs) early against late steady-state steps."""
  summary = {'median_step_s': statistics.median(step_seconds), 'min_step_s': min(step_seconds),
             'max_step_s': max(step_seconds), 'steady_state': None}
  if len(step_seconds) >= 2 * EARLY_WINDOW[1]:
    early = statistics.median(step_seconds[slice(*EARLY_WINDOW)])
    late = statistics.median(step_seconds[-LATE_WINDOW_SIZE:])
    summary['steady_state'] = {
        'early_steps': list(EARLY_WINDOW), 'early_median_s': early,
        'late_steps': [len(step_seconds) - LATE_WINDOW_SIZE, len(step_seconds)],
        'late_median_s': late, 'late_over_early': late / early}
  return summary


def result_record(*, framework: str, config: ml_collections.ConfigDict, device_kind: str,
                  device_count: int, step_seconds: list[float], peak_flops: float | None,
                  peak_source: str, **extra) -> dict:
  """The benchmark's JSON record; the PyTorch peer (benchmarks/hf_peer.py) writes the same one."""
  summary = timing_summary(step_seconds)
  step_flops = flops.train_step_flops(config)
  median = summary['median_step_s']
  return {
      'framework': framework, 'objective': config.objective, 'device_kind': device_kind,
      'device_count': device_count, 'dtype': config.dtype, 'batch_size': config.batch_size,
      'max_seq_length': config.max_seq_length, 'steps': len(step_seconds), **summary,
      'tokens_per_s': config.batch_size * config.max_seq_length / median,
      'sequences_per_s': config.batch_size / median,
      'model_flops_per_step': step_flops, 'achieved_flops_per_s': step_flops / median,
      'peak_flops_per_s': peak_flops, 'peak_source': peak_source,
      'mfu': step_flops / median / peak_flops if peak_flops else None, **extra}


def run(config: ml_collections.ConfigDict, steps: int, warmup: int = 3,
        matmul_size: int = 2048) -> dict:
  """Times `steps` train steps of `config` on all devices; returns the JSON record."""
  mesh = train.make_mesh()
  model = train.make_model(config)
  optimizer = optim.make_optimizer(config)
  step, _, replicated, batch_sharding = train.compile_steps(config, model, optimizer, mesh)
  state = train.create_train_state(config, model, optimizer, replicated)
  rng = np.random.default_rng(config.seed)
  batches = [jax.device_put(synthetic_batch(rng, config.batch_size, config.max_seq_length,
                                            config.model.vocab_size), batch_sharding)
             for _ in range(NUM_BATCHES)]

  def run_step(state, index):
    # As the training loop does it: the step's key is derived on the device, nothing is read back.
    return step(state, batches[index % NUM_BATCHES], train.step_key(config, state.rng, index))

  start = time.perf_counter()
  state, stats = jax.block_until_ready(run_step(state, 0))
  compile_seconds = time.perf_counter() - start
  for index in range(1, 1 + warmup):
    state, stats = run_step(state, index)
  jax.block_until_ready(state)
  step_seconds = []
  for index in range(1 + warmup, 1 + warmup + steps):
    start = time.perf_counter()
    state, stats = jax.block_until_ready(run_step(state, index))
    step_seconds.append(time.perf_counter() - start)
  # As training runs them: dispatched back to back, so that the host's work for one step hides
  # behind the device's work on the one before; timing each step to completion above exposes it.
  start = time.perf_counter()
  for index in range(1 + warmup + steps, 1 + warmup + 2 * steps):
    state, stats = run_step(state, index)
  jax.block_until_ready(state)
  pipelined_step_seconds = (time.perf_counter() - start) / steps
  train.check_compiled_once(step)
  compilations = step._cache_size()  # pylint: disable=protected-access
  loss = float(stats['loss'])
  if not np.isfinite(loss):
    raise FloatingPointError(f'the benchmark\'s loss is {loss}')

  peak, peak_source = device_peak(train.DTYPES[config.dtype], matmul_size)
  devices = jax.devices()
  # What computes the discriminator's attention in a training step.
  attention = 'einsum (attention dropout is on; the fused kernels have none)'
  if config.model.attention_dropout_rate == 0:
    attention = attention_kernel(config.attention, train.DTYPES[config.dtype],
                                 config.model.hidden_size // config.model.num_heads)
  return result_record(
      framework=f'electra_jax (jax {jax.__version__})', config=config,
      device_kind=devices[0].device_kind, device_count=len(devices), step_seconds=step_seconds,
      peak_flops=peak, peak_source=peak_source, peak_memory_bytes=peak_memory_bytes(),
      compile_s=compile_seconds, compilations=compilations,
      pipelined_step_s=pipelined_step_seconds,
      pipelined_tokens_per_s=config.batch_size * config.max_seq_length / pipelined_step_seconds,
      attention=attention, final_loss=loss)


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  if _TOPOLOGY.value:
    cli.fail('compiling for a TPU slice is its own command now: python -m electra_jax.compile '
             f'--config=... --topology={_TOPOLOGY.value}')
  config = cli.run(aot.checked_without_data, _CONFIG.value, jax.device_count())
  record = run(config, _STEPS.value, _WARMUP.value, _MATMUL_SIZE.value)
  print(json.dumps(record), flush=True)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.flags_parser(USAGE))
