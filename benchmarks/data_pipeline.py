"""Data throughput on one CPU core: preparation and reader tokens/s against what training eats.

python benchmarks/data_pipeline.py [--corpus=GLOB] [--copies=4] [--seconds=3]

Prints JSON lines: the preparation rate (corpus tokens tokenized and packed per second, one
worker), the reader rate (tokens per second of shuffled batches gathered from a prepared split,
as the trainer asks for them), and the rate at which the `small` config consumes tokens on one
TPU v4 chip: the chip's bfloat16 peak x an assumed MFU / the model FLOPs per token of a
training step (electra_jax.training.flops, generator + discriminator, forward + backward).

The process pins itself to one core first, so the figures are per core; the corpus is copied
`copies` times to make the timing long enough to be stable. The reader's shards sit in the page
cache, as a prepared split does on a host that has read it once.
"""

import json
import os
import tempfile
import time

from absl import app, flags
import numpy as np

from electra_jax.common import config as config_lib
from electra_jax.training import flops as flops_lib, inputs
from electra_jax.data import preparation, sources as sources_lib, store, text

_CORPUS = flags.DEFINE_string('corpus', '../shared/data/wikitext-2-raw/wiki.*.raw',
                              'Text files to prepare (a glob).')
_COPIES = flags.DEFINE_integer('copies', 4, 'Times the corpus is repeated.')
_SECONDS = flags.DEFINE_float('seconds', 3.0, 'Seconds of batch reading to time.')
_SHARDS = flags.DEFINE_integer('shards', 16, 'About how many shards to cut the corpus into.')
_VOCAB_SIZE = flags.DEFINE_integer('vocab_size', 8000, 'Sentencepiece vocabulary size.')
_ARRAY_RECORD = flags.DEFINE_bool('array_record', True,
                                  'Also time the same batches read from ArrayRecord files.')

ASSUMED_MFU = 0.5  # Generous for a 14M-parameter model: it overstates what training eats.


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


def main(argv):
  del argv
  core = min(os.sched_getaffinity(0))
  os.sched_setaffinity(0, {core})
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
                    'reader_ratio': round(rate / consumed, 1)}))


if __name__ == '__main__':
  app.run(main)
