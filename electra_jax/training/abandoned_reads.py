"""Silence for the reads Orbax abandons when a restore fails, so a damaged checkpoint's one error
line stays the run's last words.

When one array of a checkpoint cannot be read, Orbax raises at once and closes the event loop of
its restore while TensorStore's reads of the other arrays are still under way. Each of those reads
later reports to the closed loop, or is closed unfinished when collected (both through
sys.unraisablehook), and each failed one that nobody awaited is logged by asyncio as 'exception
was never retrieved': tracebacks, at any moment up to and during the interpreter's shutdown. They
say nothing the raised error does not. So exactly these are dropped, from before the restore
(they may come at once) for the rest of the process (they may come late), and a process whose
restore failed waits at exit, while the filters still stand, for the reads to finish. A restore
that succeeds abandons no reads, so nothing else is ever dropped and no exit waits.
"""

import atexit
import gc
import logging
import sys
import time
import traceback

QUIET_S = 0.5  # at exit: the reads are over once none has reported for this long
MAX_WAIT_S = 10.0

_last_report = [0.0]  # time.monotonic() of the latest dropped report


def is_abandoned_read_report(unraisable) -> bool:
  """Whether an unraisable exception comes from a read Orbax abandoned: one reporting to the
  closed event loop, or one closed unfinished when collected."""
  error, tracebacks, seen = unraisable.exc_value, [unraisable.exc_traceback], set()
  while error is not None and id(error) not in seen:  # the error, then what it was raised from
    seen.add(id(error))
    tracebacks.append(error.__traceback__)
    error = error.__cause__ or error.__context__
  frames = [(frame.f_code.co_filename, frame.f_code.co_name)
            for tb in tracebacks for frame, _ in traceback.walk_tb(tb)]
  to_closed_loop = (isinstance(unraisable.exc_value, RuntimeError) and
                    str(unraisable.exc_value) == 'Event loop is closed' and
                    any(name == 'call_soon_threadsafe' for _, name in frames))
  in_orbax_read = any('orbax/checkpoint' in file and 'read' in name for file, name in frames)
  return to_closed_loop or in_orbax_read


def keep_quiet(directory: str):
  """Drops the reports of reads abandoned by a failed restore from `directory` (see above)."""
  previous = sys.unraisablehook
  if not getattr(previous, 'drops_abandoned_reads', False):
    def hook(unraisable):
      if is_abandoned_read_report(unraisable):
        _last_report[0] = time.monotonic()
      else:
        previous(unraisable)
    hook.drops_abandoned_reads = True
    sys.unraisablehook = hook
  asyncio_logger = logging.getLogger('asyncio')
  if not any(getattr(f, 'reads_under', None) == directory for f in asyncio_logger.filters):
    def keep(record) -> bool:
      message = record.getMessage()
      return not ('exception was never retrieved' in message and directory in message)
    keep.reads_under = directory
    asyncio_logger.addFilter(keep)


def settle_before_exit():
  """After a failed restore: the process waits at exit for its abandoned reads to finish.

  At interpreter shutdown the hooks above are gone and whatever reports then is printed, so the
  wait happens first, in an atexit function, until no read has reported for QUIET_S.
  """
  _last_report[0] = time.monotonic()
  if not getattr(settle_before_exit, 'registered', False):
    settle_before_exit.registered = True
    atexit.register(_wait_until_quiet)


def _wait_until_quiet():
  deadline = time.monotonic() + MAX_WAIT_S
  while time.monotonic() < deadline:
    gc.collect()  # reads closed unfinished report when collected: now, while the hook stands
    if time.monotonic() - _last_report[0] > QUIET_S:
      return
    time.sleep(0.05)
