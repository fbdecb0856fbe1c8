"""The loop every task family fine-tunes with: compiled steps, seeds, checkpoints, predictions,
and what a run leaves in DIR (config.json, metrics.jsonl, results.json, each seed's files).

A family (glue/, squad/, tagging/ run.py) brings its data, network, loss and outputs. Batches
slice per-epoch shuffles drawn from the seed. The tokenized training set (SST-2 at length 128:
69 MB, MNLI 0.4 GB) and the batch order sit on the devices and the step gathers its own rows, so
the host only launches steps and reads the losses every `log_every`.
"""

import functools
import json
import os
import time
from typing import Any, NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P

from electra_jax.training import checkpoint, compile_cache, report
from electra_jax.common import config as config_lib, interrupts
from electra_jax.training import optim as pretrain_optim
from electra_jax.training import train as pretrain
from electra_jax.common.errors import UsageError
from electra_jax.finetune import init, optim, settings

DTYPES = pretrain.DTYPES  # config.dtype's, as pretraining reads them
RESULTS = 'results.json'  # each seed's dev metrics, their medians (as the paper reports), budget
PROGRESS_EVERY_S = 30.0  # a prediction longer than this logs how far it is, this often


def gather_batch(inputs, order, step, length: int | None = None):
  """The rows order[step] of every array in `inputs`, [N, L] ones cut to `length` columns."""
  rows = jax.lax.dynamic_index_in_dim(order, step, keepdims=False)
  cut = lambda values: values if length is None or values.ndim < 2 else values[:, :length]
  return jax.tree.map(lambda values: cut(values[rows]), inputs)


def step_lengths(token_counts: np.ndarray, order: np.ndarray, multiple: int,
                 width: int) -> np.ndarray:
  """[steps] each batch's longest example (by `token_counts`) rounded up to `multiple`, at most
  `width`: each length is one compiled program, so the multiple bounds their number."""
  longest = token_counts[order].max(axis=1)
  rounded = -(-longest // multiple) * multiple  # rounded up to the multiple
  return np.minimum(rounded, width).astype(np.int64)


def train_step(state, inputs, order, length, *, loss_of, optimizer):
  """One update on the batch order[state.step], dropout key fold_in(state.rng, state.step); an
  update that is not finite is skipped as in pretraining: (state, loss 0, nonfinite 1)."""
  batch = gather_batch(inputs, order, state.step, length)
  rng = jax.random.fold_in(state.rng, state.step)
  loss, grads = jax.value_and_grad(loss_of)(state.params, batch, rng)
  params, opt_state, finite = pretrain_optim.guarded_update(optimizer, grads, loss, state.params,
                                                            state.opt_state)
  return (state.replace(step=state.step + 1, params=params, opt_state=opt_state),
          jnp.where(finite, loss, 0.0), jnp.logical_not(finite).astype(jnp.int32))


class Compiled(NamedTuple):
  step: Any
  predict: Any
  optimizer: optax.GradientTransformation
  replicated: NamedSharding
  batch_sharding: NamedSharding
  order_sharding: NamedSharding  # [steps, batch] row indices: each device holds its columns


def compile_task_steps(loss_of, predict_of, optimizer, mesh) -> Compiled:
  """The jitted steps: loss_of(params, batch, rng) -> scalar; predict_of(params, batch) -> an
  array or a dict of arrays, batch first."""
  replicated, batch_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P('data'))
  order_sharding = NamedSharding(mesh, P(None, 'data'))
  step = jax.jit(functools.partial(train_step, loss_of=loss_of, optimizer=optimizer),
                 in_shardings=(replicated, replicated, order_sharding),
                 out_shardings=(replicated, replicated, replicated), donate_argnums=0,
                 static_argnums=3)
  predict = jax.jit(predict_of, in_shardings=(replicated, batch_sharding),
                    out_shardings=batch_sharding)
  return Compiled(step, predict, optimizer, replicated, batch_sharding, order_sharding)


def batch_order(num_examples: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
  """[steps, batch_size] example indices: per-epoch shuffles, concatenated and sliced."""
  rng = np.random.default_rng(seed)
  epochs = -(-steps * batch_size // num_examples)
  order = np.concatenate([rng.permutation(num_examples) for _ in range(epochs)])
  return order[:steps * batch_size].reshape(steps, batch_size)


def progress(what: str, done: int, total: int, seconds: float) -> str:
  """'1,280/10,833 dev windows (12%), eta 4m10s': `done` of `total` after `seconds`."""
  eta = (total - done) * seconds / done if done else 0.0
  return (f'{done:,}/{total:,} {what} ({100 * done / total:.0f}%), '
          f'eta {report.format_duration(eta)}')


def predict(predict_fn, params, inputs, batch_size, batch_sharding, what: str = 'examples'):
  """Outputs in eval mode ([N, ...] arrays); the last batch is padded with empty rows. Every
  PROGRESS_EVERY_S seconds it logs how many of the `what` are done (SQuAD's dev set takes
  minutes on a CPU)."""
  count = len(inputs['input_ids'])
  outputs, started = [], time.perf_counter()
  logged = started
  for start in range(0, count, batch_size):
    rows = min(batch_size, count - start)
    batch = {k: np.pad(v[start:start + rows], [(0, batch_size - rows)] + [(0, 0)] * (v.ndim - 1))
             for k, v in inputs.items()}
    out = jax.device_get(predict_fn(params, jax.device_put(batch, batch_sharding)))
    outputs.append(jax.tree.map(lambda values: np.asarray(values)[:rows], out))
    now = time.perf_counter()
    if now - logged >= PROGRESS_EVERY_S and start + rows < count:
      logging.info('predicting %s', progress(what, start + rows, count, now - started))
      logged = now
  return jax.tree.map(lambda *parts: np.concatenate(parts), *outputs)


def saved_step(workdir: str, seed: int) -> int:
  """The step of seed's latest committed checkpoint (Orbax's uncommitted ones carry a suffix)."""
  folder = os.path.join(workdir, 'checkpoints', f'seed_{seed}')
  steps = [int(n) for n in os.listdir(folder) if n.isdigit()] if os.path.isdir(folder) else []
  return max(steps, default=0)


def train_seed(config, seed, start, model, compiled, train_inputs, total_steps, schedule,
               log, workdir, token_counts=None):
  """The parameters trained from a fresh head (seed), each batch cut to its longest example
  with `token_counts` and config.length_multiple. A seed resumes from its checkpoint exactly, as
  its batches and dropout keys are functions of (seed, step)."""
  params = init.initial_params(model, start, seed, config.max_seq_length)
  # Every leaf replicated, as the compiled step expects: no seed compiles it again.
  state = jax.device_put(pretrain.TrainState(
      step=np.zeros([], np.int32), params=params, opt_state=compiled.optimizer.init(params),
      rng=jax.random.fold_in(jax.random.PRNGKey(seed), 1)), compiled.replicated)
  host_order = batch_order(len(train_inputs['input_ids']), config.batch_size, total_steps, seed)
  order = jax.device_put(host_order, compiled.order_sharding)
  multiple = config.length_multiple
  lengths = ([None] * total_steps if token_counts is None or not multiple else step_lengths(
      token_counts, host_order, multiple, train_inputs['input_ids'].shape[1]).tolist())
  # DIR/checkpoints/seed_<seed>/<step>/, the latest kept: a finished seed's final state, or
  # where a killed one resumes.
  manager = ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), 'checkpoints', f'seed_{seed}'),
      options=ocp.CheckpointManagerOptions(max_to_keep=1, enable_async_checkpointing=True),
      item_handlers=ocp.StandardCheckpointHandler())
  try:  # Orbax's background threads must be shut down on every way out, errors included.
    # A seed keeps one checkpoint: if it is damaged, the seed can only start over.
    fix = f'Delete {manager.directory} to train seed {seed} again from its start'
    state = checkpoint.restore_latest(manager, state, fix=fix) or state
    first_step = int(state.step)
    if first_step:
      logging.info('seed %d: resuming at step %d of %d', seed, first_step, total_steps)
    window, skipped, started = [], [], time.perf_counter()
    watch = pretrain_optim.start()
    interrupts.stops_at_once(False)
    for step in range(first_step, total_steps):
      if step == first_step and interrupts.requested():  # before this seed trained: none to save
        stop(config, seed, step, total_steps, before=True)
      state, loss, bad = compiled.step(state, train_inputs, order, lengths[step])
      watch = pretrain_optim.watch(watch, bad, state.step)
      window.append(loss)
      skipped.append(bad)
      done = step + 1
      at_log = done % config.log_every == 0 or done == total_steps
      stopping = interrupts.requested() and done < total_steps
      at_save = (done == total_steps or (config.save_every and done % config.save_every == 0)
                 or stopping)
      if at_log or at_save:  # nothing after a non-finite step is saved ('stop')
        seen, watch = pretrain_optim.read(watch)
        pretrain_optim.check(seen, config, f' of {config.task} seed {seed}',
                             lambda: f'{checkpoint.last_good(manager)}; no results were written')
      if at_log:
        applied = len(window) - int(np.sum(jax.device_get(skipped)))
        # The mean over the applied steps (a skipped step's loss reads 0); the learning rate of
        # the last applied update (a skipped step leaves the schedule where it was).
        updates = pretrain_optim.applied_updates(state.opt_state)
        log({'seed': seed, 'step': done,
             'loss': float(np.sum(jax.device_get(window))) / applied if applied else float('nan'),
             'skipped_steps': len(window) - applied,
             'learning_rate': float(schedule(max(updates - 1, 0))),
             'steps_per_s': len(window) / (time.perf_counter() - started)})
        window, skipped, started = [], [], time.perf_counter()
      if at_save:
        checkpoint.save(manager, done, state)
      if stopping:
        manager.wait_until_finished()
        stop(config, seed, done, total_steps)
    manager.wait_until_finished()
  finally:
    manager.close()
  if interrupts.requested():  # in the last step, saved: stop before predicting
    stop(config, seed, total_steps, total_steps)
  interrupts.stops_at_once(True)  # predicting saves nothing; a rerun predicts again
  return state.params


def stop(config, seed: int, step: int, total_steps: int, before: bool = False):
  """Ends fine-tuning on SIGTERM or Ctrl-C; the same command run again resumes here."""
  where = 'before step %d' if before else 'at step %d'
  logging.warning(f'stopped by %s {where} of %d of %s seed %d, %s; run the same command again '
                  'to resume', interrupts.cause(), step, total_steps, config.task, seed,
                  'the seeds before it saved' if before else 'its checkpoint saved')
  raise interrupts.Stopped(interrupts.exit_status())


def for_each_seed(config, workdir: str, total_steps: int, run_seed) -> dict:
  """{seed: run_seed(seed, log)}; `log` appends to DIR/metrics.jsonl, whose records of a
  previous run are kept up to each seed's checkpoint (those after it are logged again). An
  outcome starts with the seed's scores."""
  path = os.path.join(workdir, 'metrics.jsonl')
  seeds = settings.parse_seeds(config.seeds)
  kept = []
  if os.path.exists(path):
    with open(path) as f:  # a last line a kill cut short has no newline, and is dropped
      kept = [line for line in f if line.endswith('\n') and line.strip()]
    resumed = {seed: saved_step(workdir, seed) for seed in seeds}
    records = [json.loads(line) for line in kept]  # a seed no longer run keeps none
    kept = [line for line, r in zip(kept, records)
            if r['seed'] in resumed and r['step'] <= resumed[r['seed']]]
  write_file(path, ''.join(kept))
  with open(path, 'a') as metrics_file:
    def log(record):
      metrics_file.write(json.dumps(record) + '\n')
      metrics_file.flush()
      # The training left: this seed's steps and every later seed's, at the record's steps/s
      # (their predictions not counted).
      later = len(seeds) - 1 - seeds.index(record['seed'])
      eta = (total_steps - record['step'] + later * total_steps) / record['steps_per_s']
      logging.info('seed %d step %d/%d | loss %.4f | lr %.2e | %.1f steps/s | eta %s',
                   record['seed'], record['step'], total_steps, record['loss'],
                   record['learning_rate'], record['steps_per_s'], report.format_duration(eta))

    outcomes = {}
    for seed in seeds:
      outcomes[seed] = run_seed(seed, log)
      logging.info('seed %d: %s', seed, format_scores(outcomes[seed][0]))
  return outcomes


def fine_tune_seeds(config, workdir: str, start, model, total_steps: int, train_inputs: dict,
                    loss_fn, predict_fn, evaluate, score: tuple[str, str], budget: dict,
                    token_counts=None, programs: int = 1,
                    files_keys: tuple[str, str] = ('files_seed', 'files'), **extra) -> dict:
  """Trains every seed (the steps of loss_fn and predict_fn, each called with model=`model`, and
  the layer-wise optimizer, on all devices; train_inputs put on the devices once for all), then
  evaluate(seed, predict) -> (scores, files), where predict(inputs, what=...) gives loop.predict's
  outputs of the seed's parameters. results.json is scored by `score` = (split, metric) and names
  the median seed and its files under `files_keys` (the seed None if there are none); each seed's
  `files` (name -> text or a JSON value) go to DIR/seed_<seed>/, the median seed's also to DIR.
  The step must have compiled at most `programs` times."""
  optimizer = optim.make_optimizer(config, init.param_shapes(model, config.max_seq_length),
                                   model.config.num_layers, total_steps)
  compiled = compile_task_steps(functools.partial(loss_fn, model=model),
                                functools.partial(predict_fn, model=model), optimizer,
                                pretrain.make_mesh())
  train_inputs = jax.device_put(train_inputs, compiled.replicated)
  schedule = optim.learning_rate_schedule(config, total_steps)

  def run_seed(seed, log):
    params = train_seed(config, seed, start, model, compiled, train_inputs, total_steps,
                        schedule, log, workdir, token_counts)
    return evaluate(seed, functools.partial(predict, compiled.predict, params,
                                            batch_size=config.eval_batch_size,
                                            batch_sharding=compiled.batch_sharding))

  started = time.perf_counter()
  outcomes = for_each_seed(config, workdir, total_steps, run_seed)
  budget = {**budget, 'steps': total_steps, 'batch_size': config.batch_size,
            'epochs': config.num_epochs, 'max_seq_length': config.max_seq_length,
            'seconds': round(time.perf_counter() - started, 1)}
  split, metric = score
  per_seed = {seed: scores for seed, (scores, _) in outcomes.items()}
  scores = {seed: values[split][metric] for seed, values in per_seed.items()}
  chosen = median_of(scores)
  for seed, (_, named) in outcomes.items():
    os.makedirs(os.path.join(workdir, f'seed_{seed}'), exist_ok=True)
    for name, value in named.items():
      write_file(os.path.join(workdir, f'seed_{seed}', name), value)
      if seed == chosen:
        write_file(os.path.join(workdir, name), value)
  summary = {
      'task': config.task, 'init_from': config.init_from, 'init': start.description,
      'size': config.size, 'score_metric': f'{split} {metric}',
      'score': float(np.median(list(scores.values()))), 'median': medians(per_seed),
      'seeds': {str(seed): values for seed, values in per_seed.items()},
      files_keys[0]: chosen if outcomes[chosen][1] else None,
      files_keys[1]: sorted(outcomes[chosen][1]), 'budget': budget,
      'learning_rate': config.learning_rate, 'layer_decay': config.layer_decay, **extra}
  write_file(os.path.join(workdir, RESULTS), summary)
  pretrain.check_compiled_once(compiled.step, programs)
  return summary


# ---- results.json and the files beside it -----------------------------------------------

def format_scores(scores: dict[str, dict[str, float]]) -> str:
  return '; '.join(f'{split} ' + ', '.join(f'{k} {v:.4f}' for k, v in values.items())
                   for split, values in scores.items())


def median_of(scores: dict[int, float]) -> int:
  """The seed whose score is the median (the lower of the two middle ones for an even count)."""
  ranked = sorted(scores, key=lambda seed: (scores[seed], seed))
  return ranked[(len(ranked) - 1) // 2]


def medians(per_seed: dict[int, dict]) -> dict[str, dict[str, float]]:
  first = next(iter(per_seed.values()))
  return {split: {metric: float(np.median([s[split][metric] for s in per_seed.values()]))
                  for metric in values} for split, values in first.items()}


def write_file(path: str, value) -> None:
  """`value`, text or a JSON value (indented), to `path` in one replace: a kill leaves no half."""
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    f.write(value if isinstance(value, str) else json.dumps(value, indent=2) + '\n')
  os.replace(path + '.tmp', path)


# Fields that may change between a killed run and its rerun: they change no seed's training.
RERUN_MAY_CHANGE = ('seeds', 'log_every', 'save_every', 'predict_test', 'eval_batch_size',
                    'on_nonfinite', 'max_consecutive_skips', 'compilation_cache_dir')


def prepare_workdir(config, workdir: str):
  """Creates DIR and writes the resolved config; refuses a DIR whose checkpoints another recipe
  trained, as resuming them would mix two runs."""
  saved_path = os.path.join(workdir, 'config.json')
  saved = config_lib.read_json_object(saved_path) if os.path.isfile(saved_path) else {}
  if 'objective' in saved:  # a pretraining run's: fine-tuning would write over its config
    which = ('the pretraining run --config.init_from names' if os.path.normpath(workdir) ==
             os.path.normpath(config.init_from or '.') else "a pretraining run's directory")
    raise UsageError(f"--workdir='{workdir}' is {which}; fine-tune into a directory of its "
                     f"own, e.g. --workdir={os.path.join(workdir, 'finetune', config.task)}")
  os.makedirs(workdir, exist_ok=True)
  if os.path.isdir(os.path.join(workdir, 'checkpoints')) and saved:
    saved = settings.with_added_fields(saved)  # an older run's lacks fields: read as defaults
    now = json.loads(config.to_json())
    # A field only one of them has (another family's run) reads None in the other: a change.
    keys = sorted(set(saved) | set(now))
    saved, now = ({k: fields[k] if k in fields else None for k in keys} for fields in (saved, now))
    changed = [f'{k}: saved {saved[k]!r}, now {now[k]!r}' for k in keys
               if k not in RERUN_MAY_CHANGE and saved[k] != now[k]
               # 0: a run from before the step was resolved, begun from the latest then
               and not (k == 'init_step' and not saved[k])]
    if changed == [f"init_step: saved {saved['init_step']!r}, now {now['init_step']!r}"]:
      raise UsageError(f"{workdir} holds seed checkpoints fine-tuned from step "
                       f"{saved['init_step']} of {config.init_from}, not from step "
                       f"{now['init_step']} (init_step 0 is the run's latest); pass "
                       f"--config.init_step={saved['init_step']} to continue that run, or use "
                       'a new --workdir')
    if changed:
      raise UsageError(f'{workdir} holds seed checkpoints of another fine-tuning run '
                       f'({"; ".join(changed[:3])}); use a new --workdir, or the command that '
                       'run was started with to continue it')
  config_lib.save_config(config, workdir)
  # Only now that DIR is accepted: a refused run leaves no cache folder in it.
  compile_cache.use(config.compilation_cache_dir, workdir)
