"""Data throughput: `prepare` on each corpus format, and the reader against what training eats.

python benchmarks/data_pipeline.py [--measure=formats --measure=reader] [--megabytes=8]
    [--text=GLOB] [--corpus=GLOB] [--copies=4] [--seconds=3]

Prints JSON lines. --measure=formats (needs the `corpora` extra) writes the same documents of
--text (Wikipedia from ../shared/data/pretraining-text, read as its format) in a temporary
directory as plain text, .jsonl.gz, .parquet, .jsonl.zst and a `datasets` save_to_disk directory,
--files files (or shards) each and a unit of work per file, so that workers have units to share.
It prepares each in a fresh process with 1 and 2 workers: tokens/s (the manifest's count over its
time), the peak resident memory of the preparing process, and each worker's peak and CPU time
(two entries, each with the seconds of work, show that two processes shared it). Then each kind
at 4x the text in 4x the files (units of the same size: the peaks should not grow), and
sentencepiece against `tokenizers`' byte-level BPE and WordPiece of the same size: encoding the
same lines, and preparing the text with each.

--measure=reader pins the process to one core and copies --corpus (WikiText-2) `copies` times:
the preparation rate, the reader rate (tokens/s of shuffled batches gathered from a prepared
split, as the trainer asks for them; its shards in the page cache, as on a host that has read
them once), and the rate at which the `small` config consumes tokens on one TPU v4 chip: the
chip's bfloat16 peak x an assumed MFU / the model FLOPs per token of a training step
(electra_jax.training.flops, generator + discriminator, forward + backward).
"""

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags
import numpy as np

from electra_jax.common import config as config_lib
from electra_jax.training import flops as flops_lib, inputs
from electra_jax.data import formats, preparation, sources as sources_lib, store, text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MEASURE = flags.DEFINE_multi_enum('measure', ['formats', 'reader'], ['formats', 'reader'],
                                   'What to measure (repeat the flag for both).')
_TEXT = flags.DEFINE_string('text', os.path.join(REPO, '..', 'shared', 'data', 'pretraining-text',
                                                 'enwiki', '*.txt'),
                            'formats: text files (a glob) whose documents each kind holds.')
_MEGABYTES = flags.DEFINE_float('megabytes', 8.0, 'formats: text in the smaller corpus.')
_FILES = flags.DEFINE_integer('files', 4, 'formats: files (or shards) of each kind.')
_CORPUS = flags.DEFINE_string('corpus', '../shared/data/wikitext-2-raw/wiki.*.raw',
                              'reader: text files to prepare (a glob).')
_COPIES = flags.DEFINE_integer('copies', 4, 'reader: times the corpus is repeated.')
_SECONDS = flags.DEFINE_float('seconds', 3.0, 'reader: seconds of batch reading to time.')
_SHARDS = flags.DEFINE_integer('shards', 16, 'reader: about how many shards to cut the corpus '
                               'into.')
_VOCAB_SIZE = flags.DEFINE_integer('vocab_size', 8000, 'Vocabulary size (every tokenizer).')
_ARRAY_RECORD = flags.DEFINE_bool('array_record', True,
                                  'reader: also time the same batches read from ArrayRecord files.')

ASSUMED_MFU = 0.5  # Generous for a 14M-parameter model: it overstates what training eats.
MAX_SEQ_LENGTH = 128  # The paper sizes' examples.
_LINES_PER_ENCODE = 4096  # As preparation encodes.

# ----------------------------------------------------------------------------- formats


def documents(pattern: str, megabytes: float) -> list[str]:
  """Documents of the files, each as its lines joined, up to `megabytes` of text."""
  docs, size = [], 0
  for path in text.resolve_files(pattern, setting='--text'):
    for document in formats.read_documents(path, formats.file_format(path, 'auto')):
      docs.append('\n'.join(document))
      size += len(docs[-1].encode())
      if size >= megabytes * 2**20:
        return docs
  return docs


def write_kinds(docs: list[str], directory: str, files: int) -> dict[str, str]:
  """The same documents as each source kind, in `files` files (or shards) each; returns kind ->
  data.sources spec."""
  import datasets  # pylint: disable=g-import-not-at-top
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  import zstandard  # pylint: disable=g-import-not-at-top
  datasets.disable_progress_bars()
  specs = {}
  for kind in ('text', 'jsonl.gz', 'parquet', 'jsonl.zst'):
    os.makedirs(os.path.join(directory, kind))
    suffix = 'txt' if kind == 'text' else kind
    specs[kind] = os.path.join(directory, kind, f'*.{suffix}')
    for k in range(files):
      part, path = docs[k::files], os.path.join(directory, kind, f'part{k}.{suffix}')
      lines = ''.join(json.dumps({'text': doc}) + '\n' for doc in part).encode()
      if kind == 'text':
        with open(path, 'w', encoding='utf-8') as f:
          f.write('\n\n'.join(part) + '\n')
      elif kind == 'jsonl.gz':
        with gzip.open(path, 'wb') as f:
          f.write(lines)
      elif kind == 'jsonl.zst':
        with open(path, 'wb') as f:
          f.write(zstandard.ZstdCompressor().compress(lines))
      else:
        pq.write_table(pa.table({'text': part}), path, row_group_size=1000)
  saved = os.path.join(directory, 'saved')
  datasets.Dataset.from_dict({'text': docs}).save_to_disk(saved, num_shards=files)
  return {**specs, 'save_to_disk': f'hf:{saved}'}


# One preparation in a fresh process, run with `-c` so that spawned workers import only what a
# task needs (not this file and JAX). Peaks are VmHWM, a process's own high-water mark since its
# exec: ru_maxrss (and RUSAGE_CHILDREN) also counts the RSS of the process it was forked from.
_MEASURED_PREPARE = """
import json, multiprocessing, multiprocessing.pool, os, sys
from electra_jax.data import preparation, sources, vocab

def usage(pid):
  with open(f'/proc/{pid}/status') as f:
    peak_kb = next(int(line.split()[1]) for line in f if line.startswith('VmHWM:'))
  with open(f'/proc/{pid}/stat') as f:
    ticks = f.read().rsplit(')', 1)[1].split()[11:13]  # utime, stime
  return round(peak_kb / 1024, 1), round(sum(map(int, ticks)) / os.sysconf('SC_CLK_TCK'), 2)

workers, terminate = [], multiprocessing.pool.Pool.terminate
def measured_terminate(pool):  # Every task is done, so each worker's peak is final: read it.
  workers.extend(usage(child.pid) for child in multiprocessing.active_children())
  terminate(pool)
multiprocessing.pool.Pool.terminate = measured_terminate

spec, vocab_path, out, count, unit_bytes, length = json.loads(sys.argv[1])
source = sources.parse_sources(spec)
units = preparation.resolve(source, unit_bytes=unit_bytes)
manifest = preparation.prepare_split(source, units, vocab.load_vocab(vocab_path), out,
                                     max_seq_length=length, seed=0, key={}, workers=count)
parent_mb, _ = usage('self')
print(json.dumps({'units': len(units[0]), 'tokens': manifest['counts']['tokens'],
                  'seconds': manifest['counts']['seconds'], 'parent_peak_mb': parent_mb,
                  'worker_peak_mb': [w[0] for w in workers],
                  'worker_cpu_s': [w[1] for w in workers]}))
"""


def measured_prepare(spec: str, vocab_path: str, out: str, workers: int, unit_bytes: int) -> dict:
  """`prepare`'s tokens/s on one source, and its processes' peak memory and CPU time."""
  arguments = json.dumps([spec, vocab_path, out, workers, unit_bytes, MAX_SEQ_LENGTH])
  result = subprocess.run([sys.executable, '-c', _MEASURED_PREPARE, arguments], cwd=REPO,
                          check=True, capture_output=True, text=True)
  record = json.loads(result.stdout.strip().splitlines()[-1])
  if workers > 1 and len(record['worker_cpu_s']) != min(workers, record['units']):
    raise RuntimeError(f'{workers} workers asked for, {len(record["worker_cpu_s"])} measured: '
                       'did preparation stop using a multiprocessing pool?')
  return {**record, 'tokens_per_s': round(record['tokens'] / record['seconds'])}


def encode_rate(vocab, lines: list[str]) -> dict:
  """Tokens per second and per CPU-second (both libraries encode a batch on every core)."""
  tokens, wall, cpu = 0, time.perf_counter(), time.process_time()
  for first in range(0, len(lines), _LINES_PER_ENCODE):
    tokens += sum(map(len, vocab.encode(lines[first:first + _LINES_PER_ENCODE])))
  wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  megabytes = sum(len(line.encode()) for line in lines) / 2**20
  return {'tokens': tokens, 'encode_tokens_per_s': round(tokens / wall),
          'encode_tokens_per_cpu_s': round(tokens / cpu),
          'encode_mb_per_s': round(megabytes / wall, 2)}


def measure_formats() -> None:
  emit = lambda record: print(json.dumps(record), flush=True)
  files, megabytes = _FILES.value, _MEGABYTES.value
  with tempfile.TemporaryDirectory() as directory:
    docs = documents(_TEXT.value, megabytes)
    kinds = write_kinds(docs, os.path.join(directory, 'small'), files)
    # A file a unit (a save_to_disk dataset: `files` row ranges), the same size at 4x.
    unit_bytes = int(1.2 * sum(len(doc.encode()) for doc in docs) / files)
    text_source = sources_lib.parse_sources(kinds['text'])
    vocabs = {kind: preparation.train_vocab(
        text_source, _VOCAB_SIZE.value, os.path.join(directory, kind, 'vocab'),
        max_sentences=200_000, vocab_type=kind) for kind in ('sentencepiece', 'bpe', 'wordpiece')}
    spm_path = vocabs['sentencepiece'].model_path
    for kind, spec in kinds.items():
      for workers in (1, 2):
        record = measured_prepare(spec, spm_path, os.path.join(directory, f'{kind}-{workers}'),
                                  workers, unit_bytes)
        emit({'measure': 'prepare', 'kind': kind, 'workers': workers, 'megabytes': megabytes,
              'files': files, **record})
    large = write_kinds(docs * 4, os.path.join(directory, 'large'), 4 * files)
    for kind, spec in large.items():
      record = measured_prepare(spec, spm_path, os.path.join(directory, f'{kind}-4x'), 1,
                                unit_bytes)
      emit({'measure': 'prepare', 'kind': kind, 'workers': 1, 'megabytes': 4 * megabytes,
            'files': 4 * files, **record})
    lines = [line for doc in docs for line in doc.split('\n')]
    for kind, vocab in vocabs.items():
      prepared = measured_prepare(kinds['text'], vocab.model_path,
                                  os.path.join(directory, f'text-{kind}'), 1, unit_bytes)
      emit({'measure': 'tokenize', 'vocab': kind, 'vocab_size': vocab.size,
            **encode_rate(vocab, lines), 'prepare_tokens_per_s': prepared['tokens_per_s']})


# ----------------------------------------------------------------------------- reader


def _corpus(directory: str) -> str:
  files = text.resolve_files(_CORPUS.value, setting='--corpus')
  path = os.path.join(directory, 'corpus.txt')
  with open(path, 'wb') as out:
    for _ in range(_COPIES.value):
      for name in files:
        with open(name, 'rb') as f:
          out.write(f.read().rstrip(b'\n') + b'\n\n')
  return path


def _time_reader(examples, batch_size: int, seconds: float) -> tuple[float, int]:
  steps, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    inputs.local_batch(examples, batch_size, 0, steps)
    steps += 1
  return steps * batch_size * examples.max_seq_length / (time.perf_counter() - start), steps


def _array_record_rate(examples, batch_size: int, seconds: float, directory: str) -> float:
  """The same shuffled batches read from ArrayRecord copies of the shards (one record a row)."""
  from array_record.python import array_record_module as ar  # pylint: disable=g-import-not-at-top
  readers, ends = [], []
  for entry in examples.manifest['shards']:
    rows = np.load(os.path.join(examples.directory, entry['file']))
    path = os.path.join(directory, entry['file'] + '.array_record')
    writer = ar.ArrayRecordWriter(path, 'group_size:1,uncompressed')
    for row in rows:
      writer.write(row.tobytes())
    writer.close()
    readers.append(ar.ArrayRecordReader(path, 'readahead_buffer_size:0,max_parallelism:0'))
    ends.append(len(rows) + (ends[-1] if ends else 0))
  ends = np.array(ends)
  starts = np.r_[0, ends[:-1]]
  steps, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    ids = inputs.batch_indices(len(examples), batch_size, 0, steps)
    shard = np.searchsorted(ends, ids, side='right')
    local = ids - starts[shard]
    for s in np.unique(shard):
      readers[s].read(local[shard == s].tolist())
    steps += 1
  return steps * batch_size * examples.max_seq_length / (time.perf_counter() - start)


def measure_reader() -> None:
  cores = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {min(cores)})  # Per-core figures.
  try:
    _reader_on_one_core()
  finally:
    os.sched_setaffinity(0, cores)


def _reader_on_one_core() -> None:
  config = config_lib.default_config()  # ELECTRA-Small's sizes (configs/small.py uses them)
  length, batch_size = config.max_seq_length, config.batch_size
  with tempfile.TemporaryDirectory() as directory:
    corpus = _corpus(directory)
    source = sources_lib.Source(spec=corpus, weight=None)
    vocab = preparation.train_vocab([source], _VOCAB_SIZE.value, os.path.join(directory, 'v'),
                                    max_sentences=200_000)
    unit_bytes = max(1 << 16, os.path.getsize(corpus) // _SHARDS.value)
    units = preparation.resolve([source], unit_bytes=unit_bytes)
    out = os.path.join(directory, 'train')
    manifest = preparation.prepare_split([source], units, vocab, out, max_seq_length=length,
                                         seed=0, key={}, workers=1)
    counts = manifest['counts']
    print(json.dumps({'measure': 'prepare', 'cores': 1, 'tokens': counts['tokens'],
                      'examples': counts['examples'], 'shards': len(manifest['shards']),
                      'seconds': counts['seconds'],
                      'tokens_per_s': round(counts['tokens'] / counts['seconds'])}))
    examples = store.open_store(out)
    rate, steps = _time_reader(examples, batch_size, _SECONDS.value)
    print(json.dumps({'measure': 'read', 'cores': 1, 'batch_size': batch_size,
                      'max_seq_length': length, 'batches': steps, 'tokens_per_s': round(rate)}))
    if _ARRAY_RECORD.value:
      ar_rate = _array_record_rate(examples, batch_size, _SECONDS.value, directory)
      print(json.dumps({'measure': 'read_array_record', 'cores': 1,
                        'tokens_per_s': round(ar_rate)}))
  peak = flops_lib.table_peak_flops('TPU v4')
  flops = flops_lib.train_step_flops(config) / (batch_size * length)
  consumed = peak * ASSUMED_MFU / flops
  print(json.dumps({'measure': 'tpu_v4_consumption', 'config': 'small',
                    'train_flops_per_token': round(flops), 'peak_flops': peak,
                    'assumed_mfu': ASSUMED_MFU, 'tokens_per_s': round(consumed),
                    'reader_ratio': round(rate / consumed, 1)}), flush=True)


def main(argv):
  del argv
  for measure in _MEASURE.value:
    {'formats': measure_formats, 'reader': measure_reader}[measure]()


if __name__ == '__main__':
  app.run(main)
