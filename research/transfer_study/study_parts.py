"""A study's parts: programs run once each, pinned to their share of the cores, resumable.

A part is one command (prepare data, pretrain, fine-tune) with its output in DIR/logs/<part>.log.
DIR/state.json records each part that ended well, with its command and the wall time of all its
attempts, so that running a study again skips what has finished. `run_all` runs many parts at
once, each as soon as the parts it needs have ended well.
"""

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from electra_jax.common.errors import UsageError
from electra_jax.training.report import format_duration
# Where parts run: each is `python -m electra_jax.<program>`.
from research.transfer_study import REPO


def load_state(out: str) -> dict:
  path = os.path.join(out, 'state.json')
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


STATE_LOCK = threading.Lock()  # parts running at once record into one state
RAN_A_PART = threading.Event()  # this invocation's wall time counts toward the study's
STOPPING = threading.Event()  # the study got SIGTERM: it starts no part and waits for its running ones
# The parts' processes now running, for SIGTERM to reach. Re-entrant: the handler runs in the main
# thread, which may hold the lock itself (a part run from the main thread, as the data part is).
RUNNING_LOCK = threading.RLock()
RUNNING: set[subprocess.Popen] = set()


def stop_parts_on_sigterm():
  """From now on SIGTERM stops the study the way it stops main on a preempted VM.

  The running parts get it too (main saves where it is and ends), the study waits for them, starts
  nothing more and ends with a line saying how to resume. Left to Python's default, SIGTERM
  would end the study at once and its parts would run on without it, writing checkpoints into
  the study's directory after it had gone (and into a new study's, if the directory was reused).
  """
  def stop(signum, frame):
    STOPPING.set()
    with RUNNING_LOCK:
      for process in RUNNING:
        process.send_signal(signal.SIGTERM)
  signal.signal(signal.SIGTERM, stop)


def save_state(out: str, state: dict):
  path = os.path.join(out, 'state.json')
  with STATE_LOCK:
    with open(path + '.tmp', 'w') as f:
      json.dump(state, f, indent=2)
    os.replace(path + '.tmp', path)


def say(line: str):
  """One console line, whole: parts running at once print from their own threads."""
  sys.stdout.write(line + '\n')
  sys.stdout.flush()


def by_role(command: list[str], roots: dict[str, str]) -> list[str]:
  """`command` as a part's record keeps it: the interpreter, and every path under one of `roots`
  ({role: absolute directory}, e.g. {'$OUT': the study's directory}), named by role, not place.

  A study moved to another directory or machine, or run from another checkout or venv, then
  still finds its finished parts finished; compared with their absolute paths, they would be
  run again (hours of fine-tuning), or a pretraining run refused as trained with other settings.
  A command already in this form is returned as it is, and one recorded with absolute paths
  (before roles) still compares equal where nothing has moved.
  """
  innermost_first = sorted(roots.items(), key=lambda item: -len(item[1]))
  def rewrite(arg: str) -> str:
    for role, root in innermost_first:  # a whole path, or the start of one: after '=' or ','
      arg = re.sub(rf'(?<![^=,]){re.escape(root)}(?=$|[/,])', lambda _: role, arg)
    return arg
  return ['$PYTHON', *map(rewrite, command[1:])] if command else []


def same_command(recorded: list[str] | None, command: list[str], roots: dict[str, str]) -> bool:
  """Whether a part's recorded command is `command`, wherever the study and its inputs now are."""
  return recorded is not None and by_role(recorded, roots) == by_role(command, roots)


def run_part(out: str, state: dict, name: str, command: list[str], what: str,
             cores: set[int] | None = None, unfinished=lambda: None,
             roots: dict[str, str] | None = None):
  """Runs `command` (on `cores`, if given) with its output in DIR/logs/<name>.log; records it
  in state, by_role(command, roots), when it ends well: with exit status 0, and `unfinished()`
  has nothing to say.

  The wall time of every attempt is added up, an interrupted one included, and the attempts
  are counted, so that a report can say when a wall time spans more than one.
  """
  if STOPPING.is_set():
    sys.exit(f'{name}: not started: the study was stopped (SIGTERM); run it again to go on')
  log_path = os.path.join(out, 'logs', f'{name}.log')
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  on = f', cores {",".join(map(str, sorted(cores)))}' if cores else ''
  say(f'{name}: running {what}{on} (log: {log_path})')
  with STATE_LOCK:
    record = state.setdefault(name, {'seconds': 0.0})
    # A state from before attempts were counted knows of one at least.
    record['attempts'] = record.get('attempts', 1 if record['seconds'] else 0) + 1
  RAN_A_PART.set()
  started = time.perf_counter()
  pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
  try:
    with open(log_path, 'a') as log:
      log.write('$ ' + ' '.join(command) + '\n')
      log.flush()
      returncode = run_reachable(command, log, child_env(out), pin)
  finally:
    record['seconds'] = round(record['seconds'] + time.perf_counter() - started, 1)
    save_state(out, state)
  if returncode and STOPPING.is_set():
    sys.exit(f'{name}: stopped (SIGTERM, exit {returncode}); run the study again to redo it')
  if returncode:
    with open(log_path) as f:
      tail = ''.join(f.readlines()[-15:])
    sys.exit(f'{tail}\n{name}: failed (exit {returncode}); the whole log is {log_path}')
  if problem := unfinished():
    sys.exit(f'{name}: {problem}; see {log_path}')
  record['command'] = by_role(command, roots or {})
  save_state(out, state)
  say(f'{name}: done in {format_duration(record["seconds"])}')


def run_reachable(command: list[str], log, env: dict[str, str], pin) -> int:
  """Runs a part's process to its end, where a SIGTERM to the study reaches it; its exit status."""
  process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env,
                             preexec_fn=pin)
  with RUNNING_LOCK:
    RUNNING.add(process)
    if STOPPING.is_set():  # the signal came between its start and here
      process.send_signal(signal.SIGTERM)
  try:
    return process.wait()
  finally:
    with RUNNING_LOCK:
      RUNNING.discard(process)


def child_env(out: str) -> dict[str, str]:
  """The environment of every part, with a compilation cache they share.

  Fine-tuning runs that differ only in where the encoder starts compile the same programs; the
  cache (JAX's persistent one, keyed by the program) lets all but the first skip compiling.
  """
  return {'JAX_COMPILATION_CACHE_DIR': os.path.join(out, 'jax_cache'), **os.environ}


def usable_cores() -> list[int]:
  if hasattr(os, 'sched_getaffinity'):
    return sorted(os.sched_getaffinity(0))
  return list(range(os.cpu_count() or 1))


def jax_backend() -> str:
  """The platform JAX gives a part here ('cpu', 'gpu', 'tpu'), honouring JAX_PLATFORMS.

  Asked of a child process: a parent that started JAX itself would hold the accelerator that its
  parts need.
  """
  probe = subprocess.run([sys.executable, '-c', 'import jax; print(jax.default_backend())'],
                         capture_output=True, text=True)
  lines = probe.stdout.split()
  if probe.returncode or not lines:
    last = (probe.stderr.strip().splitlines() or ['no output'])[-1]
    raise UsageError(f'JAX could not start to say which platform the parts get ({last}); check '
                     'JAX_PLATFORMS and the jax install, or pass --jobs=N to skip asking')
  return lines[-1]


def default_jobs(backend: str, cores: int) -> int:
  """Parts at once when the user names no number: one per CPU core (at most 8) on a CPU host.

  On a GPU or TPU one: a process takes the whole accelerator (a TPU's chips open in one process
  only; JAX preallocates most of a GPU's memory), so parts run one after another.
  """
  return min(cores, 8) if backend == 'cpu' else 1


def run_all(parts: dict, jobs: int):
  """Runs parts, {name: (part, names of the parts it needs)}, `jobs` at a time.

  Each part(cores) gets its own share of the cores: two programs on the same cores slow each
  other more than they gain, while pinned each runs at the speed of its share. A part starts
  once everything it needs has ended well, the first such in the order given. The first failure
  stops what has not started and is raised when the running parts have ended.
  """
  cores = usable_cores()
  if not hasattr(os, 'sched_setaffinity'):
    jobs = 1  # nothing to pin with: one part at a time, on every core
  jobs = max(1, min(jobs, len(parts), len(cores)))
  shares = [set(cores[i::jobs]) for i in range(jobs)] if jobs > 1 else [None]
  pending, done, running, failure = list(parts), set(), {}, None
  with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    while running or (pending and failure is None):
      ready = [name for name in pending if set(parts[name][1]) <= done]
      while shares and ready and failure is None:
        name = ready.pop(0)
        pending.remove(name)
        share = shares.pop(0)
        running[pool.submit(parts[name][0], share)] = name, share
      if not running:  # what is left needs a part that is not in the study
        raise ValueError(f'parts {pending} need parts that never run: '
                         f'{sorted(set().union(*(parts[n][1] for n in pending)) - set(parts))}')
      ended, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
      for future in ended:
        name, share = running.pop(future)
        shares.append(share)
        if future.exception() is None:
          done.add(name)
        elif failure is None:
          failure = future.exception()
  if failure is not None:
    raise failure


def committed_steps(workdir: str) -> list[int]:
  """Steps of the checkpoints Orbax has committed (an unfinished save has a temporary name)."""
  directory = os.path.join(workdir, 'checkpoints')
  names = os.listdir(directory) if os.path.isdir(directory) else []
  return sorted(int(n) for n in names if n.isdigit())


def set_aside(name: str, out: str, why: str, suffix: str):
  """Renames the part's folder `out` to out.<suffix> (or .<suffix>.1, ...), keeping its files,
  and says `why` it could not be continued."""
  aside, n = f'{out}.{suffix}', 1
  while os.path.exists(aside):
    aside, n = f'{out}.{suffix}.{n}', n + 1
  os.rename(out, aside)
  say(f'{name}: {out} {why}; it is now {aside}')


def skip(state: dict, name: str, note: str = ''):
  seconds = state[name]['seconds']
  say(f'{name}: finished before ({format_duration(seconds)}{note}), skipped')
