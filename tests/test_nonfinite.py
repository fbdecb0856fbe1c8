"""Steps that are not finite, injected for real: an infinite learning rate from step k (through
the schedule), or a poisoned batch (a token id past the vocabulary, whose embedding is NaN).

Pretraining runs in this process on a tiny model over real prepared data with real Orbax
checkpoints: 'stop' ends with one error line naming step k and the last good checkpoint, and
nothing after step k is saved; 'skip' leaves parameters and optimizer state bitwise as they were,
goes on, and stops after max_consecutive_skips in a row. Fine-tuning does the same.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from conftest import compile_train_step, load_config
from electra_jax.training import checkpoint, train
from electra_jax.common import cli
from electra_jax.training import optim
from electra_jax.data import preparation
from electra_jax.training import inputs
from electra_jax.common.errors import UsageError
from electra_jax.finetune.glue import run as glue_run
from test_finetune import TINY, finetune_config, glue_folder, sentences, write_vocab


@pytest.fixture(scope='module')
def data(tmp_path_factory):
  """A WordPiece vocabulary, a small GLUE folder, and a corpus prepared from the same words."""
  root = tmp_path_factory.mktemp('nonfinite')
  vocab_size = write_vocab(root / 'vocab.txt')
  rng = np.random.default_rng(0)
  (root / 'corpus.txt').write_text('\n\n'.join('\n'.join(sentences(rng, 6)) for _ in range(80)))
  config = load_config('tiny')
  config.max_seq_length = 32
  config.data.update(train_files=str(root / 'corpus.txt'), vocab_model=str(root / 'vocab.txt'),
                     prepare_workers=1)
  preparation.prepare_dataset(config, str(root / 'prepared'))
  return root, vocab_size


def run_config(data, **overrides):
  """A one-layer MLM run: what is checked is the step around the loss, which every objective
  shares, and the MLM step compiles in half the time of ELECTRA's."""
  root, vocab_size = data
  config = load_config('tiny')
  config.objective = 'mlm'
  config.model.update(vocab_size=vocab_size, **TINY)
  config.model.num_layers = 1
  config.update({'batch_size': 8, 'max_seq_length': 32, 'num_train_steps': 10,
                 'warmup_steps': 0, 'log_every': 5, 'save_every': 2, 'keep_checkpoints': 20,
                 'eval_every': 0, **overrides})
  config.data.prepared_dir = str(root / 'prepared')
  return config


def infinite_learning_rate_from(monkeypatch, step):
  """The schedule's rate is inf from (1-based) step `step` on: the update of that step is the
  first non-finite one. Steps count the optimizer's applied updates, as the schedule does."""
  schedule = optim.learning_rate_schedule
  monkeypatch.setattr(optim, 'learning_rate_schedule', lambda *args: lambda count: jnp.where(
      count + 1 >= step, jnp.inf, schedule(*args)(count)))


def poisoned_batches_at(monkeypatch, steps, vocab_size):
  """The batches of these (1-based) steps hold a token id past the vocabulary: NaN embeddings."""
  local_batch = inputs.local_batch

  def poisoned(examples, batch_size, seed, step, *args):
    batch = local_batch(examples, batch_size, seed, step, *args)
    if step + 1 in steps:
      batch = {**batch, 'input_ids': np.where(batch['input_ids'] > 4, vocab_size,
                                              batch['input_ids'])}
    return batch
  monkeypatch.setattr(inputs, 'local_batch', poisoned)


def stopped(config, workdir) -> str:
  """The one error line a run ends with (the command line's exit, without its process)."""
  with pytest.raises(SystemExit) as stop:
    cli.run(train.train_and_evaluate, config, str(workdir))
  message = str(stop.value.code)
  assert message.startswith('electra_jax: error: ') and '\n' not in message
  return message


def saved_states(config, workdir):
  """{step: the train state saved at that step}, restored from the Orbax checkpoints."""
  abstract = train.abstract_train_state(config, train.make_model(config),
                                        optim.make_optimizer(config),
                                        NamedSharding(train.make_mesh(), P()))
  manager = checkpoint.make_manager(str(workdir), config.keep_checkpoints)
  try:
    return {step: jax.device_get(checkpoint.restore(manager, step, abstract))
            for step in manager.all_steps()}
  finally:
    manager.close()


def same_bits(a, b) -> bool:
  return all(np.asarray(x).tobytes() == np.asarray(y).tobytes()
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def all_finite(tree) -> bool:
  return all(np.all(np.isfinite(x)) for x in jax.tree.leaves(tree))


def logged(workdir):
  return {m['step']: m for m in map(json.loads, (workdir / 'metrics.jsonl').read_text().splitlines())}


def test_stop_names_the_first_bad_step_and_saves_nothing_after_it(data, tmp_path, monkeypatch):
  infinite_learning_rate_from(monkeypatch, 7)
  config, workdir = run_config(data), tmp_path / 'run'
  message = stopped(config, workdir)
  # Step 7 is caught before the save of step 8, not only at the log of step 10.
  assert 'step 7 is not finite' in message
  assert f'The last good checkpoint is {workdir}/checkpoints/6' in message
  assert '--config.on_nonfinite=skip' in message
  states = saved_states(config, workdir)
  assert sorted(states) == [2, 4, 6] and all_finite(states[6])
  assert sorted(logged(workdir)) == [5] and logged(workdir)[5]['skipped_steps'] == 0


def test_skip_keeps_the_state_bitwise_goes_on_and_stops_after_a_streak(data, tmp_path,
                                                                        monkeypatch):
  # One poisoned batch (step 3), then poisoned batches from step 8 on: data gone bad for good.
  poisoned_batches_at(monkeypatch, {3, *range(8, 13)}, data[1])
  config = run_config(data, num_train_steps=12, save_every=1, on_nonfinite='skip',
                      max_consecutive_skips=3)
  workdir = tmp_path / 'run'
  message = stopped(config, workdir)
  assert ('steps 8 to 10 were all not finite and skipped, 3 in a row '
          '(config.max_consecutive_skips=3)') in message
  assert f'The last good checkpoint is {workdir}/checkpoints/9' in message

  states = saved_states(config, workdir)
  assert sorted(states) == list(range(1, 10)) and all(map(all_finite, states.values()))
  unchanged = lambda a, b: same_bits((states[a].params, states[a].opt_state),
                                     (states[b].params, states[b].opt_state))
  assert unchanged(2, 3) and unchanged(7, 8) and unchanged(8, 9)  # the skipped steps
  assert not unchanged(1, 2) and not unchanged(3, 4)  # the steps around them did train
  assert [int(states[s].step) for s in (2, 3, 4)] == [2, 3, 4]  # the data went on
  window = logged(workdir)[5]
  assert window['skipped_steps'] == 1 and np.isfinite(window['loss'])


def test_fine_tuning_stops_or_skips_as_pretraining_does(data, tmp_path, monkeypatch):
  root, vocab_size = data
  glue = glue_folder(tmp_path / 'glue')
  infinite_learning_rate_from(monkeypatch, 3)
  config = finetune_config(task='SST-2', data_dir=str(glue), vocab=str(root / 'vocab.txt'),
                           num_epochs=2.0, log_every=2, seeds='5')  # 24 examples: 6 steps
  config.model.update(vocab_size=vocab_size, **TINY)
  config.model.num_layers = 1
  with pytest.raises(UsageError, match=r'^step 3 of SST-2 seed 5 is not finite .* no results '
                                       r'were written'):
    glue_run.fine_tune(config, str(tmp_path / 'stop'))
  assert not (tmp_path / 'stop' / 'results.json').exists()
  records = [json.loads(line) for line in (tmp_path / 'stop' / 'metrics.jsonl').open()]
  assert [(r['step'], r['skipped_steps']) for r in records] == [(2, 0)]

  config.update(on_nonfinite='skip', max_consecutive_skips=2)
  with pytest.raises(UsageError, match=r'^steps 3 to 4 of SST-2 seed 5 were all not finite '
                                       r'and skipped, 2 in a row'):
    glue_run.fine_tune(config, str(tmp_path / 'skip'))


def test_the_finite_flag_is_computed_once_not_copied_into_every_update():
  """XLA turned jnp.all over the per-leaf flags into a chain of ands and copied that chain into
  each select that keeps or replaces a leaf: 43,252 ands in the tiny step, whose compile took
  twice as long. The flag must be computed once."""
  config = load_config('tiny')
  config.batch_size, config.max_seq_length, config.model.vocab_size = 16, 64, 1000
  compiled, state = compile_train_step(config)
  program = compiled.as_text()
  leaves = len(jax.tree.leaves((state.params, state.opt_state)))
  assert program.count(' and(') < 2 * leaves, (program.count(' and('), leaves)
