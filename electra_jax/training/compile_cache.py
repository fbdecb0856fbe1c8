"""XLA's compiled steps kept on disk, so that a run started again does not compile them again.

config.compilation_cache_dir says where (docs/training.md): compiling `base` for a v4-8 takes
308 s, and a run resumes often. JAX keys each program by its HLO, options and backend.
"""

import os

import jax
from jax.experimental.compilation_cache import compilation_cache

# The jax.monitoring event JAX records each time it reads a compiled program from the cache.
HIT_EVENT = '/jax/compilation_cache/cache_hits'
_hits = 0


def _count(event: str, **unused_kwargs):
  global _hits
  if event == HIT_EVENT:
    _hits += 1


jax.monitoring.register_event_listener(_count)


def cache_dir(setting: str, workdir: str) -> str | None:
  """Where the compiled steps are kept (None: nowhere) for config.compilation_cache_dir."""
  return None if setting == 'none' else (setting or os.environ.get('JAX_COMPILATION_CACHE_DIR')
                                          or os.path.join(workdir, 'compilation_cache'))


def use(setting: str, workdir: str) -> str | None:
  """Points JAX's compilation cache at cache_dir(...) for what this process compiles from now
  on. Returns the directory, or None."""
  path = cache_dir(setting, workdir)
  if path is None:
    jax.config.update('jax_enable_compilation_cache', False)
    return None
  if jax.config.jax_compilation_cache_dir not in (None, path):
    compilation_cache.reset_cache()  # JAX opens its cache once, where it was first pointed
  jax.config.update('jax_enable_compilation_cache', True)
  if jax.default_backend() != 'gpu':
    # JAX also points XLA's GPU autotuning cache into the directory, and before jax 0.11 that
    # path entered every program's key: a run moved elsewhere would miss its own entries.
    jax.config.update('jax_persistent_cache_enable_xla_caches', 'none')
  compilation_cache.set_cache_dir(path)
  return path


def hits() -> int:
  """Programs this process has read from the compilation cache so far."""
  return _hits
