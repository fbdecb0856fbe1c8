"""ELECTRA pretraining, one linear story: mesh -> data -> state -> step -> log/eval -> checkpoint.

Data parallelism is expressed with shardings, not with pmap: the batch is sharded over the mesh's
`data` axis, parameters and optimizer state are replicated, and XLA inserts the gradient
all-reduce. The same code runs on one CPU, N simulated CPU devices, a GPU or a TPU slice.
"""

import functools
import os
import time
from typing import Any

from absl import logging
import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from electra_jax import checkpoint, config as config_lib, input_pipeline, objective, optim, report
from electra_jax.data import pipeline
from electra_jax.model import Electra, count_params, init_params

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


class TrainState(flax.struct.PyTreeNode):
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array  # the run's base key; step s uses fold_in(rng, s)


def make_mesh(devices=None) -> Mesh:
  """A 1-D mesh over all devices (or `devices`) with a `data` axis.

  Auto axes: XLA propagates shardings from the inputs, so the model and the objective carry no
  sharding annotations and need none (newer JAX defaults make_mesh to explicit axes).
  """
  devices = jax.devices() if devices is None else devices
  return jax.make_mesh((len(devices),), ('data',), axis_types=(jax.sharding.AxisType.Auto,),
                       devices=devices)


def make_model(config: ml_collections.ConfigDict) -> Electra:
  return Electra(config.model, dtype=DTYPES[config.dtype])


def create_train_state(config, model, optimizer, replicated) -> TrainState:
  """Initial state, created directly as replicated arrays on the mesh."""
  def init():
    init_rng, train_rng = jax.random.split(jax.random.PRNGKey(config.seed))
    params = init_params(model, init_rng, config.max_seq_length)
    return TrainState(step=jnp.zeros([], jnp.int32), params=params,
                      opt_state=optimizer.init(params), rng=train_rng)
  return jax.jit(init, out_shardings=replicated)()


def train_step(state: TrainState, batch, rng, *, model, optimizer, config, special):
  """One joint update of generator and discriminator; returns the new state and step stats."""
  loss_fn = functools.partial(objective.electra_loss, model.apply, batch=batch, rng=rng,
                              config=config, special=special)
  (_, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  return state.replace(step=state.step + 1, params=params, opt_state=opt_state), stats


def eval_step(params, batch, rng, *, model, config, special):
  _, stats = objective.electra_loss(model.apply, params, batch, rng, config, train=False,
                                    special=special)
  return stats


def compile_steps(config, model, optimizer, mesh, special=objective.SpecialIds()):
  """The jitted train/eval steps and the shardings they expect."""
  replicated = NamedSharding(mesh, P())
  batch_sharding = NamedSharding(mesh, P('data'))
  train = jax.jit(
      functools.partial(train_step, model=model, optimizer=optimizer, config=config,
                        special=special),
      in_shardings=(replicated, batch_sharding, replicated),
      out_shardings=(replicated, replicated), donate_argnums=0)
  evaluate = jax.jit(functools.partial(eval_step, model=model, config=config, special=special),
                     in_shardings=(replicated, batch_sharding, replicated),
                     out_shardings=replicated)
  return train, evaluate, replicated, batch_sharding


@functools.partial(jax.jit, donate_argnums=0)
def _accumulate(total, stats):
  return jax.tree.map(jnp.add, total, stats)


def add_stats(total, stats):
  """Sums step statistics on the device; nothing leaves it until the next log."""
  return stats if total is None else _accumulate(total, stats)


def run_eval(evaluate, params, examples, config, batch_sharding, base_rng) -> dict:
  total = None
  batches = pipeline.eval_batches(examples, config.batch_size, config.eval_steps,
                                  jax.process_index(), jax.process_count())
  for i, batch in enumerate(batches):
    batch = input_pipeline.to_global_array(batch, batch_sharding)
    total = add_stats(total, evaluate(params, batch, jax.random.fold_in(base_rng, i)))
  return objective.summarize(jax.device_get(total), config.eval_steps)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str):
  """Pretrains (or resumes pretraining) in `workdir` until config.num_train_steps."""
  config_lib.validate(config, jax.device_count())
  config_lib.check_workdir_config(config, workdir)
  os.makedirs(workdir, exist_ok=True)
  is_chief = jax.process_index() == 0

  vocab = input_pipeline.setup_vocab(config, workdir)
  train_examples = input_pipeline.load_examples(config, workdir, vocab, 'train')
  eval_examples = input_pipeline.load_examples(config, workdir, vocab, 'eval')

  mesh = make_mesh()
  model = make_model(config)
  optimizer = optim.make_optimizer(config)
  schedule = optim.learning_rate_schedule(config.learning_rate, config.warmup_steps,
                                          config.num_train_steps)
  special = objective.SpecialIds(vocab.pad_id, vocab.cls_id, vocab.sep_id, vocab.mask_id)
  train, evaluate, replicated, batch_sharding = compile_steps(config, model, optimizer, mesh,
                                                              special)

  state = create_train_state(config, model, optimizer, replicated)
  manager = checkpoint.make_manager(workdir, config.keep_checkpoints)
  writer = None
  try:  # Orbax's background threads must be shut down on every way out, errors included.
    restored = checkpoint.restore_latest(manager, state)
    state = state if restored is None else restored
    config_lib.save_config(config, workdir)  # only once the checkpoint is known to fit
    first_step = int(state.step)
    logging.info('%s at step %d of %d on %d device(s); %s parameters (generator + discriminator)',
                 'resuming' if restored is not None else 'starting', first_step,
                 config.num_train_steps, jax.device_count(), f'{count_params(state.params):,}')
    if is_chief:
      report.trim_metrics_file(workdir, first_step)
    writer = report.MetricsWriter(workdir, enabled=is_chief)
    eval_rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1 << 30)
    tokens_per_step = config.batch_size * config.max_seq_length

    def evaluate_and_log(step):
      metrics = run_eval(evaluate, state.params, eval_examples, config, batch_sharding, eval_rng)
      writer.write(step, {f'eval_{k}': v for k, v in metrics.items()},
                   f'eval at step {step}: ' + ', '.join(f'{k} {v:.4f}' for k, v in metrics.items()))

    evaluating = eval_examples is not None and config.eval_every > 0
    if evaluating and first_step == 0:
      evaluate_and_log(0)  # the untrained baseline every curve starts from

    total, window_steps, window_start = None, 0, time.perf_counter()
    for step in range(first_step, config.num_train_steps):
      batch = pipeline.local_batch(train_examples, config.batch_size, config.seed, step,
                                   jax.process_index(), jax.process_count())
      batch = input_pipeline.to_global_array(batch, batch_sharding)
      state, stats = train(state, batch, jax.random.fold_in(state.rng, step))
      total, window_steps = add_stats(total, stats), window_steps + 1
      done = step + 1

      if done % config.log_every == 0 or done == config.num_train_steps:
        metrics = objective.summarize(jax.device_get(total), window_steps)
        elapsed = time.perf_counter() - window_start
        metrics['learning_rate'] = float(schedule(step))
        metrics['tokens_per_s'] = window_steps * tokens_per_step / elapsed
        eta = (config.num_train_steps - done) * elapsed / window_steps
        writer.write(done, metrics, report.human_line(done, config.num_train_steps, metrics, eta))
        total, window_steps, window_start = None, 0, time.perf_counter()

      if evaluating and done % config.eval_every == 0:
        evaluate_and_log(done)

      if done % config.save_every == 0 or done == config.num_train_steps:
        checkpoint.save(manager, done, state)
    manager.wait_until_finished()
  finally:
    manager.close()
    if writer is not None:
      writer.close()
  return state
