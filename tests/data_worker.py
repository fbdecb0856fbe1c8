"""Child processes for tests/test_multiprocess_data.py.

python data_worker.py batches STORE OUT PORT PROCESS_INDEX
    One of two JAX processes (2 CPU devices each, joined by jax.distributed): builds the global
    batches of the first steps through inputs.train_batches on a 4-device mesh, and
    writes its own example ids and the whole gathered global batch to OUT/process_<i>.npz.

python data_worker.py consume STORE WORKDIR NUM_STEPS SAVE_EVERY
    The trainer's data loop without the model: resumes at the step saved in WORKDIR/step.json,
    reads the batch of every step, appends "step id id ..." to WORKDIR/consumed.log, and saves
    the step every SAVE_EVERY steps, as training/train.py checkpoints its state.
"""

import json
import os
import sys
import time

BATCH, SEED = 16, 3


def batches(store_dir, out, port, index):
  os.environ['JAX_PLATFORMS'] = 'cpu'
  os.environ['JAX_NUM_CPU_DEVICES'] = '2'
  import jax  # pylint: disable=g-import-not-at-top
  jax.distributed.initialize(f'localhost:{port}', num_processes=2, process_id=int(index))
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from electra_jax.common import config as config_lib  # pylint: disable=g-import-not-at-top
  from electra_jax.training import inputs, train  # pylint: disable=g-import-not-at-top
  from electra_jax.data import store  # pylint: disable=g-import-not-at-top

  examples = store.open_store(store_dir)
  config = config_lib.default_config()
  config.batch_size, config.seed = BATCH, SEED
  config.num_train_steps = -(-len(examples) // BATCH) + 2  # A little over one epoch.
  sharding = NamedSharding(train.make_mesh(), PartitionSpec('data'))
  assert jax.device_count() == 4 and jax.local_device_count() == 2
  ids, global_batches = [], {'input_ids': [], 'segment_ids': []}
  for step, batch in enumerate(inputs.train_batches(examples, config, 0, sharding)):
    ids.append(inputs.local_batch_indices(examples, BATCH, SEED, step, jax.process_index(),
                                          jax.process_count()))
    for key, value in batch.items():
      global_batches[key].append(multihost_utils.process_allgather(value, tiled=True))
  np.savez(os.path.join(out, f'process_{jax.process_index()}.npz'), ids=np.stack(ids),
           **{k: np.stack(v) for k, v in global_batches.items()})
  jax.distributed.shutdown()


def consume(store_dir, workdir, num_steps, save_every):
  from electra_jax.data import store  # pylint: disable=g-import-not-at-top
  from electra_jax.training import inputs  # pylint: disable=g-import-not-at-top
  examples = store.open_store(store_dir)
  saved = os.path.join(workdir, 'step.json')
  step = json.load(open(saved))['step'] if os.path.exists(saved) else 0
  with open(os.path.join(workdir, 'consumed.log'), 'a') as log:
    for step in range(step, int(num_steps)):
      ids = inputs.local_batch_indices(examples, BATCH, SEED, step)
      examples.gather(ids)  # Read the examples, as training does.
      log.write(' '.join(map(str, [step, *ids])) + '\n')
      log.flush()
      time.sleep(0.005)  # A "training step", so kills land at varied points.
      if (step + 1) % int(save_every) == 0:
        with open(saved + '.tmp', 'w') as f:
          json.dump({'step': step + 1}, f)
        os.replace(saved + '.tmp', saved)


if __name__ == '__main__':
  {'batches': batches, 'consume': consume}[sys.argv[1]](*sys.argv[2:])
