"""What the trainer needs from data/: the run's examples, and batches on the mesh.

The example ids of step s are a pure function of (seed, s) (data/pipeline.py), so the step saved
in the checkpoint is the whole iterator state; each process gathers its own rows and the global
batch is assembled on the mesh with jax.make_array_from_process_local_data.
"""

from collections.abc import Iterator
import os
import queue
import threading

import jax
import ml_collections
import numpy as np

from electra_jax.data import pipeline, preparation, run_vocab, sources as sources_lib, store
from electra_jax.data import vocab as vocab_lib


def load_examples(config: ml_collections.ConfigDict, workdir: str, vocab: vocab_lib.Vocab,
                  split: str) -> store.ExampleStore | None:
  """The examples of `split` ('train' or 'eval'), or None when the config names none.

  Sources named in the config are prepared once into <local_dir>/<split> (data.local_dir, by
  default <workdir>/data; again when they, the vocabulary, max_seq_length or seed change);
  otherwise the split comes from data.prepared_dir (`python -m electra_jax.prepare`), whose
  vocabulary sha256 and max_seq_length must match the run's. With several processes, train.py
  lets process 0 prepare first; the others take its split though their files' mtimes differ.
  """
  specs = sources_lib.from_config(config.data, split)
  if specs is None:
    prepared = config.data.prepared_dir
    if not prepared or (split != 'train' and not os.path.isdir(os.path.join(prepared, split))):
      return None
    return store.open_store(os.path.join(prepared, split), vocab_sha256=vocab.fingerprint(),
                            max_seq_length=config.max_seq_length)
  return preparation.ensure_prepared(
      specs, vocab, os.path.join(run_vocab.local_dir(config, workdir), split),
      max_seq_length=config.max_seq_length, seed=config.seed,
      tfds_data_dir=config.data.tfds_data_dir, text_field=config.data.text_field,
      workers=config.data.prepare_workers, check_mtimes=jax.process_index() == 0, name=split)


def to_global_array(local_batch: dict[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  """Assembles each process's rows into one global batch sharded over the mesh's data axis."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


def _global_batch(examples, config: ml_collections.ConfigDict, step: int, sharding):
  return to_global_array(pipeline.local_batch(examples, config.batch_size, config.seed, step,
                                              jax.process_index(), jax.process_count()), sharding)


def train_batches(examples, config: ml_collections.ConfigDict, first_step: int,
                  sharding) -> Iterator[dict[str, jax.Array]]:
  """The global batches of steps first_step, first_step + 1, ... < num_train_steps, in order.

  A background thread gathers and transfers up to data.prefetch_batches batches ahead, so the
  step never waits for input; closing the iterator (or its collection) stops the thread.
  """
  steps = range(first_step, config.num_train_steps)
  if (depth := config.data.prefetch_batches) <= 0:
    yield from (_global_batch(examples, config, step, sharding) for step in steps)
    return
  ready, stop = queue.Queue(maxsize=depth), threading.Event()

  def put(item) -> bool:
    while not stop.is_set():
      try:
        ready.put(item, timeout=0.1)
        return True
      except queue.Full:
        pass
    return False

  def produce():
    try:
      for step in steps:
        if not put(_global_batch(examples, config, step, sharding)):
          return
    except BaseException as e:  # pylint: disable=broad-except  (re-raised in the consumer)
      put(e)

  thread = threading.Thread(target=produce, name='electra_jax-prefetch', daemon=True)
  thread.start()
  try:
    for _ in steps:
      item = ready.get()
      if isinstance(item, BaseException):
        raise item
      yield item
  finally:
    stop.set()
    thread.join()
