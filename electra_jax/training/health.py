"""Evaluations that show a run has stopped learning, as a warning with the cause and the fix.

ELECTRA's discriminator can give up. When the generator's samples are too plausible for it, it
gives every token the same probability of being replaced. Its loss then sits at the entropy of
the replaced share and its AUC at chance, and later steps teach it nothing. The loss curve
still looks fine (it falls from ~0.69 to ~0.38 within a few hundred steps), so the failure
shows only in fine-tuning, hours later. Measured (research/transfer_study/LOG.md):
- tiny's generator (width 32, temperature 1): held-out AUC 0.51-0.54 for 6,750 steps;
- a 4 x 256 discriminator with a generator a quarter of its width at temperature 1: 0.49-0.51
  through 3,800 steps, and an encoder that fine-tuning could not move (SST-2 and MRPC at the
  majority class on every seed).
A weaker generator (narrower, or sampled hotter) kept both learning.
"""

import math

# Held-out AUC under 0.5 + this is "at chance": a random scorer's AUC on 2,000 tokens has a
# standard deviation of ~0.02; runs that went on to learn were at 0.71-0.77 by step 500-1,000.
CHANCE_MARGIN = 0.05


def base_rate_entropy(share: float) -> float:
  """Binary cross-entropy (nats per token) of predicting `share` for every token."""
  if not 0.0 < share < 1.0:
    return 0.0
  return -(share * math.log(share) + (1.0 - share) * math.log(1.0 - share))


def discriminator_at_chance(metrics: dict, step: int, config) -> str | None:
  """A warning when the evaluation at `step` shows a discriminator at chance, else None.

  Checked from step max(config.stall_check_after, config.warmup_steps) on, so that a run still
  warming up is not warned about; config.stall_check_after = 0 turns it off. Runs without a
  discriminator (objective=mlm) report no AUC and are never warned about.
  """
  auc = metrics.get('disc_auc')
  after = config.get('stall_check_after', 0)
  if auc is None or after <= 0 or step < max(after, config.warmup_steps):
    return None
  if auc >= 0.5 + CHANCE_MARGIN:
    return None
  loss, share = metrics.get('disc_loss'), metrics.get('replaced_fraction')
  loss_note = ''
  if loss is not None and share is not None:
    loss_note = (f'; its loss {loss:.3f} against {base_rate_entropy(share):.3f}, the loss of '
                 f'predicting the replaced share ({share:.3f}) for every token')
  return (f'the discriminator is at chance at step {step:,}: held-out AUC {auc:.3f} (0.5 is '
          f'chance){loss_note}. It no longer tells replaced tokens from real ones, and further '
          'steps are unlikely to change that. Likely cause: the generator is too strong for it. '
          'Fix: restart with a weaker generator, a narrower one (--config.model.'
          'generator_hidden_size) or one sampled hotter (--config.temperature, or a schedule '
          'from --config.temperature_start), or a lower --config.learning_rate; '
          '--config.stall_check_after=0 silences this check (docs/training.md, "A discriminator '
          'at chance")')
