"""Where metrics go: one human line to the log, one JSON object to metrics.jsonl, TensorBoard.

Only process 0 writes. In a workdir at a URI (gs://), which cannot be appended to, metrics.jsonl
is rewritten whole at each write, and tensorboardX uploads its whole events file at each flush.
"""

import io
import json
import math
import os
import shlex

from absl import logging

from electra_jax.common import storage


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  return f'{hours}h{rest // 60:02d}m' if hours else f'{rest // 60}m{rest % 60:02d}s'


# The log line's groups of (label, metric, format); a metric a run lacks is left out (an MLM run
# has no discriminator or sampling metrics).
_LINE_GROUPS = (
    (('loss', 'loss', '.4f'),),
    (('mlm', 'mlm_loss', '.4f'), ('acc', 'mlm_accuracy', '.3f')),
    (('disc', 'disc_loss', '.4f'), ('acc', 'disc_accuracy', '.3f'), ('auc', 'disc_auc', '.3f')),
    (('replaced', 'replaced_fraction', '.3f'),),
    (('temperature', 'temperature', '.3f'),),  # config.temperature_start's schedule
)


def human_line(step: int, total_steps: int, metrics: dict, eta_seconds: float) -> str:
  m = metrics
  groups = [' '.join(f'{label} {m[name]:{spec}}' for label, name, spec in group if name in m)
            for group in _LINE_GROUPS]
  skipped = [f"skipped {m['skipped_steps']}"] if m.get('skipped_steps') else []  # not in evals
  return ' | '.join([f'step {step}/{total_steps}', *filter(None, groups), *skipped,
                     f"lr {m['learning_rate']:.2e}", f"{m['tokens_per_s']:,.0f} tok/s",
                     f'eta {format_duration(eta_seconds)}'])


def trim_metrics_file(workdir: str, last_step: int):
  """Drops lines logged after `last_step` (steps a resumed run is about to redo), and a last
  line without its newline: a kill cut it short, and its step is redone."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not storage.exists(path):
    return
  lines = [line for line in io.StringIO(storage.read_text(path)) if line.strip()]
  kept = [line for line in lines if line.endswith('\n') and json.loads(line)['step'] <= last_step]
  if len(kept) != len(lines):
    storage.write_text(path, ''.join(kept))


class MetricsWriter:
  """Appends to <workdir>/metrics.jsonl and TensorBoard event files in <workdir>."""

  def __init__(self, workdir: str, enabled: bool = True):
    self._enabled = enabled
    if not enabled:
      return
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    self._path = os.path.join(workdir, 'metrics.jsonl')
    if storage.is_uri(workdir):  # the file so far, which each write extends and rewrites
      self._jsonl = None
      self._lines = [storage.read_text(self._path)] if storage.exists(self._path) else []
    else:
      self._jsonl = open(self._path, 'a')
    self._tensorboard = SummaryWriter(logdir=workdir)

  def write(self, step: int, metrics: dict, human: str | None = None):
    if not self._enabled:
      return
    if human:
      logging.info(human)
    line = json.dumps({'step': step, **metrics}) + '\n'
    if self._jsonl is None:
      self._lines.append(line)
      storage.write_text(self._path, ''.join(self._lines))
    else:
      self._jsonl.write(line)
      self._jsonl.flush()
    for name, value in metrics.items():
      self._tensorboard.add_scalar(name, value, step)
    self._tensorboard.flush()

  def close(self):
    if self._enabled:
      if self._jsonl is not None:
        self._jsonl.close()
      self._tensorboard.close()


def finished(workdir: str, step: int, total: int, already: bool) -> str:
  """What a finished run says, at its end or when run again: its checkpoint and what next."""
  run = shlex.quote(workdir.rstrip('/'))
  state = ('already finished: raise --config.num_train_steps to train on' if already
           else 'finished')
  return (f'the run in {workdir} is {state} (step {step} of {total}); its checkpoint is '
          f'{os.path.join(workdir, "checkpoints", str(step))}. Next, fine-tune it (GLUE MRPC '
          'here; other tasks in docs/finetuning.md):\n'
          '  python -m electra_jax.finetune --config=configs/finetune/glue.py '
          f'--config.task=MRPC --config.data_dir=GLUE_DIR --config.init_from={run} '
          f'--workdir={run}/finetune/MRPC\n'
          'or export it to Hugging Face transformers:\n'
          f'  python -m electra_jax.export --workdir={run} --out={run}/hf')


# ---- a run that stopped learning: a discriminator at chance (docs/training.md) -----------------
# Its loss curve still looks fine, so without a warning the failure shows only in fine-tuning.
# Measured (research/transfer_study/LOG.md): tiny's generator (width 32, temperature 1) held the
# held-out AUC at 0.51-0.54 for 6,750 steps.

# Held-out AUC under 0.5 + this is "at chance": a random scorer's AUC on 2,000 tokens has a
# standard deviation of ~0.02; runs that went on to learn were at 0.71-0.77 by step 500-1,000.
CHANCE_MARGIN = 0.05


def base_rate_entropy(share: float) -> float:
  """Binary cross-entropy (nats per token) of predicting `share` for every token."""
  if not 0.0 < share < 1.0:
    return 0.0
  return -(share * math.log(share) + (1.0 - share) * math.log(1.0 - share))


def discriminator_at_chance(metrics: dict, step: int, config) -> str | None:
  """A warning when the evaluation at `step` shows a discriminator at chance, else None: from
  step max(config.stall_check_after, config.warmup_steps) on, where the run reports an AUC."""
  after = config.stall_check_after
  if 'disc_auc' not in metrics or after <= 0 or step < max(after, config.warmup_steps):
    return None
  auc = metrics['disc_auc']
  if auc >= 0.5 + CHANCE_MARGIN:
    return None
  loss_note = ''
  if 'disc_loss' in metrics and 'replaced_fraction' in metrics:
    loss, share = metrics['disc_loss'], metrics['replaced_fraction']
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
