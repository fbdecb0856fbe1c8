"""What a compiled step holds: its memory, XLA's cost analysis and its collectives, read from the
compiled executable and its partitioned HLO text (training/aot.py compiles the programs)."""

import math
import re

import jax
import jax.numpy as jnp


def tree_bytes(tree) -> int:
  """Bytes of the abstract arrays in `tree` on one device (its shard of each)."""
  return sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * jnp.dtype(leaf.dtype).itemsize
             for leaf in jax.tree.leaves(tree))


def memory(compiled, hbm_bytes: int) -> dict:
  """XLA's memory analysis of one device's program, in bytes; donated inputs alias outputs, so
  the total counts them once."""
  m = compiled.memory_analysis()
  total = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
           + m.temp_size_in_bytes + m.generated_code_size_in_bytes)
  return {'arguments': m.argument_size_in_bytes, 'outputs': m.output_size_in_bytes,
          'aliased': m.alias_size_in_bytes, 'temporaries': m.temp_size_in_bytes,
          'program': m.generated_code_size_in_bytes, 'total': total, 'hbm': hbm_bytes,
          'fits': total <= hbm_bytes}


def cost(compiled) -> dict:
  """XLA's count of one device's FLOPs and HBM bytes accessed per step."""
  analysis = compiled.cost_analysis()
  # XLA's keys vary by backend and version; a count it leaves out is taken as 0.
  return {'flops': float(analysis.get('flops', 0.0)),
          'bytes_accessed': float(analysis.get('bytes accessed', 0.0))}


COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all', 'collective-permute')
_DTYPE_BYTES = {'pred': 1, 's8': 1, 'u8': 1, 's16': 2, 'u16': 2, 'f16': 2, 'bf16': 2, 's32': 4,
                'u32': 4, 'f32': 4, 's64': 8, 'u64': 8, 'f64': 8}
# `%name = <result shape> <opcode>(operands), ...`; async pairs appear as <op>-start/<op>-done.
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%\S+\s*=\s*(?P<shape>.+?)\s+'
                          r'(?P<op>' + '|'.join(COLLECTIVES) + r')(?P<suffix>-start|-done)?\(')
_ARRAY = re.compile(r'\b(' + '|'.join(_DTYPE_BYTES) + r')\[([\d,]*)\]')
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def _arrays(shape_text: str) -> list[tuple[str, tuple[int, ...]]]:
  return [(dtype, tuple(int(n) for n in dims.split(',') if n))
          for dtype, dims in _ARRAY.findall(shape_text)]


def collectives(hlo_text: str) -> list[dict]:
  """Every collective of a compiled (partitioned) HLO module: op, arrays, bytes, source op. An
  async pair counts once, at its -start, whose result (all-gather, collective-permute) holds its
  operands and then its results: only the second half is what it moves."""
  found = []
  for line in hlo_text.splitlines():
    match = _INSTRUCTION.match(line)
    if not match or match['suffix'] == '-done':
      continue
    arrays = _arrays(match['shape'])
    if match['suffix'] == '-start' and match['op'] in ('all-gather', 'collective-permute'):
      arrays = arrays[len(arrays) // 2:]
    elements = [math.prod(dims) for _, dims in arrays]
    op_name = _OP_NAME.search(line)
    found.append({'op': match['op'], 'arrays': arrays, 'elements': sum(elements),
                  'bytes': sum(n * _DTYPE_BYTES[d] for n, (d, _) in zip(elements, arrays)),
                  'source': op_name[1] if op_name else ''})
  return found


def random_bit_elements(hlo_text: str) -> int:
  """How many random words the XLA RngBitGenerator instructions of a compiled program make (per
  device, once partitioned): rng_impl=rbg's bits. Threefry's are arithmetic and count 0 here."""
  return sum(math.prod(dims) for line in hlo_text.splitlines() if ' rng-bit-generator(' in line
             for dtype, dims in _arrays(line.split(' rng-bit-generator(')[0].split('=', 1)[-1])
             if dtype != 'u64')  # the generator's state, where the result shows it


def collective_summary(found: list[dict], params) -> dict:
  """Counts and bytes per kind of collective, checked against data parallelism's one all-reduce
  of every gradient (docs/performance.md, "How to read the numbers"): an all-gather of a
  parameter's shape would mean parameters or optimizer state sharded and re-gathered."""
  summary = {}
  for kind in COLLECTIVES:
    ops = [c for c in found if c['op'] == kind]
    if ops:
      summary[kind] = {'count': len(ops), 'bytes': sum(c['bytes'] for c in ops),
                       'elements': sum(c['elements'] for c in ops)}
  param_shapes = {tuple(p.shape) for p in jax.tree.leaves(params)}
  reduced = [(dtype, dims) for c in found if c['op'] == 'all-reduce' for dtype, dims in c['arrays']]
  gathers = [c for c in found if c['op'] == 'all-gather']
  parameters = sum(p.size for p in jax.tree.leaves(params))
  arrays = sum(math.prod(dims) for _, dims in reduced if dims)
  summary['gradient'] = {
      'parameters': parameters,
      # Arrays (not scalars: those are the step's statistics) all-reduced per step, in elements.
      'all_reduced_array_elements': arrays,
      'all_reduced_scalars': sum(1 for _, dims in reduced if not dims),
      'all_reduced_over_parameters': arrays / parameters if parameters else None,
      'all_gathers_of_parameter_shape': sum(
          1 for c in gathers for _, dims in c['arrays'] if dims in param_shapes),
      'all_gather_sources': sorted({c['source'] for c in gathers}),
  }
  return summary


# A Pallas (Mosaic) kernel is a custom call to XLA. `%<kernel name> = <results> custom-call(...)`
_CUSTOM_CALL = re.compile(r'^\s*(?:ROOT\s+)?%(?P<name>\S+)\s*=\s*(?P<results>.+?)\s+custom-call\('
                          r'(?P<operands>[^)]*)\).*custom_call_target="tpu_custom_call"')
_DEFINITION = re.compile(r'^\s*(?:ROOT\s+)?%(?P<name>\S+)\s*=\s*(?P<shape>.+?)\s+[\w\-\.]+\(')
_FLOAT = ('bf16', 'f16', 'f32')


def attention_kernel_matmuls(name: str, results: list) -> int:
  """Matmuls of L x L x D that a Pallas attention kernel does, told from its name and results:
  the forward pass 2 (QKᵀ, PV); the dK/dV pass 4 (recomputed QKᵀ, dOVᵀ, PᵀdO, dSᵀQ), 5 where it
  also makes dQ (splash's fused backward kernel: results of Q's shape, dQ dK dV); the dQ pass 3."""
  if 'dkv' in name:
    per_head = [dims for dtype, dims in results if dtype in _FLOAT and len(dims) >= 3]
    return 5 if len(per_head) >= 3 else 4
  return 3 if 'dq' in name else 2


def pallas_kernels(hlo_text: str) -> dict:
  """The Pallas attention kernels of a compiled program: their count, FLOPs and HBM bytes.

  XLA counts a custom call's FLOPs only where Pallas gave it an estimate (flash attention's
  forward pass; none of splash's), so they are counted from the shapes: 2·(B·H)·Lq·Lk·D per
  matmul, Q the first float operand of rank 3 or more and K the second. The bytes assume each
  operand and result is read or written once (true where one block spans the sequence, L <= 512).
  """
  shapes = {m['name']: m['shape'] for m in map(_DEFINITION.match, hlo_text.splitlines()) if m}
  found = {}
  for line in hlo_text.splitlines():
    if not (match := _CUSTOM_CALL.match(line)):
      continue
    results = _arrays(match['results'])
    operands = [a for name in re.findall(r'%([\w\.\-]+)', match['operands'])
                for a in _arrays(shapes.get(name, ''))]
    per_head = [dims for dtype, dims in operands if dtype in _FLOAT and len(dims) >= 3]
    flops = 0
    if len(per_head) >= 2:
      q, k = per_head[0], per_head[1]
      flops = attention_kernel_matmuls(match['name'], results) * 2 * math.prod(q[:-2]) * (
          q[-2] * k[-2] * q[-1])
    kind = re.sub(r'(_block.*|\.\d+)$', '', match['name'])
    entry = found.setdefault(kind, {'count': 0, 'flops': 0, 'bytes': 0, 'flops_not_in_xla': 0})
    entry['count'] += 1
    entry['flops'] += flops
    entry['bytes'] += sum(math.prod(dims) * _DTYPE_BYTES[d] for d, dims in operands + results)
    if '"cost_estimate"' not in line:
      entry['flops_not_in_xla'] += flops
  totals = {k: sum(e[k] for e in found.values()) for k in ('count', 'flops', 'flops_not_in_xla')}
  return {**totals, 'bytes': sum(e['bytes'] for e in found.values()), 'kernels': found}
