"""XLA's compiled steps kept on disk, so that a run started again does not compile them again.

A run resumes often (preemption, a crash), and compiling its step is not free: `base` takes 308 s
for a v4-8 (docs/performance.md), `tiny` 15 s on a CPU. JAX's persistent cache keys each program by
its HLO, options and backend (a resume with more steps or another learning rate builds another
program: the schedule is compiled into the step).

config.compilation_cache_dir says where: '' (the default) is $JAX_COMPILATION_CACHE_DIR where set,
else <workdir>/compilation_cache, which goes wherever the run goes; a path or gs:// URI; 'none'
turns the cache off. JAX writes entries only from process 0 and every process reads them, so on a
pod slice the cache belongs on storage all workers share. Whoever can write to the cache can make
the run execute their code (JAX's warning): keep it where only you write.
"""

import os

import jax
from jax.experimental.compilation_cache import compilation_cache

# The jax.monitoring event JAX records each time it reads a compiled program from the cache.
HIT_EVENT = '/jax/compilation_cache/cache_hits'
_hits = 0
_listening = False


def _count(event: str, **unused_kwargs):
  global _hits
  if event == HIT_EVENT:
    _hits += 1


def cache_dir(setting: str, workdir: str) -> str | None:
  """Where the compiled steps are kept (None: nowhere) for config.compilation_cache_dir."""
  return None if setting == 'none' else (setting or os.environ.get('JAX_COMPILATION_CACHE_DIR')
                                          or os.path.join(workdir, 'compilation_cache'))


def use(setting: str, workdir: str) -> str | None:
  """Points JAX's compilation cache at cache_dir(...) for what this process compiles from now
  on, and starts counting reads from it (`hits`). Returns the directory, or None."""
  global _listening
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
  if not _listening:
    jax.monitoring.register_event_listener(_count)
    _listening = True
  return path


def hits() -> int:
  """Programs this process has read from the compilation cache so far."""
  return _hits
