"""The run's random keys: which generator makes the bits (config.rng_impl), the key each step
is given, and what rbg costs on a TPU slice.

The train state keeps its key as raw data (uint32 words), so checkpoints hold plain arrays; a
step's key is fold_in(base key, step), so a resumed run draws what an uninterrupted one would.
"""

import functools
import re

import jax


# libtpu's switch (LIBTPU_INIT_ARGS; XLA_FLAGS does not know it and stops the process) that
# makes XLA:TPU generate only each chip's share of an RngBitGenerator's bits.
RBG_PARTITION_FLAG = '--xla_tpu_spmd_rng_bit_generator_unsafe=true'
_RBG_PARTITION_SETTING = re.compile(r'--xla_tpu_spmd_rng_bit_generator_unsafe(?:=(\S*))?')


def rbg_sharding_warning(config, platform: str, num_devices: int, libtpu_args: str) -> str | None:
  """What a run of rng_impl=rbg or unsafe_rbg on several TPU chips should be told, or None.

  XLA:TPU does not partition RngBitGenerator by default: every chip makes the bits of the whole
  global batch and keeps its share (small on a v4-8: 4 times the words, 1.53 GB of temporaries
  per chip against threefry's 0.78; docs/performance.md). Under RBG_PARTITION_FLAG, a draw that
  remat recomputes in the backward pass may be sharded otherwise, and so hold other bits.
  """
  impl = config.rng_impl
  if impl == 'threefry2x32' or platform != 'tpu' or num_devices == 1:
    return None
  settings = _RBG_PARTITION_SETTING.findall(libtpu_args)
  if not settings or settings[-1].lower() not in ('', 'true', '1'):
    return (f"rng_impl={impl} on {num_devices} TPU chips: each chip generates the random bits of "
            f"the whole batch and keeps its share, {num_devices} times the bits it uses. Start "
            f"the run with LIBTPU_INIT_ARGS='{RBG_PARTITION_FLAG}' to generate each chip's share "
            "only (the bits then depend on the chip count), or use "
            "--config.rng_impl=threefry2x32")
  if config.remat:
    return (f'rng_impl={impl} with {RBG_PARTITION_FLAG} and remat: XLA may shard a draw that the '
            'backward pass recomputes otherwise than the forward pass drew it, and the two then '
            'hold other bits. Turn remat off, leave the flag out, or use '
            '--config.rng_impl=threefry2x32')
  return None


def base_key(config, seed: int | None = None) -> jax.Array:
  """A typed key of config.rng_impl. For threefry its bits are jax.random.PRNGKey(seed)'s."""
  return jax.random.key(config.seed if seed is None else seed, impl=config.rng_impl)


@functools.partial(jax.jit, static_argnames='impl')
def _fold_in(data, step, impl):
  return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(data, impl=impl), step))


def step_key(config, data: jax.Array, step) -> jax.Array:
  """fold_in(key, step) of the raw key `data`, as raw data: what a step is given."""
  return _fold_in(data, step, config.rng_impl)


def as_key(config, data: jax.Array) -> jax.Array:
  return jax.random.wrap_key_data(data, impl=config.rng_impl)
