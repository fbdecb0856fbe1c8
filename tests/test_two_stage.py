"""generator_kind='two_stage': the paper's two-stage training (section 3.2), through `main`.

Steps 0-2 train the generator alone; step 3 initialises the discriminator from the generator's
weights and from then on trains it alone, the generator frozen bitwise. Checked on the
checkpoints of every step of a real 6-step run.
"""

import jax
import numpy as np
import pytest

from electra_jax.common import config as config_lib
from electra_jax.common.errors import UsageError
from electra_jax.hf import exporting
from electra_jax.training import generator_modes

N = 3  # generator steps
GENERATOR = generator_modes.GENERATOR
DISCRIMINATOR = ('embeddings', 'discriminator', 'discriminator_head')


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory, wikitext):
  from test_main import run  # pylint: disable=g-import-not-at-top
  del wikitext  # (skips where the real data is absent)
  workdir = tmp_path_factory.mktemp('two_stage')
  run(workdir, f'--config.two_stage_steps={N}', '--config.embedding_sharing=none',
      '--config.model.generator_hidden_size=1.0', '--config.num_train_steps=6',
      '--config.save_every=1', '--config.keep_checkpoints=6', '--config.log_every=1',
      '--config.model.num_layers=1', '--config.max_seq_length=32', '--config.batch_size=8')
  return {step: exporting.load_run(str(workdir), step).params for step in range(1, 7)}


def network(params, names):
  return {name: params[name] for name in names}


def equal(a, b) -> bool:
  return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_stage_one_trains_the_generator_alone(checkpoints):
  for step in (1, 2):
    before, after = checkpoints[step], checkpoints[step + 1]
    assert not equal(network(before, GENERATOR), network(after, GENERATOR))
    assert equal(network(before, DISCRIMINATOR), network(after, DISCRIMINATOR))


def test_stage_two_starts_the_discriminator_from_the_generator_and_freezes_the_generator(
    checkpoints):
  at_switch = checkpoints[N]
  # The generator never changes again, bitwise.
  for step in range(N + 1, 7):
    assert equal(network(checkpoints[step], GENERATOR),
                 network(at_switch, GENERATOR)), step
  # One update after the copy, the discriminator sits one small step from the generator's
  # weights, far from its own before. One step of Adam without bias correction moves an element
  # by at most ~3.2 x lr (plus weight decay), ~5e-4 here; an untouched discriminator is ~0.08
  # away, so the 2% bound separates the two by a wide margin on both sides.
  for target, source in generator_modes.INITIALISED_FROM.items():
    moved = jax.tree.leaves(checkpoints[N + 1][target])
    copied = jax.tree.leaves(at_switch[source])
    own = jax.tree.leaves(at_switch[target])
    from_copy = max(float(np.max(np.abs(m - c))) for m, c in zip(moved, copied))
    from_own = max(float(np.max(np.abs(m - o))) for m, o in zip(moved, own))
    assert 0 < from_copy < 0.02 * from_own, (target, from_copy, from_own)
  # And keeps training.
  for step in range(N + 1, 6):
    assert not equal(network(checkpoints[step], DISCRIMINATOR),
                     network(checkpoints[step + 1], DISCRIMINATOR))


def test_two_stage_needs_a_discriminator_sized_generator_and_both_stages():
  """two_stage_steps alone selects the mode, whose generator owns its weights: no sharing flag."""
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  config.update(two_stage_steps=5, num_train_steps=10)
  config = config_lib.resolve(config)
  assert (config.generator_kind, config.embedding_sharing) == ('two_stage', 'none')
  with pytest.raises(UsageError, match="two_stage_steps=5 initialises the discriminator with the "
                                       "generator's weights.*generator_hidden_size=1.0"):
    config_lib.validate(config, 1)
  config.model.generator_hidden_size = 1.0
  config_lib.validate(config, 1)
  config.two_stage_steps = 10
  with pytest.raises(UsageError, match='must be below num_train_steps=10'):
    config_lib.validate(config, 1)
  config.update(two_stage_steps=5, objective='mlm')
  with pytest.raises(UsageError, match="generator_kind='two_stage' applies to objective electra, "
                                       "not 'mlm'"):
    config_lib.validate(config, 1)
  config.update(objective='electra', embedding_sharing='gdes', generator_kind='joint')
  with pytest.raises(UsageError, match="embedding_sharing='gdes' ties generator weights"):
    config_lib.resolve(config)
