"""Where metrics go: one human line to the log, one JSON object to metrics.jsonl, TensorBoard.

Only process 0 writes; other processes get a writer that does nothing. In a workdir at a URI
(gs://), which cannot be appended to, metrics.jsonl is rewritten whole at each write, and
tensorboardX writes the events through its own gs:// writer (google-cloud-storage), which also
uploads the whole file at each flush.
"""

import io
import json
import os

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
  skipped = [f"skipped {m['skipped_steps']}"] if m.get('skipped_steps') else []
  return ' | '.join([f'step {step}/{total_steps}', *filter(None, groups), *skipped,
                     f"lr {m['learning_rate']:.2e}", f"{m['tokens_per_s']:,.0f} tok/s",
                     f'eta {format_duration(eta_seconds)}'])


def trim_metrics_file(workdir: str, last_step: int):
  """Drops lines logged after `last_step` (steps a resumed run is about to redo).

  Every write ends its line with a newline, so a last line without one is what a kill cut short:
  it is dropped too (its step is redone).
  """
  path = os.path.join(workdir, 'metrics.jsonl')
  if not storage.exists(path):
    return
  lines = [line for line in io.StringIO(storage.read_text(path)) if line.strip()]
  complete = [line for line in lines if line.endswith('\n')]
  kept = [line for line in complete if json.loads(line)['step'] <= last_step]
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
