"""Preparing a corpus once: a prepared directory (vocabulary and splits), or main's cached split.

Each unit of work (sources.py) becomes one shard packed with its own stream
default_rng([seed, source, unit]), so the examples are a pure function of (corpus, vocabulary,
max_seq_length, seed) whatever the number of workers. Workers are spawned, not forked: the parent
may hold JAX's threads. Everything is made beside its place and moved in only when complete, so
an interrupted or refused preparation leaves what it would replace as it was.
"""

import collections
import contextlib
from collections.abc import Iterable, Iterator, Sequence
import dataclasses
import functools
import glob
import json
import multiprocessing
import os
import shutil
import sys
import time

from absl import logging
import numpy as np
import tqdm

from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.data import packing, sources as sources_lib, store, text
from electra_jax.data import vocab as vocab_lib

_LINES_PER_ENCODE = 4096  # Lines tokenized per call (sentencepiece encodes a batch in C++).
SPLITS = ('train', 'eval')
# A vocabulary's files: each kind's, and the piece list sentencepiece writes beside its model.
VOCAB_FILES = (*vocab_lib.VOCAB_NAMES, 'vocab.vocab')


@dataclasses.dataclass(frozen=True)
class _Task:
  """What a worker needs to turn one unit into one shard (picklable)."""
  unit: sources_lib.Unit
  source_index: int
  unit_index: int
  shard_path: str
  shard_index: int
  vocab_path: str
  vocab_sha256: str
  max_seq_length: int
  seed: int
  ids_dtype: str


@functools.lru_cache(maxsize=2)
def _vocab(path: str, sha256: str):
  """The vocabulary a worker encodes with, checked to be the one the manifest will name."""
  vocab = vocab_lib.load_vocab(path)
  if vocab_lib.vocab_fingerprint(vocab) != sha256:
    raise UsageError(f'{path} changed while the data was being prepared; prepare it again')
  return vocab


def _tokenized(documents: Iterable[list[str]], vocab, counts: dict) -> Iterator[list[list[int]]]:
  """Yields each document as token-id lists, encoding ~_LINES_PER_ENCODE lines per call."""
  chunk, chunk_lines = [], 0

  def flush():
    ids = iter(vocab.encode([line for document in chunk for line in document]))
    for document in chunk:
      tokenized = [next(ids) for _ in document]
      counts['documents'] += 1
      counts['tokens'] += sum(map(len, tokenized))
      yield tokenized

  for document in documents:
    chunk.append(document)
    chunk_lines += len(document)
    if chunk_lines >= _LINES_PER_ENCODE:
      yield from flush()
      chunk, chunk_lines = [], 0
  yield from flush()


def pack_unit(task: _Task) -> dict:
  """Tokenizes and packs one unit into its shard; returns the shard's index, entry and counts."""
  vocab = _vocab(task.vocab_path, task.vocab_sha256)
  # Documents and tokens read, and the flaws read past (formats.py: 'unclosed_docs').
  counts = collections.Counter(documents=0, tokens=0, unclosed_docs=0)
  dtype = store.record_dtype(task.max_seq_length, task.ids_dtype)
  rng = np.random.default_rng([task.seed, task.source_index, task.unit_index])
  documents = _tokenized(sources_lib.read_unit(task.unit, counts), vocab, counts)
  pairs = packing.PACKINGS[task.unit.packing](documents, task.max_seq_length, rng)
  rows = packing.packed_rows(pairs, dtype, vocab.cls_id, vocab.sep_id)
  rows['check'] = store.row_checks(rows, task.shard_index, np.arange(len(rows)))
  entry = store.write_shard(task.shard_path, rows)
  ids = rows['input_ids']
  entry['source'] = task.source_index
  counts['padding'] = int(np.sum(ids == vocab.pad_id))
  counts['specials'] = int(np.sum((ids == vocab.cls_id) | (ids == vocab.sep_id)))
  return {'shard': task.shard_index, 'entry': entry, 'counts': counts}


def _run(tasks: Sequence[_Task], workers: int) -> Iterator[dict]:
  if workers <= 1:
    yield from map(pack_unit, tasks)
    return
  with multiprocessing.get_context('spawn').Pool(workers) as pool:
    yield from pool.imap_unordered(pack_unit, tasks)


def _per_file(tasks: Sequence[_Task], results: Sequence[dict], count: str) -> dict[str, int]:
  """`count` summed over each text, JSON lines and parquet file's units, in corpus order."""
  totals = collections.Counter()
  for task, result in zip(tasks, results):
    if task.unit.kind in ('text', 'jsonl', 'parquet'):
      totals[task.unit.path] += result['counts'][count]
  return totals


def _summary(results: Sequence[dict], max_seq_length: int, files_without_text: int) -> dict:
  total = lambda name: sum(r['counts'][name] for r in results)
  examples = sum(r['entry']['examples'] for r in results)
  slots = examples * max_seq_length
  kept = slots - total('padding') - total('specials')
  return {'documents': total('documents'), 'tokens': total('tokens'), 'examples': examples,
          # Packing 'original' drops what does not fit an example; these show how much.
          'tokens_in_examples': kept,
          'kept_fraction': round(kept / total('tokens'), 6) if total('tokens') else 0.0,
          'padding_fraction': round(total('padding') / slots, 6) if slots else 0.0,
          # Read past, not refused (formats.py, text.py): each is also named in a warning.
          'files_without_text': files_without_text, 'unclosed_docs': total('unclosed_docs')}


def _warn_of_flaws(name: str, tasks: Sequence[_Task], results: Sequence[dict],
                   files_without_text: Sequence[str]) -> None:
  """One warning per kind of flaw read past, naming (up to 5 of) the files."""
  unclosed = {p: n for p, n in _per_file(tasks, results, 'unclosed_docs').items() if n}
  listed = lambda paths: ', '.join(f"'{p}'" for p in list(paths)[:5]) + (
      f' and {len(paths) - 5} more' if len(paths) > 5 else '')
  if files_without_text:
    logging.warning('%s: %d file(s) hold no text and add nothing: %s', name,
                    len(files_without_text), listed(files_without_text))
  if unclosed:
    logging.warning('%s: %d <doc> without </doc>, kept as if closed where the next <doc> or the '
                    'end of the file comes, in %s', name, sum(unclosed.values()),
                    listed(unclosed))


# Below these, packing 'original' is costing much of the text. On books and Wikipedia packing
# 'fill' keeps all but the specials and pads 1.5% of the slots.
_WARN_KEPT_BELOW, _WARN_PADDING_ABOVE = 0.9, 0.05


def _warn_of_packing(name: str, tasks: Sequence[_Task], counts: dict) -> None:
  """A warning when packing 'original' drops or pads much of the split, with the fix."""
  original = [t for t in tasks if t.unit.packing == 'original']
  if not original or (counts['kept_fraction'] >= _WARN_KEPT_BELOW and
                      counts['padding_fraction'] <= _WARN_PADDING_ABOVE):
    return
  logging.warning(
      "%s: packing 'original' kept only %.1f%% of the tokens, and %.1f%% of the slots are "
      "padding (%d of %d units are packed 'original': data.packing 'auto' does so for 'lines' "
      'text, .jsonl and TFDS). It drops the rest of the line that overflows each example and '
      'pads the end of every document, which costs most when documents are short (a blank line '
      'between paragraphs) or lines long (lines are not cut into sentences). '
      "--config.data.packing=fill keeps that text; 'original' makes the original's examples "
      'exactly', name, 100 * counts['kept_fraction'], 100 * counts['padding_fraction'],
      len(original), len(tasks))


def move_into_place(tmp_dir: str, out_dir: str) -> None:
  """Moves a complete split into place, replacing an older one only once the new one exists."""
  old = f'{out_dir}.old{os.getpid()}'
  if os.path.exists(out_dir):
    os.replace(out_dir, old)
  os.replace(tmp_dir, out_dir)
  shutil.rmtree(old, ignore_errors=True)


def prepare_split(sources: Sequence[sources_lib.Source],
                  units: Sequence[Sequence[sources_lib.Unit]], vocab, out_dir: str, *,
                  max_seq_length: int, seed: int, key: dict, workers: int = 0,
                  name: str = 'train') -> dict:
  """Prepares the units of `sources` into the split directory `out_dir`; returns its manifest."""
  if max_seq_length < 5:
    raise UsageError(f'max_seq_length={max_seq_length} leaves no room for text; set '
                     '--config.max_seq_length to at least 5 (e.g. 128)')
  flat = [(s, u, unit) for s, source_units in enumerate(units)
          for u, unit in enumerate(source_units)]
  ids_dtype = store.ids_dtype_for(vocab.size)
  vocab_sha256 = vocab_lib.vocab_fingerprint(vocab)
  with _staging(out_dir) as tmp_dir:
    tasks = [_Task(unit, s, u, os.path.join(tmp_dir, store.shard_name(i, len(flat))), i,
                   vocab.model_path, vocab_sha256, max_seq_length, seed, ids_dtype)
             for i, (s, u, unit) in enumerate(flat)]
    workers = min(workers or os.cpu_count() or 1, len(tasks))
    start = time.perf_counter()
    results = [None] * len(tasks)
    with tqdm.tqdm(total=len(tasks), desc=f'preparing {name}', unit='unit', file=sys.stderr,
                   disable=None, dynamic_ncols=True) as bar:
      for result in _run(tasks, workers):
        results[result['shard']] = result
        bar.update()
        tokens = sum(r['counts']['tokens'] for r in results if r)
        bar.set_postfix(tokens=f'{tokens:,}', refresh=False)
    empty_files = [p for p, n in _per_file(tasks, results, 'documents').items() if not n]
    counts = _summary(results, max_seq_length, len(empty_files))
    if counts['examples'] == 0:
      raise UsageError(f'corpus {sources_lib.describe(sources)} holds no text (only blank lines '
                       f'or empty records); check the {sources[0].setting} setting')
    seconds = time.perf_counter() - start
    counts['seconds'] = round(seconds, 3)
    source_examples = np.bincount([r['entry']['source'] for r in results],
                                  [r['entry']['examples'] for r in results], len(sources))
    manifest = {
        'format': store.FORMAT, 'key': key, 'vocab_sha256': vocab_sha256,
        'vocab_size': vocab.size, 'max_seq_length': max_seq_length, 'seed': seed,
        'ids_dtype': ids_dtype, 'counts': counts,
        # The segment ids are document ids (packing 'documents', data.document_attention).
        'documents': all(task.unit.packing == 'documents' for task in tasks),
        'sources': [{'spec': s.spec, 'weight': s.weight, 'examples': int(n)}
                    for s, n in zip(sources, source_examples)],
        'shards': [r['entry'] for r in results]}
    store.write_manifest(tmp_dir, manifest)
    move_into_place(tmp_dir, out_dir)
  _warn_of_flaws(name, tasks, results, empty_files)
  _warn_of_packing(name, tasks, counts)
  logging.info('%s: %d documents, %d tokens -> %d examples of %d tokens (%d tokens kept: %.1f%%; '
               '%.1f%% padding) in %d shards, %.1fs (%.0f tokens/s) from %s', name,
               counts['documents'], counts['tokens'], counts['examples'], max_seq_length,
               counts['tokens_in_examples'], 100 * counts['kept_fraction'],
               100 * counts['padding_fraction'], len(tasks), seconds,
               counts['tokens'] / max(seconds, 1e-9), sources_lib.describe(sources))
  return manifest


def check_files(sources: Sequence[sources_lib.Source]) -> None:
  """Refuses a path or glob that names no file before any work starts (a bad eval_files was
  found only once the vocabulary and the training split were made)."""
  for source in sources:
    if not (source.tfds_name or source.hf_name):
      text.resolve_files(source.spec, setting=source.setting)


def resolve(sources: Sequence[sources_lib.Source], *, tfds_data_dir: str = '',
            text_field: str = 'text',
            unit_bytes: int = sources_lib.UNIT_BYTES) -> list[list[sources_lib.Unit]]:
  return [sources_lib.source_units(s, tfds_data_dir=tfds_data_dir, text_field=text_field,
                                   unit_bytes=unit_bytes) for s in sources]


def train_vocab(sources: Sequence[sources_lib.Source], vocab_size: int, out_prefix: str, *,
                tfds_data_dir: str = '', text_field: str = 'text', max_sentences: int = 1_000_000,
                seed: int = 0, lowercase: bool = False,
                vocab_type: str = 'sentencepiece') -> vocab_lib.AnyVocab:
  """A vocabulary of `vocab_type` (vocab_lib.trained_files) trained on a bounded random sample
  of the sources' lines."""
  vocab_lib.check_sample_size(max_sentences)
  units = resolve(sources, tfds_data_dir=tfds_data_dir, text_field=text_field)
  sample = sources_lib.sample_lines([u for source_units in units for u in source_units],
                                    max_sentences, seed)
  return vocab_lib.train_vocab_on_sentences(sample, vocab_size, out_prefix,
                                            sources_lib.describe(sources), lowercase=lowercase,
                                            vocab_type=vocab_type)


def preparation_key(sources, units, vocab, max_seq_length: int, seed: int,
                    text_field: str) -> dict:
  """Everything the prepared examples depend on: equal keys mean equal examples."""
  return {'format': store.FORMAT, 'vocab_sha256': vocab_lib.vocab_fingerprint(vocab),
          'max_seq_length': max_seq_length, 'seed': seed, 'text_field': text_field,
          'units': [len(u) for u in units],
          'sources': [sources_lib.identity(s, u) for s, u in zip(sources, units)]}


def _without_mtimes(key: dict) -> dict:
  """The key minus file modification times, which differ between hosts' copies of a corpus."""
  return json.loads(json.dumps(key), object_hook=lambda d: {k: v for k, v in d.items()
                                                            if k != 'mtime_ns'})


def ensure_prepared(sources: Sequence[sources_lib.Source], vocab, out_dir: str, *,
                    max_seq_length: int, seed: int, tfds_data_dir: str = '',
                    text_field: str = 'text', workers: int = 0,
                    unit_bytes: int = sources_lib.UNIT_BYTES, check_mtimes: bool = True,
                    name: str = 'train') -> store.ExampleStore:
  """main's cached split in `out_dir`, (re)made when absent, damaged or made from other inputs.

  `check_mtimes=False` accepts files of the same paths and sizes but other modification times:
  what another host (process 0) prepared from its own copy of the corpus.
  """
  units = resolve(sources, tfds_data_dir=tfds_data_dir, text_field=text_field,
                  unit_bytes=unit_bytes)
  key = preparation_key(sources, units, vocab, max_seq_length, seed, text_field)
  remedy = f'delete {out_dir} and run again to prepare it anew'
  if os.path.exists(os.path.join(out_dir, store.MANIFEST)):
    try:
      existing = store.read_manifest(out_dir)['key']
      if existing == key or not check_mtimes and _without_mtimes(existing) == _without_mtimes(key):
        examples = store.open_store(out_dir, remedy=remedy)
        logging.info('%s: %d prepared examples in %s', name, len(examples), out_dir)
        return examples
      logging.info('%s: the sources or settings changed since %s was prepared; preparing again',
                   name, out_dir)
    except (UsageError, KeyError) as e:
      logging.warning('%s: %s is unusable (%s); preparing it again', name, out_dir, e)
  prepare_split(sources, units, vocab, out_dir, max_seq_length=max_seq_length, seed=seed,
                key=key, workers=workers, name=name)
  return store.open_store(out_dir, remedy=remedy)


def _dataset_vocab(config, out: str, stage: str, train_sources, overwrite: bool):
  """`out`'s vocabulary, or a new one in `stage`: data.vocab_model's, or one trained."""
  given = vocab_lib.vocab_file(config.data.vocab_model)
  existing = [p for p in (os.path.join(out, n) for n in vocab_lib.VOCAB_NAMES)
              if os.path.exists(p)]
  if given:
    vocab = vocab_lib.load_vocab(given)
    name = vocab_lib.vocab_name(given)
    if existing and existing[0] == os.path.join(out, name):
      kept = vocab_lib.load_vocab(existing[0])
      if vocab_lib.vocab_fingerprint(kept) == vocab_lib.vocab_fingerprint(vocab):
        return kept
    if existing and not overwrite:
      raise UsageError(f"{existing[0]} differs from data.vocab_model '{given}'; pass --overwrite "
                       'to prepare everything in --out again with it, or choose another --out')
    shutil.copyfile(given, os.path.join(stage, name))
    return vocab_lib.load_vocab(os.path.join(stage, name))
  if existing and not overwrite:
    vocab = vocab_lib.load_vocab(existing[0])
    vocab_lib.check_casing(vocab, config.data.vocab_lowercase)
    vocab_lib.check_type(vocab, config.data.vocab_type)
    return vocab
  return train_vocab(
      train_sources, config.model.vocab_size, os.path.join(stage, 'vocab'),
      tfds_data_dir=config.data.tfds_data_dir, text_field=config.data.text_field,
      max_sentences=config.data.vocab_sample_sentences, seed=config.seed,
      lowercase=config.data.vocab_lowercase, vocab_type=config.data.vocab_type)


def _move_stage_into(stage: str, out: str) -> None:
  """Moves what was made in `stage` into `out`; a new vocabulary replaces both kinds."""
  made = sorted(os.listdir(stage))
  if any(name in VOCAB_FILES for name in made):
    for name in VOCAB_FILES:
      if os.path.exists(os.path.join(out, name)):
        os.remove(os.path.join(out, name))
  for name in made:
    if os.path.isdir(os.path.join(stage, name)):
      move_into_place(os.path.join(stage, name), os.path.join(out, name))
    else:
      os.replace(os.path.join(stage, name), os.path.join(out, name))


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)  # signal 0 sends nothing: it only asks whether the process exists
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process
    pass
  return True


@contextlib.contextmanager
def _staging(out: str) -> Iterator[str]:
  """A new folder beside `out` to make things in, removed at the end (moved in or not). First
  removes the folders of preparations that ended unfinished (killed: their process is gone);
  a folder of a live process is its own to finish or remove."""
  prefix = f'{os.path.normpath(out)}.incomplete'
  dead = [path for path in sorted(glob.glob(glob.escape(prefix) + '*'))
          if path[len(prefix):].isdigit() and not _alive(int(path[len(prefix):]))]
  for path in dead:
    shutil.rmtree(path, ignore_errors=True)
  if dead:
    logging.info('removed %d staging folder(s) of preparations that ended unfinished (killed): '
                 '%s', len(dead), ', '.join(dead))
  stage = f'{prefix}{os.getpid()}'
  shutil.rmtree(stage, ignore_errors=True)
  os.makedirs(stage)
  try:
    yield stage
  finally:
    shutil.rmtree(stage, ignore_errors=True)


def prepare_dataset(config, out: str, *, overwrite: bool = False) -> dict[str, dict]:
  """The vocabulary and splits the config names, prepared into `out` (the prepare command)."""
  if config.data.prepared_dir:
    raise UsageError('data.prepared_dir names data that is already prepared; name the corpus to '
                     'prepare with data.sources or data.train_files')
  store.check_local(out, '--out')
  specs = {split: sources_lib.from_config(config.data, split) for split in SPLITS}
  if specs['train'] is None:
    raise UsageError('no training data to prepare: pass --config.data.sources=... or '
                     '--config.data.train_files=PATH_OR_GLOB')
  for split_specs in specs.values():
    check_files(split_specs or ())
  # Held throughout: two preparations into one `out` would each move their own vocabulary and
  # splits in at the end, and finishing interleaved could pair one's vocabulary with the
  # other's examples.
  with run_lock.only_run_in(out, 'preparation', create=True), _staging(out) as stage:
    manifests = _prepare_into(config, out, stage, specs, overwrite)
    _move_stage_into(stage, out)
  return manifests


def _prepare_into(config, out: str, stage: str, specs, overwrite: bool) -> dict[str, dict]:
  """Makes in `stage` what `out` lacks or holds from other inputs; returns every manifest."""
  vocab = _dataset_vocab(config, out, stage, specs['train'], overwrite)
  manifests = {}
  for split, split_specs in specs.items():
    if split_specs is None:
      continue
    units = resolve(split_specs, tfds_data_dir=config.data.tfds_data_dir,
                    text_field=config.data.text_field)
    key = preparation_key(split_specs, units, vocab, config.max_seq_length, config.seed,
                          config.data.text_field)
    split_dir = os.path.join(out, split)
    if os.path.exists(os.path.join(split_dir, store.MANIFEST)):
      manifest = store.read_manifest(split_dir)
      if manifest['key'] == key:
        manifests[split] = manifest
        continue
      if not overwrite:
        raise UsageError(f'{split_dir} holds data prepared from other inputs (sources, '
                         'vocabulary, max_seq_length or seed); pass --overwrite to replace it, '
                         'or choose another --out')
    manifests[split] = prepare_split(
        split_specs, units, vocab, os.path.join(stage, split),
        max_seq_length=config.max_seq_length, seed=config.seed, key=key,
        workers=config.data.prepare_workers, name=split)
  return manifests
