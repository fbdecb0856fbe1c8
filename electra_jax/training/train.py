"""Pretraining, one linear story: mesh -> data -> state -> step -> log/eval -> checkpoint.

What is trained is `config.objective`'s business (electra_jax/objective). Data parallelism is
expressed with shardings, not pmap: the batch is sharded over the mesh's `data` axis, parameters
and optimizer state are replicated, and XLA inserts the gradient all-reduce.
"""

import contextlib
import dataclasses
import functools
import os
import re
import time
from typing import Any

from absl import logging
import flax
import jax
import jax.numpy as jnp
import ml_collections
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from electra_jax import objective
from electra_jax.common import config as config_lib, interrupts, run_lock, storage
from electra_jax.data import vocab as vocab_lib
from electra_jax.model import networks
from electra_jax.model.networks import count_params, init_params
from electra_jax.training import checkpoint, compile_cache, generator_modes, inputs, optim, report

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


# The run's random keys. The state keeps its key as raw data (uint32 words), so checkpoints hold
# plain arrays; step s's key is fold_in(base key, s), so a resumed run draws what an
# uninterrupted one would.

# libtpu's switch (LIBTPU_INIT_ARGS; XLA_FLAGS does not know it and stops the process) that
# makes XLA:TPU generate only each chip's share of an RngBitGenerator's bits.
RBG_PARTITION_FLAG = '--xla_tpu_spmd_rng_bit_generator_unsafe=true'
_RBG_PARTITION_SETTING = re.compile(r'--xla_tpu_spmd_rng_bit_generator_unsafe(?:=(\S*))?')


def rbg_sharding_warning(config, platform: str, num_devices: int, libtpu_args: str) -> str | None:
  """What a run of rng_impl=rbg or unsafe_rbg on several TPU chips should be told, or None
  (docs/performance.md measures both warnings' causes)."""
  impl = config.rng_impl
  if impl == 'threefry2x32' or platform != 'tpu' or num_devices == 1:
    return None
  settings = _RBG_PARTITION_SETTING.findall(libtpu_args)
  if not settings or settings[-1].lower() not in ('', 'true', '1'):
    return (f"rng_impl={impl} on {num_devices} TPU chips: each chip generates the random bits of "
            f"the whole batch and keeps its share, {num_devices} times the bits it uses. Start "
            f"the run with LIBTPU_INIT_ARGS='{RBG_PARTITION_FLAG}' to generate each chip's share "
            "only (the bits then depend on the chip count), or use "
            "--config.rng_impl=threefry2x32")
  if config.remat:
    return (f'rng_impl={impl} with {RBG_PARTITION_FLAG} and remat: XLA may shard a draw that the '
            'backward pass recomputes otherwise than the forward pass drew it, and the two then '
            'hold other bits. Turn remat off, leave the flag out, or use '
            '--config.rng_impl=threefry2x32')
  return None


def base_key(config, seed: int | None = None) -> jax.Array:
  """A typed key of config.rng_impl. For threefry its bits are jax.random.PRNGKey(seed)'s."""
  return jax.random.key(config.seed if seed is None else seed, impl=config.rng_impl)


@functools.partial(jax.jit, static_argnames='impl')
def _fold_in(data, step, impl):
  return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(data, impl=impl), step))


def step_key(config, data: jax.Array, step) -> jax.Array:
  """fold_in(key, step) of the raw key `data`, as raw data: what a step is given."""
  return _fold_in(data, step, config.rng_impl)


def as_key(config, data: jax.Array) -> jax.Array:
  return jax.random.wrap_key_data(data, impl=config.rng_impl)


class TrainState(flax.struct.PyTreeNode):
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array  # the run's base key as raw data (config.rng_impl); step_key: step s's


def make_mesh(devices=None) -> Mesh:
  """A 1-D mesh over all devices (or `devices`) with a `data` axis. Auto axes (newer JAX defaults
  to explicit ones): XLA propagates shardings from the inputs, so the model needs no annotations."""
  devices = jax.devices() if devices is None else devices
  return jax.make_mesh((len(devices),), ('data',), axis_types=(jax.sharding.AxisType.Auto,),
                       devices=devices)


def make_model(config: ml_collections.ConfigDict):
  """The network config.objective trains (model.Electra, or model.MaskedLM for 'mlm')."""
  # Only ELECTRA's pair has the field: the other networks share nothing or have one network.
  sharing = config.embedding_sharing
  extra = {} if sharing == 'shared' else {'embedding_sharing': sharing}
  model = dataclasses.replace(networks.ModelConfig.of(config.model),
                              document_attention=config.data.document_attention)
  return objective.get(config).model(model, dtype=DTYPES[config.dtype], remat=config.remat,
                                     attention=config.attention, **extra)


def _init_state_fn(config, model, optimizer):
  def init():
    init_rng, train_rng = jax.random.split(base_key(config))
    params = init_params(model, init_rng, config.max_seq_length)
    trained = generator_modes.mode(config).trained(params)  # a frozen generator has no state
    return TrainState(step=jnp.zeros([], jnp.int32), params=params,
                      opt_state=optimizer.init(trained), rng=jax.random.key_data(train_rng))
  return init


def create_train_state(config, model, optimizer, replicated, generator=None) -> TrainState:
  """Initial state, created directly as replicated arrays on the mesh; `generator` (host arrays,
  generator_modes.load's) replaces the initialised generator."""
  state = jax.jit(_init_state_fn(config, model, optimizer), out_shardings=replicated)()
  if generator is None:
    return state
  placed = jax.tree.map(lambda x: jax.make_array_from_callback(x.shape, replicated,
                                                               lambda index: x[index]), generator)
  return state.replace(params={**state.params, **placed})


def abstract_params(config) -> dict:
  """Shapes and dtypes of the parameters of the network `config` trains, computing nothing."""
  model = make_model(config)
  return jax.eval_shape(lambda: init_params(model, base_key(config), config.max_seq_length))


def abstract_train_state(config, model, optimizer, replicated) -> TrainState:
  """Shapes, dtypes and shardings of the state, without computing (or allocating) it."""
  shapes = jax.eval_shape(_init_state_fn(config, model, optimizer))
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                      shapes)


def step_inputs(state: TrainState, batch, rng, config, special):
  """What step `state.step` draws for `batch` from key `rng`: (prepared inputs at the step's
  temperature, the dropout key, the parameters its generator mode starts from)."""
  prepared, dropout_rng = objective.draw(as_key(config, rng), batch['input_ids'], config,
                                         special)
  prepared = prepared._replace(temperature=objective.masking.scheduled_temperature(config,
                                                                                   state.step))
  return prepared, dropout_rng, generator_modes.mode(config).start(state.params, state.step)


def micro_batch_sum(fn, batch, prepared, dropout_rng, steps: int):
  """fn(batch, prepared, dropout_rng), or for `steps` > 1 its sum over micro-batches: i holds
  rows i, i + k, i + 2k, ... (a strided split keeps every micro-batch spread over all devices)
  and dropout key fold_in(dropout_rng, i). The counts and the temperature stay whole-batch
  values: every share's denominators."""
  if steps == 1:
    return fn(batch, prepared, dropout_rng)
  split = lambda x: jnp.swapaxes(x.reshape((-1, steps) + x.shape[1:]), 0, 1)
  per_example = prepared._replace(mlm_count=None, token_count=None, temperature=None)
  micro_batches = jax.tree.map(split, (batch, per_example))

  def micro_step(index, micro_batch, micro_prepared):
    whole = micro_prepared._replace(mlm_count=prepared.mlm_count,
                                    token_count=prepared.token_count,
                                    temperature=prepared.temperature)
    return fn(micro_batch, whole, jax.random.fold_in(dropout_rng, index))

  def accumulate(total, inputs):
    return jax.tree.map(jnp.add, total, micro_step(*inputs)), None

  shapes = jax.eval_shape(micro_step, 0, *jax.tree.map(lambda x: x[0], micro_batches))
  zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
  return jax.lax.scan(accumulate, zeros, (jnp.arange(steps), *micro_batches))[0]


def train_step(state: TrainState, batch, rng, *, model, optimizer, config, special):
  """One update of every parameter by the objective's loss; returns the new state and step stats.
  An update that is not finite is not applied (optim.py): only the step advances, and
  stats['nonfinite'] is 1. With grad_accum_steps > 1, masks and samples are drawn for the whole
  batch (objective.partial_loss), so the update is the whole batch's but for dropout masks."""
  mode = generator_modes.mode(config)
  prepared, dropout_rng, params = step_inputs(state, batch, rng, config, special)
  trained = mode.trained(params)
  loss_fn = lambda trained_params, *args: objective.partial_loss(
      model.apply, mode.merged(trained_params, params), *args, config=config, special=special)
  grads_and_stats = functools.partial(jax.grad(loss_fn, has_aux=True), trained)
  grads, stats = micro_batch_sum(grads_and_stats, batch, prepared, dropout_rng,
                                 config.grad_accum_steps)
  new_trained, opt_state, finite = optim.guarded_update(
      optimizer, mode.gradients(grads, state.step), stats['loss'], trained, state.opt_state)
  new_params = mode.updated(new_trained, params, state.step)
  return (state.replace(step=state.step + 1, params=new_params, opt_state=opt_state),
          optim.without_stats_of_skipped(stats, finite))


def eval_step(params, batch, rng, *, model, config, special):
  """The statistics of `batch`, the discriminator's exact AUC included: evaluation sorts the
  token scores, the train step does not (`forward_stats` gives a logged step's)."""
  _, stats = objective.loss(model.apply, params, batch, as_key(config, rng), config,
                            train=False, special=special, auc=True)
  return stats


def forward_stats(state: TrainState, batch, rng, *, model, config, special):
  """The statistics train_step(state, batch, rng) returns, and the discriminator's exact AUC of
  the very scores it computes (its masks, samples, temperature and dropout, micro-batch by
  micro-batch), by the step's forward pass alone."""
  prepared, dropout_rng, params = step_inputs(state, batch, rng, config, special)
  stats_of = lambda *args: objective.partial_loss(model.apply, params, *args, config=config,
                                                  special=special, auc=True)[1]
  return micro_batch_sum(stats_of, batch, prepared, dropout_rng, config.grad_accum_steps)


def special_ids(config, vocab=None) -> objective.SpecialIds:
  """What the objective reads of the vocabulary: the special ids and, for whole-word and span
  masking, which pieces start a word. Without a vocabulary (compiling, benchmarking) the default
  ids, and every piece a word start: a program of the same shape and cost."""
  whole_words = config.masking != 'token'
  if vocab is None:
    return objective.SpecialIds(
        word_starts=b'\x01' * config.model.vocab_size if whole_words else b'')
  return objective.SpecialIds(vocab.pad_id, vocab.cls_id, vocab.sep_id, vocab.mask_id,
                              vocab.unk_id, vocab_lib.word_starts(vocab) if whole_words else b'')


def compile_steps(config, model, optimizer, mesh, special=None):
  """The jitted train/eval steps and the shardings they expect."""
  special = special_ids(config) if special is None else special
  replicated, batch_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P('data'))
  train = jax.jit(
      functools.partial(train_step, model=model, optimizer=optimizer, config=config,
                        special=special), in_shardings=(replicated, batch_sharding, replicated),
      out_shardings=(replicated, replicated), donate_argnums=0)
  evaluate = jax.jit(functools.partial(eval_step, model=model, config=config, special=special),
                     in_shardings=(replicated, batch_sharding, replicated),
                     out_shardings=replicated)
  return train, evaluate, replicated, batch_sharding


def compile_auc_probe(config, model, mesh, special):
  """The jitted AUC of a logged step, probe(state, batch, rng) -> {disc_auc, auc_batches}, called
  before the step (which donates the state): `forward_stats`' AUC, one forward pass per log line
  instead of a sort of every token's score in every step. None without a discriminator."""
  if not objective.get(config).detects:
    return None
  replicated, batch_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P('data'))
  stats = functools.partial(forward_stats, model=model, config=config, special=special)
  probe = lambda state, batch, rng: {k: v for k, v in stats(state, batch, rng).items()
                                     if k in ('disc_auc', 'auc_batches')}
  return jax.jit(probe, in_shardings=(replicated, batch_sharding, replicated),
                 out_shardings=replicated)


def check_compiled_once(step, allowed: int = 1):
  """Raises if the jitted `step` holds more than `allowed` compiled programs (fine-tuning: one
  per batch length): another means an input changed shape, dtype or sharding between steps."""
  compiled = step._cache_size()  # pylint: disable=protected-access
  if compiled > allowed:
    once = 'once' if allowed == 1 else f'at most {allowed} times (once per batch length)'
    raise RuntimeError(f'the train step was compiled {compiled} times; it must compile {once} '
                       '(an input changed shape, dtype or sharding between steps)')


@functools.partial(jax.jit, donate_argnums=0)
def _accumulate(total, stats):
  return jax.tree.map(jnp.add, total, stats)


def add_stats(total, stats):
  """Sums step statistics on the device; nothing leaves it until the next log."""
  return stats if total is None else _accumulate(total, stats)


def chief_first(make, name: str):
  """make() on process 0 first, then on the others: they read what it wrote to a shared workdir,
  or make identical files (deterministic) on a disk of their own or in data.local_dir."""
  if jax.process_count() == 1:
    return make()
  result = make() if jax.process_index() == 0 else None
  multihost_utils.sync_global_devices(f'electra_jax: {name} ready')
  return result if jax.process_index() == 0 else make()


def preemption_check(manager):
  """step -> whether to save and stop now: one process, a SIGTERM or Ctrl-C the command caught
  (common/interrupts.py); several, Orbax's reached_preemption, on which they all agree."""
  if jax.process_count() > 1:
    return manager.reached_preemption
  return lambda step: interrupts.requested()


def first_call(train, cache: str | None, *args):
  """train(*args), logging whether its step was compiled or read from `cache`, and how long."""
  hits, started = compile_cache.hits(), time.perf_counter()
  outputs = train(*args)
  how = (f'read from the compilation cache at {cache}' if compile_cache.hits() > hits
         else 'compiled')
  logging.info('train step %s in %.1f s', how, time.perf_counter() - started)
  return outputs


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       read_hf_generator: generator_modes.HFReader | None = None):
  """Pretrains (or resumes pretraining) in `workdir` until config.num_train_steps.

  `read_hf_generator` (hf/importing.read_generator, a floor above: main passes it) reads a
  Hugging Face directory given as config.generator_init."""
  config = config_lib.resolve(config)
  config_lib.validate(config, jax.device_count())
  config = generator_modes.fitted(config)
  storage.check_uri(workdir, '--workdir')
  storage.check_uri(config.compilation_cache_dir, '--config.compilation_cache_dir')
  inputs.check_files(config)  # a bad glob used to surface only after the vocabulary and data
  storage.makedirs(workdir)
  # Process 0 speaks for a multi-host run: its other processes share the workdir.
  with (run_lock.only_run_in(workdir, 'pretraining run') if jax.process_index() == 0
        else contextlib.nullcontext()):
    config_lib.check_workdir_config(config, workdir)
    return _train_and_evaluate(config, workdir, read_hf_generator)


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                        read_hf_generator: generator_modes.HFReader | None = None):
  is_chief = jax.process_index() == 0
  # A frozen generator is read and checked before anything is written; a resumed run's
  # checkpoint holds it.
  load_generator = lambda: (generator_modes.load(config, abstract_params(config), workdir,
                                                  read_hf_generator)
                            if config.generator_kind == 'frozen' else None)
  generator = None if checkpoint.has_checkpoint(workdir) else load_generator()

  vocab = chief_first(lambda: inputs.setup_vocab(config, workdir), 'vocab')
  train_examples, eval_examples = (
      chief_first(functools.partial(inputs.load_examples, config, workdir, vocab, split),
                  f'{split} data') for split in ('train', 'eval'))

  mesh = make_mesh()
  if is_chief and (warning := rbg_sharding_warning(
      config, jax.devices()[0].platform, jax.device_count(),
      os.environ.get('LIBTPU_INIT_ARGS', ''))):
    logging.warning(warning)
  model = make_model(config)
  optimizer = optim.make_optimizer(config)
  schedule = optim.learning_rate_schedule(config.learning_rate, config.warmup_steps,
                                          config.num_train_steps)
  special = special_ids(config, vocab)
  train, evaluate, replicated, batch_sharding = compile_steps(config, model, optimizer, mesh,
                                                              special)
  auc_probe = compile_auc_probe(config, model, mesh, special)  # None: no AUC to log
  cache = compile_cache.use(config.compilation_cache_dir, workdir)

  manager = checkpoint.make_manager(workdir, config.keep_checkpoints)
  writer = batches = None
  try:  # Orbax's background threads must be shut down on every way out, errors included.
    # Restoring onto the abstract state avoids holding an unused initial state in memory.
    run_identity = checkpoint.identity(config)
    restored = checkpoint.restore_latest(
        manager, abstract_train_state(config, model, optimizer, replicated), run_identity,
        fallback=config.checkpoint_fallback)
    resumed = restored is not None
    # (`generator` is None where every checkpoint was set aside)
    state = restored if resumed else create_train_state(
        config, model, optimizer, replicated, load_generator() if generator is None else generator)
    generator = None
    first_step = int(state.step)
    if is_chief:
      if resumed and (
          changes := config_lib.keep_config_before_changes(config, workdir, first_step)):
        logging.warning('resuming at step %d with changed settings (%s); the settings of the '
                        'steps before are kept in config.until-%d.json', first_step,
                        '; '.join(changes), first_step)
      config_lib.save_config(config, workdir)  # only once the checkpoint is known to fit
    if resumed and first_step >= config.num_train_steps:
      if is_chief:  # rather than 'resuming at step N of N' and nothing more
        logging.info(report.finished(workdir, first_step, config.num_train_steps, already=True))
      return state
    logging.info('%s at step %d of %d on %d device(s); objective %s, %s parameters',
                 'resuming' if resumed else 'starting', first_step, config.num_train_steps,
                 jax.device_count(), config.objective, f'{count_params(state.params):,}')
    if is_chief:
      # Lines logged after the checkpoint resumed from are logged again; without a checkpoint
      # the run starts over, its step-0 evaluation included, so no line is kept.
      report.trim_metrics_file(workdir, first_step if resumed else -1)
    writer = report.MetricsWriter(workdir, enabled=is_chief)
    eval_rng = step_key(config, jax.random.key_data(base_key(config)), 1 << 30)
    tokens_per_step = config.batch_size * config.max_seq_length

    def evaluate_and_log(step):
      summed = None
      for i, rows in enumerate(inputs.eval_batches(eval_examples, config.batch_size,
                                                   config.eval_steps, jax.process_index(),
                                                   jax.process_count())):
        placed = inputs.to_global_array(rows, batch_sharding)
        summed = add_stats(summed, evaluate(state.params, placed, step_key(config, eval_rng, i)))
      metrics = objective.summarize(jax.device_get(summed), config.eval_steps)
      writer.write(step, {f'eval_{k}': v for k, v in metrics.items()},
                   f'eval at step {step}: ' + ', '.join(f'{k} {v:.4f}' for k, v in metrics.items()))
      if is_chief and (warning := report.discriminator_at_chance(metrics, step, config)):
        logging.warning(warning)

    evaluating = eval_examples is not None and config.eval_every > 0
    if evaluating and first_step == 0:
      evaluate_and_log(0)  # the untrained baseline every curve starts from

    def check_finite(watch):
      """Stops the run as config.on_nonfinite says, if it must; returns the watch to go on with."""
      seen, watch = optim.read(watch)
      optim.check(seen, config, '', lambda: checkpoint.last_good(manager))
      return watch

    preemption_requested = preemption_check(manager)
    # Batches are gathered and put on the devices ahead, in a background thread.
    batches = inputs.train_batches(train_examples, config, first_step, batch_sharding)
    total, window_steps, window_start = None, 0, time.perf_counter()
    watch = optim.start()
    for step in range(first_step, config.num_train_steps):
      batch, key = next(batches), step_key(config, state.rng, step)
      done = step + 1
      last = done == config.num_train_steps
      logged = done % config.log_every == 0 or last
      # The logged AUC is the logged step's own, from its inputs (before the step donates them).
      auc = auc_probe(state, batch, key) if logged and auc_probe else None
      state, stats = (first_call(train, cache, state, batch, key) if step == first_step
                      else train(state, batch, key))
      watch = optim.watch(watch, stats['nonfinite'], state.step)
      total, window_steps = add_stats(total, stats), window_steps + 1
      checkpoint.check_written(manager)  # a full disk stops the run at the write that failed

      if logged:
        check_compiled_once(train)
        watch = check_finite(watch)
        totals = {**jax.device_get(total), **jax.device_get(auc or {})}
        skipped = int(totals['nonfinite'])
        # Averages over the applied steps: a skipped step's statistics were zeroed.
        metrics = (objective.summarize(totals, window_steps - skipped)
                   if window_steps > skipped else {})
        metrics['skipped_steps'] = skipped
        elapsed = time.perf_counter() - window_start
        # The rate of the last applied update (a skipped step leaves the schedule where it was).
        metrics['learning_rate'] = float(schedule(max(optim.applied_updates(state.opt_state) - 1,
                                                      0)))
        if config.temperature_start > 0:  # the last step's (step done - 1)
          metrics['temperature'] = float(objective.masking.scheduled_temperature(config, done - 1))
        metrics['tokens_per_s'] = window_steps * tokens_per_step / elapsed
        eta = (config.num_train_steps - done) * elapsed / window_steps
        writer.write(done, metrics, report.human_line(done, config.num_train_steps, metrics, eta))
        total, window_steps, window_start = None, 0, time.perf_counter()

      # The last step too: a run whose length is no multiple of eval_every (the transfer
      # study's MLM run, sized by FLOPs) still ends on a measured point.
      if evaluating and (done % config.eval_every == 0 or last):
        evaluate_and_log(done)

      preempted = preemption_requested(done)
      if done % config.save_every == 0 or last or preempted:
        watch = check_finite(watch)  # so nothing after a non-finite step is saved ('stop')
        checkpoint.save(manager, done, state, run_identity)
      if preempted:
        logging.warning('stopped by %s at step %d of %d, its checkpoint saved; run the same '
                        'command again to resume', interrupts.cause(), done,
                        config.num_train_steps)
        break
    checkpoint.check_written(manager, wait=True)
    if is_chief and int(state.step) >= config.num_train_steps:
      logging.info(report.finished(workdir, int(state.step), config.num_train_steps,
                                   already=False))
  finally:
    if batches is not None:
      batches.close()  # stops the prefetch thread
    manager.close()
    if writer is not None:
      writer.close()
  return state
