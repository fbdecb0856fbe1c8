"""The warning for a discriminator at chance (electra_jax/training/report.py)."""

import math

from electra_jax.common import config as config_lib
from electra_jax.training import report as health

# The held-out metrics of a real stalled run: 4 x 256, generator 64 at temperature 1, step 3,000.
STALLED = {'loss': 25.1692, 'mlm_loss': 6.2344, 'disc_loss': 0.3787, 'mlm_accuracy': 0.1909,
           'disc_auc': 0.5088, 'replaced_fraction': 0.1260}


def config(after=1000, warmup=500):
  c = config_lib.default_config()
  c.stall_check_after, c.warmup_steps = after, warmup
  return c


def test_a_discriminator_at_chance_is_warned_about_with_the_cause_and_the_fix():
  warning = health.discriminator_at_chance(STALLED, 3000, config())
  assert warning.startswith('the discriminator is at chance at step 3,000: held-out AUC 0.509')
  entropy = -(0.126 * math.log(0.126) + 0.874 * math.log(0.874))  # nats, by hand: 0.3784
  assert f'its loss 0.379 against {entropy:.3f}' in warning and 'share (0.126)' in warning
  for fix in ('--config.model.generator_hidden_size', '--config.temperature',
              '--config.learning_rate', '--config.stall_check_after=0'):
    assert fix in warning


def test_learning_runs_warmup_mlm_runs_and_the_switch_are_left_alone():
  learning = {**STALLED, 'disc_auc': 0.55}  # the edge: 0.5 + CHANCE_MARGIN is not at chance
  assert health.discriminator_at_chance(learning, 3000, config()) is None
  assert health.discriminator_at_chance({**STALLED, 'disc_auc': 0.549}, 3000, config())
  assert health.discriminator_at_chance(STALLED, 999, config()) is None  # before the check
  assert health.discriminator_at_chance(STALLED, 1000, config()) is not None
  assert health.discriminator_at_chance(STALLED, 1999, config(warmup=2000)) is None  # warming up
  assert health.discriminator_at_chance(STALLED, 3000, config(after=0)) is None  # turned off
  mlm = {k: STALLED[k] for k in ('loss', 'mlm_loss', 'mlm_accuracy')}
  assert health.discriminator_at_chance(mlm, 3000, config()) is None
  # Without the loss or the share, the warning still names the AUC and the fix.
  bare = health.discriminator_at_chance({'disc_auc': 0.5}, 3000, config())
  assert 'AUC 0.500' in bare and 'its loss' not in bare


def test_base_rate_entropy():
  assert math.isclose(health.base_rate_entropy(0.5), math.log(2), rel_tol=1e-12)
  assert health.base_rate_entropy(0.0) == health.base_rate_entropy(1.0) == 0.0
