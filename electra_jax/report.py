"""Where metrics go: one human line to the log, one JSON object to metrics.jsonl, TensorBoard.

Only process 0 writes; other processes get a writer that does nothing.
"""

import json
import os

from absl import logging


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  return f'{hours}h{rest // 60:02d}m' if hours else f'{rest // 60}m{rest % 60:02d}s'


def human_line(step: int, total_steps: int, metrics: dict, eta_seconds: float) -> str:
  m = metrics
  return (f"step {step}/{total_steps} | loss {m['loss']:.4f} | "
          f"mlm {m['mlm_loss']:.4f} acc {m['mlm_accuracy']:.3f} | "
          f"disc {m['disc_loss']:.4f} acc {m['disc_accuracy']:.3f} auc {m['disc_auc']:.3f} | "
          f"replaced {m['replaced_fraction']:.3f} | lr {m['learning_rate']:.2e} | "
          f"{m['tokens_per_s']:,.0f} tok/s | eta {format_duration(eta_seconds)}")


def trim_metrics_file(workdir: str, last_step: int):
  """Drops lines logged after `last_step` (steps a resumed run is about to redo)."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  kept = [line for line in lines if json.loads(line)['step'] <= last_step]
  if len(kept) != len(lines):
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
      f.writelines(kept)
    os.replace(tmp, path)


class MetricsWriter:
  """Appends to <workdir>/metrics.jsonl and TensorBoard event files in <workdir>."""

  def __init__(self, workdir: str, enabled: bool = True):
    self._enabled = enabled
    if not enabled:
      return
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    self._jsonl = open(os.path.join(workdir, 'metrics.jsonl'), 'a')
    self._tensorboard = SummaryWriter(logdir=workdir)

  def write(self, step: int, metrics: dict, human: str | None = None):
    if not self._enabled:
      return
    if human:
      logging.info(human)
    self._jsonl.write(json.dumps({'step': step, **metrics}) + '\n')
    self._jsonl.flush()
    for name, value in metrics.items():
      self._tensorboard.add_scalar(name, value, step)
    self._tensorboard.flush()

  def close(self):
    if self._enabled:
      self._jsonl.close()
      self._tensorboard.close()
