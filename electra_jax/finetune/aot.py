"""GLUE's fine-tuning step, the shape of most fine-tuning, compiled for a TPU slice on a host
without one (training/aot.py's machinery: the loop's model, optimizer, shardings and donation).
"""

import time

import jax
import jax.numpy as jnp
import ml_collections

from electra_jax.finetune import init as finetune_init, optim
from electra_jax.finetune.glue import run as glue_run, tasks
from electra_jax.training import aot, flops, train


def lower_finetune_step(config: ml_collections.ConfigDict, devices, num_examples: int,
                        num_outputs: int = 2):
  """(lowered step, abstract state, data: `num_examples` rows and the batch order, as the loop
  places them) of a GLUE classifier on `devices`, from a resolved `config`."""
  model = glue_run.classifier_of(config, config.model, num_outputs)
  shapes = finetune_init.param_shapes(model, config.max_seq_length)
  total_steps = max(1, int(num_examples * config.num_epochs / config.batch_size))
  optimizer = optim.make_optimizer(config, shapes, config.model.num_layers, total_steps)
  compiled = glue_run.compile_steps(model, optimizer, num_outputs == 1, train.make_mesh(devices))
  init = lambda: train.TrainState(step=jnp.zeros([], jnp.int32), params=shapes,
                                  opt_state=optimizer.init(shapes), rng=jax.random.PRNGKey(0))
  placed = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=compiled.replicated)
  state = jax.tree.map(lambda x: placed(x.shape, x.dtype), jax.eval_shape(init))
  rows = (num_examples, config.max_seq_length)
  inputs = {'input_ids': placed(rows, jnp.int32), 'segment_ids': placed(rows, jnp.int32),
            'labels': placed((num_examples,), jnp.float32 if num_outputs == 1 else jnp.int32)}
  order = jax.ShapeDtypeStruct((total_steps, config.batch_size), jnp.int64
                               if jax.config.jax_enable_x64 else jnp.int32,
                               sharding=compiled.order_sharding)
  return compiled.step.lower(state, inputs, order, None), state, {'inputs': inputs, 'order': order}


def finetune_flops(config: ml_collections.ConfigDict) -> float:
  """Model FLOPs of one step: the discriminator over B x L tokens, x3 (the head is negligible)."""
  as_pretraining = ml_collections.ConfigDict({
      'model': config.model.to_dict(), 'batch_size': config.batch_size,
      'max_seq_length': config.max_seq_length, 'mask_prob': 0.15, 'objective': 'mlm'})
  parts = flops.forward_flops(as_pretraining)
  return 3 * (parts['discriminator'] + parts['discriminator_attention'])


def compile_finetuning(model: ml_collections.ConfigDict, finetune_config: ml_collections.ConfigDict,
                       topology: str, num_examples: int = 67349) -> dict:
  """The GLUE recipe's step on pretrained `model`, compiled for the TPU slice `topology`: one
  JSON-ready record."""
  sliced = aot.slice_devices(topology)
  task = tasks.get_task(finetune_config.task or 'SST-2')  # SST-2: the shape of most GLUE tasks
  config = glue_run.resolve(finetune_config, task, model, len(sliced.devices))
  record = {'step': 'finetune', **aot.slice_record(sliced), 'jax': jax.__version__,
            'dtype': config.dtype, 'batch_size': config.batch_size,
            'per_chip_batch': config.batch_size / len(sliced.devices),
            'max_seq_length': config.max_seq_length, 'train_examples': num_examples}
  start = time.perf_counter()
  lowered, state, data = lower_finetune_step(config, sliced.devices, num_examples,
                                             task.num_outputs)
  compiled = aot.compile_outside_the_cache(lowered)
  record.update(aot.analyse(compiled, time.perf_counter() - start, state, data,
                            finetune_flops(config), sliced))
  return record
