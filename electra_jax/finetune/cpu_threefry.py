"""Threefry-2x32 lowered in line on CPU: the same random bits, drawn in one fused kernel.

Every jax.random draw (here: the dropout masks) runs the threefry2x32 primitive. On CPU, JAX
lowers its 20 rounds as a loop of 5 iterations, which keeps compile times short for programs
with many draws; on GPU and TPU it emits them in line. XLA:CPU runs each iteration of such a
loop as separate kernels, each reading and writing the whole array of counters, where the
rounds in line fuse into one elementwise kernel. Fine-tuning draws a mask for every hidden
state and attention probability at every step: with the rounds in line the tiny model's step
costs 10% (length 64) to 15% (length 128) less CPU time (docs/performance.md). The function is
integer arithmetic, so evaluation order cannot change a bit: results are identical.

The switch holds only inside `in_line_on_cpu()`, around fine-tuning: every other program keeps
JAX's own lowering. Made global, it reached programs it was never measured on: with jax 0.12,
XLA:CPU had not finished compiling the evaluation step of the `electra_15` objective (Gumbel
draws over the vocabulary) after 4 minutes, where a whole 6-step run with JAX's loop takes 23 s.

The rounds follow the Threefry specification (Salmon et al., "Parallel random numbers: as easy
as 1, 2, 3", SC 2011): add-rotate-xor with the rotation constants below and a key injection
after every fourth round, the third key word being the two xor'd with a fixed parity constant.
"""

import contextlib
import contextvars
import functools

import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p
from jax.interpreters import mlir

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # alternate between groups of four rounds
KEY_PARITY = np.uint32(0x1BD11BDA)


def rotate_left(x, bits: int):
  return jnp.left_shift(x, np.uint32(bits)) | jnp.right_shift(x, np.uint32(32 - bits))


def threefry2x32(key0, key1, x0, x1):
  """Threefry-2x32 with 20 rounds of the counters (x0, x1) under the key (key0, key1)."""
  keys = (key0, key1, key0 ^ key1 ^ KEY_PARITY)
  x0, x1 = x0 + keys[0], x1 + keys[1]
  for injection in range(1, 6):
    for bits in ROTATIONS[(injection - 1) % 2]:
      x0 = x0 + x1
      x1 = rotate_left(x1, bits) ^ x0
    x0 = x0 + keys[injection % 3]
    x1 = x1 + keys[(injection + 1) % 3] + np.uint32(injection)
  return x0, x1


_IN_LINE = mlir.lower_fun(threefry2x32, multiple_results=True)
_IN_LINE_NOW = contextvars.ContextVar('threefry_in_line_on_cpu', default=False)


def _jax_cpu_rule():
  """JAX's own CPU lowering of threefry2x32, or None where this JAX keeps it elsewhere."""
  try:
    from jax._src.interpreters import mlir as mlir_internal  # pylint: disable=g-import-not-at-top
    return mlir_internal._platform_specific_lowerings['cpu'][threefry2x32_p].rule  # pylint: disable=protected-access
  except (ImportError, AttributeError, KeyError):
    return None


@functools.cache
def _register() -> bool:
  """Puts a CPU rule in front of JAX's that lowers in line only inside `in_line_on_cpu()`."""
  jax_rule = _jax_cpu_rule()
  if jax_rule is None:  # only speed is lost: the bits are JAX's either way
    return False

  def rule(ctx, *args, **params):
    return (_IN_LINE if _IN_LINE_NOW.get() else jax_rule)(ctx, *args, **params)

  mlir.register_lowering(threefry2x32_p, rule, platform='cpu')
  return True


@contextlib.contextmanager
def in_line_on_cpu():
  """CPU programs compiled within lower threefry2x32 in line; also a function decorator."""
  if not _register():
    yield
    return
  token = _IN_LINE_NOW.set(True)
  try:
    yield
  finally:
    _IN_LINE_NOW.reset(token)
