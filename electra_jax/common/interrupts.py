"""SIGTERM and Ctrl-C while a command trains: save, stop, and say so; a second Ctrl-C stops at once.
Where there is nothing to save (`stops_at_once`), the first signal stops at once.

A training loop asks `requested()` after each step; once true it saves that step and returns (or
raises Stopped), and the command exits 128 + the signal, so a scheduler reads the run as
unfinished. Python runs handlers only between bytecodes of the main thread, which may sit for
minutes in one XLA call, so a thread reading signal.set_wakeup_fd's pipe acts on each signal.
"""

import contextlib
import os
import signal
import sys
import threading

from absl import logging

NAMES = {signal.SIGINT: 'Ctrl-C (SIGINT)', signal.SIGTERM: 'SIGTERM'}
SIGNALS = tuple(NAMES)


class Stop:
  """The signals caught in one `catching()` block."""

  def __init__(self):
    self.first = None  # the signal that asked for the stop
    self.event = threading.Event()
    self.at_once = False  # see stops_at_once

  def requested(self) -> bool:
    return self.event.is_set()

  def cause(self) -> str:
    """What asked the run to stop, for its last line: 'Ctrl-C (SIGINT)', 'SIGTERM', or a
    preemption notice (several processes, where Orbax handles SIGTERM)."""
    return NAMES[self.first] if self.requested() else 'a preemption notice'

  def exit_status(self) -> int:
    """The exit status of a run stopped before its end: 128 + the signal (130 for Ctrl-C); 143,
    as for SIGTERM, where the stop came through Orbax's preemption sync."""
    return 128 + (self.first if self.requested() else signal.SIGTERM)

  def handle(self, signum: int):
    if self.requested():
      if signum == signal.SIGINT:
        sys.stderr.write('electra_jax: stopped at once by a second Ctrl-C, without saving; run '
                         'the same command again to resume from the last checkpoint\n')
        sys.stderr.flush()
        os._exit(128 + signal.SIGINT)  # pylint: disable=protected-access
      return
    self.first = signum
    self.event.set()
    if self.at_once:
      sys.stderr.write(f'electra_jax: stopped at once by {NAMES[signum]}: what was trained is '
                       'saved; run the same command again to finish\n')
      sys.stderr.flush()
      os._exit(128 + signum)  # pylint: disable=protected-access
    logging.warning('%s: saving a checkpoint at the end of this step, then stopping%s',
                    NAMES[signum], '; Ctrl-C again stops at once, without saving'
                    if signum == signal.SIGINT else '')


class Stopped(Exception):
  """Raised by a loop that saved and stopped as a signal asked, to unwind the rest of a command
  (fine-tuning's later seeds and results); cli.run exits with `status`."""

  def __init__(self, status: int):
    super().__init__(f'stopped (exit status {status})')
    self.status = status


_NONE = Stop()  # outside any catching() block: never requested
_active = _NONE


def requested() -> bool:
  """Whether a SIGTERM or Ctrl-C has come inside the current `catching()` block."""
  return _active.requested()


def cause() -> str:
  return _active.cause()


def exit_status() -> int:
  return _active.exit_status()


def stops_at_once(at_once: bool):
  """Whether a signal from now on ends the process at once, for work with nothing to save that a
  rerun repeats (fine-tuning's predictions, once a seed's training is saved), instead of asking
  a training loop to save and stop."""
  _active.at_once = at_once


@contextlib.contextmanager
def catching(signals=SIGNALS):
  """Within the block, `signals` ask for a stop instead of ending the process (see above); yields
  the block's Stop, which says after the block what came.

  Outside the main thread, or with `signals` empty, nothing is caught and requested() stays
  false. The handlers and the wakeup pipe in place before are restored after the block.
  """
  global _active
  catcher = Stop()
  if not signals or threading.current_thread() is not threading.main_thread():
    yield catcher
    return
  read_end, write_end = os.pipe()
  os.set_blocking(write_end, False)  # set_wakeup_fd requires it

  def watch():
    while (byte := os.read(read_end, 1)) and byte != b'\0':
      if byte[0] in signals:
        catcher.handle(byte[0])

  previous = {s: signal.signal(s, lambda signum, frame: None) for s in signals}
  previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
  watcher = threading.Thread(target=watch, name='electra_jax signals', daemon=True)
  watcher.start()
  _active = catcher
  try:
    yield catcher
  finally:
    _active = _NONE
    signal.set_wakeup_fd(previous_fd)
    for s, handler in previous.items():
      signal.signal(s, handler)
    os.write(write_end, b'\0')  # ends the watcher
    watcher.join()
    os.close(read_end)
    os.close(write_end)
