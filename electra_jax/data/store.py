"""Prepared examples on disk: manifest.json and .npy shards of fixed-length records.

A shard is a structured array, a row per example (`input_ids`, `segment_ids` and a `check` of
the row and its place), one shard per unit of work, ids counting through them in order. Shards
are memory-mapped, so a process reads only the pages it gathers and a host shares one page
cache. Not ArrayRecord: its reader costs ~3 ms per call, and in benchmarks/data_pipeline.py it
delivered 2-5M tokens/s on one core where these shards deliver 49-74M. Damage is caught, never
repaired: opening checks each shard's size and header, each row read its check, and
verify_store every file's sha256.
"""

import functools
import hashlib
import json
import os

import numpy as np

from electra_jax.common import storage
from electra_jax.common.errors import UsageError

FORMAT = 1                 # Bump when the layout changes; older directories are refused.
MANIFEST = 'manifest.json'
_ROW_MIX = np.uint64(0x9E3779B1)    # Odd constants that spread a row's place over the check.
_SHARD_MIX = np.uint64(0x85EBCA77)


def record_dtype(max_seq_length: int, ids_dtype: str) -> np.dtype:
  """One example's record; `check` must stay last (row_checks sums the bytes before it)."""
  return np.dtype([('input_ids', ids_dtype, (max_seq_length,)),
                   ('segment_ids', np.uint8, (max_seq_length,)), ('check', '<u4')])


def ids_dtype_for(vocab_size: int) -> str:
  return '<u2' if vocab_size <= 1 << 16 else '<i4'


@functools.lru_cache(maxsize=8)
def _byte_weights(num_bytes: int) -> np.ndarray:
  # Integers below 2**20 as float64: a row's weighted byte sum stays below 2**53, so the BLAS
  # dot product is exact, and a changed byte always changes it (every weight is non-zero).
  return np.random.default_rng(0xE1EC7A).integers(1, 1 << 20, num_bytes).astype(np.float64)


def row_checks(rows: np.ndarray, shard: np.ndarray | int, row_index: np.ndarray) -> np.ndarray:
  """uint32 checksums of contiguous `rows` at (shard, row_index): what `check` must hold."""
  data = rows.view(np.uint8).reshape(len(rows), rows.dtype.itemsize)[:, :-4]
  total = (data.astype(np.float64) @ _byte_weights(data.shape[1])).astype(np.uint64)
  total += np.asarray(row_index, np.uint64) * _ROW_MIX + np.asarray(shard, np.uint64) * _SHARD_MIX
  return (total & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def shard_name(index: int, count: int) -> str:
  return f'shard-{index:05d}-of-{count:05d}.npy'


def file_sha256(path: str) -> str:
  with open(path, 'rb') as f:
    return hashlib.file_digest(f, 'sha256').hexdigest()


def write_shard(path: str, rows: np.ndarray) -> dict:
  """Writes one shard (atomically) and returns its manifest entry."""
  tmp_path = f'{path}.tmp{os.getpid()}'
  with open(tmp_path, 'wb') as f:
    np.save(f, rows, allow_pickle=False)
  os.replace(tmp_path, path)
  return {'file': os.path.basename(path), 'examples': len(rows),
          'bytes': os.path.getsize(path), 'sha256': file_sha256(path)}


def write_manifest(directory: str, manifest: dict) -> None:
  storage.write_text(os.path.join(directory, MANIFEST), json.dumps(manifest, indent=1))


def check_local(directory: str, setting: str) -> None:
  """Prepared data is memory-mapped, so it must be on a local (or mounted) file system."""
  if '://' in directory:
    raise UsageError(f"{setting}='{directory}' is not a local path; prepared data is memory-"
                     'mapped: copy it to local disk (gcloud storage cp -r) or mount the bucket '
                     'with gcsfuse, and name that directory')


def read_manifest(directory: str) -> dict:
  path = os.path.join(directory, MANIFEST)
  try:
    with open(path) as f:
      manifest = json.load(f)
  except FileNotFoundError:
    raise UsageError(f"'{directory}' holds no prepared data (no {MANIFEST}); prepare it with "
                     '`python -m electra_jax.prepare --config=... --out=DIR`') from None
  except (OSError, ValueError) as e:
    raise UsageError(f"cannot read '{path}' ({e}); prepare the data again") from None
  if not isinstance(manifest, dict) or 'format' not in manifest:
    raise UsageError(f"'{path}' names no format, so electra_jax.prepare did not write it; "
                     'prepare the data again')
  if manifest['format'] != FORMAT:
    raise UsageError(f"'{directory}' was prepared in format {manifest['format']}, this "
                     f'electra_jax reads format {FORMAT}; prepare the data again')
  manifest.setdefault('documents', False)  # prepared before document ids: none
  return manifest


class ExampleStore:
  """The examples of a prepared split: len(), gather(indices) and [i], read from memory maps."""

  def __init__(self, directory: str, manifest: dict, remedy: str):
    self.directory = directory
    self.manifest = manifest
    self.max_seq_length = int(manifest['max_seq_length'])
    self._remedy = remedy  # What to do about damage, for messages.
    self._dtype = record_dtype(self.max_seq_length, manifest['ids_dtype'])
    self._shards = [_open_shard(directory, entry, self._dtype, remedy)
                    for entry in manifest['shards']]
    sizes = np.array([len(s) for s in self._shards], np.int64)
    self._ends = np.cumsum(sizes)
    self._starts = self._ends - sizes

  def __len__(self) -> int:
    return int(self._ends[-1]) if len(self._ends) else 0

  @property
  def source_sizes(self) -> list[int]:
    """Examples per source; source k holds ids [sum(sizes[:k]), sum(sizes[:k + 1]))."""
    return [s['examples'] for s in self.manifest['sources']]

  @property
  def weights(self) -> list[float] | None:
    """Mixture weights of the sources, or None when they form one concatenated corpus."""
    weights = [s['weight'] for s in self.manifest['sources']]
    return None if None in weights else weights

  def gather(self, indices) -> dict[str, np.ndarray]:
    """{'input_ids', 'segment_ids'}: int32 [n, L] rows of the examples `indices`, in order."""
    indices = np.asarray(indices, np.int64).reshape(-1)
    if indices.size and not (0 <= indices.min() and indices.max() < len(self)):
      raise IndexError(f'example ids must be in [0, {len(self)}), got '
                       f'[{indices.min()}, {indices.max()}]')
    # Sorted, the rows of one shard are contiguous: one read (take) per shard touched.
    order = np.argsort(indices, kind='stable')
    sorted_ids = indices[order]
    shard = np.searchsorted(self._ends, sorted_ids, side='right')
    local = sorted_ids - self._starts[shard]
    rows = np.empty(len(indices), self._dtype)
    bounds = np.flatnonzero(shard[1:] != shard[:-1]) + 1
    for begin, end in zip([0, *bounds.tolist()], [*bounds.tolist(), len(indices)]):
      self._shards[shard[begin]].take(local[begin:end], axis=0, out=rows[begin:end])
    bad = np.flatnonzero(row_checks(rows, shard, local) != rows['check'])
    if bad.size:
      path = os.path.join(self.directory, self.manifest['shards'][shard[bad[0]]]['file'])
      raise UsageError(f'example {sorted_ids[bad[0]]} (row {local[bad[0]]} of {path}) fails its '
                       f'checksum: the prepared data is damaged; {self._remedy}')
    unsorted = np.empty_like(rows)
    unsorted[order] = rows
    return {'input_ids': unsorted['input_ids'].astype(np.int32),
            'segment_ids': unsorted['segment_ids'].astype(np.int32)}

  def __getitem__(self, index: int) -> dict[str, np.ndarray]:
    return {k: v[0] for k, v in self.gather([index]).items()}


def _open_shard(directory: str, entry: dict, dtype: np.dtype, remedy: str) -> np.ndarray:
  path = os.path.join(directory, entry['file'])
  try:
    size = os.path.getsize(path)
  except OSError:
    raise UsageError(f"prepared shard '{path}' is missing; {remedy}") from None
  if size != entry['bytes']:
    raise UsageError(f"prepared shard '{path}' has {size} bytes but {entry['bytes']} were "
                     f'written (truncated or replaced); {remedy}')
  if entry['examples'] == 0:
    return np.empty(0, dtype)
  try:
    # A plain ndarray over the map: np.memmap's own indexing costs several times more.
    rows = np.load(path, mmap_mode='r', allow_pickle=False).view(np.ndarray)
  except (ValueError, OSError) as e:
    raise UsageError(f"prepared shard '{path}' is not a readable .npy file ({e}); "
                     f'{remedy}') from None
  if rows.dtype != dtype or rows.shape != (entry['examples'],):
    raise UsageError(f"prepared shard '{path}' holds {rows.shape} rows of {rows.dtype}, not "
                     f"({entry['examples']},) of {dtype}; {remedy}")
  return rows


def open_store(directory: str, *, vocab_sha256: str | None = None,
               max_seq_length: int | None = None, documents: bool | None = None,
               remedy: str = '') -> ExampleStore:
  """Opens a prepared split after checking it against the manifest and the run's settings."""
  remedy = remedy or f'prepare it again (python -m electra_jax.prepare ... --out={directory})'
  manifest = read_manifest(directory)
  if vocab_sha256 is not None and manifest['vocab_sha256'] != vocab_sha256:
    raise UsageError(
        f"'{directory}' was prepared with vocabulary sha256 {manifest['vocab_sha256'][:12]}... but "
        f'this run uses {vocab_sha256[:12]}...; train with the vocabulary it was prepared with '
        '(data.vocab_model, or a new --workdir) or prepare the data with this one')
  if max_seq_length is not None and manifest['max_seq_length'] != max_seq_length:
    raise UsageError(f"'{directory}' holds examples of {manifest['max_seq_length']} tokens, but "
                     f'config.max_seq_length={max_seq_length}; set --config.max_seq_length='
                     f"{manifest['max_seq_length']} or prepare the data again")
  holds = manifest['documents']
  if documents is not None and holds != documents:
    raise UsageError(
        f"'{directory}' holds examples with document ids (packing 'documents'); set "
        '--config.data.document_attention=true, or prepare the data again without it'
        if holds else f"'{directory}' holds no document ids (it was prepared without packing "
        "'documents'), which config.data.document_attention reads; prepare it again with "
        '--config.data.document_attention=true')
  return ExampleStore(directory, manifest, remedy)


def verify_store(directory: str) -> int:
  """Compares every shard's sha256 with the manifest's; returns the number of bytes checked."""
  manifest = read_manifest(directory)
  checked = 0
  for entry in manifest['shards']:
    path = os.path.join(directory, entry['file'])
    if not os.path.exists(path) or file_sha256(path) != entry['sha256']:
      raise UsageError(f"prepared shard '{path}' is missing or differs from what was written "
                       '(sha256 mismatch); prepare the data again')
    checked += entry['bytes']
  return checked
