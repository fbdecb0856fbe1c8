"""One GPU, one command: speed against transformers, ELECTRA-Small pretrained, fine-tuned, exported.

  python benchmarks/accelerator_run.py pack --out=.accelerator     # here, once, before the call
  python benchmarks/accelerator_run.py --out=DIR [--minutes=9.5]   # there, on the GPU
  python benchmarks/accelerator_run.py pack --smoke --out=P && \
    python benchmarks/accelerator_run.py --smoke --pack=P --out=DIR   # the same path on a CPU

The device call (the `run` tool; it lends one H200 for 15 minutes, start-up included, and stops
any one command at 600 s, so the run is sized to 9.5 minutes):

  run(command="PYTHONUNBUFFERED=1 python3 benchmarks/accelerator_run.py --out=$OUT --minutes=9.5",
      carry=[".accelerator"], timeout_s=600)

then give_back. What comes back, in --out (6 files of the 8 allowed, each under 16 MiB):
summary.json (every figure below), metrics.jsonl (the pretraining run's, held-out
eval_mlm_accuracy and eval_disc_auc included), plots.png, run.log, and the discriminator's
Hugging Face export as discriminator-bf16.tar.00, .01: `cat discriminator-bf16.tar.* | tar x`
gives a directory that `ElectraForPreTraining.from_pretrained` reads. Its weights are stored in
bfloat16 (the float32 weights rounded: 27 MB where float32 takes 54 MB; the step computes in
bfloat16 anyway); summary.json's export.check gives the largest logit change that rounding made
(0.04 against a mean |logit| of 4, on a 2-step run here).

`pack` (here) writes the ignored folder .accelerator/ (57.4 MiB; 60.4 with the checkout, of the
64 MiB a call takes), which `carry` takes along, since only the checkout travels (../shared
does not). It took 16 minutes on a busy 2-core machine, 8 of them training the vocabulary:
- text-eval.tar.xz, text-NN.tar.xz: the 347 files of ../shared/data/pretraining-text and
  pretraining-text-extra (207 MB: 245 books, 102 Wikipedia shards) byte for byte, as solid xz
  chunks (28% of the text's size); pack.json has every file's sha256, checked after unpacking.
  Four files (the last two shards and books of pretraining-text-extra) are the held-out set:
  549k tokens against 42.7M for training, once prepared. Chunks are dropped from the end if the
  pack and the checkout would pass 63 MiB.
- vocab.model: a 30,522-piece uncased sentencepiece vocabulary (the paper's size), trained here
  by electra_jax on 1M lines of the training files, so the device only tokenizes.
- glue.tar.xz: SST-2 and MRPC's train.tsv and dev.tsv.
- wheels/: ml_collections and tensorboardX, which the device lacks (its other needs from
  requirements.txt are installed there; tensorflow-datasets and array-record serve TFDS
  sources only). The run installs them with `python3 -m pip install --no-index --no-deps
  --target WORK/site wheels/*.whl` where they are missing, and puts WORK/site on PYTHONPATH.

The run, every phase under a deadline (a phase that fails or runs out of time is logged in
summary.json's `phases` and the next one goes on; summary.json is rewritten after each):
1. setup: wheels, the text unpacked and checked, GLUE; `python -m electra_jax.prepare`
   tokenizes and packs the corpus in the background on half the cores (JAX on the CPU).
2. speed (a): `python -m electra_jax.benchmark` on small (at the pretraining batch, 512 x 128)
   and base (256 x 128) in bfloat16, fused attention on (`--config.attention=auto` with
   `--config.model.attention_dropout_rate=0`: cuDNN's flash attention) and off (the paper's
   attention dropout 0.1: einsum); tokens/s, MFU and peak memory. The four programs are first
   compiled at once into JAX's compilation cache (timings of that pass are thrown away), so
   each timed process reads its program back instead of compiling it alone. Then
   benchmarks/hf_peer.py times transformers' step of the same networks on the same GPU in bf16
   autocast, without and then with attention dropout, and each of ours gets the ratio to the
   peer of equal attention dropout (benchmarks/compare.py's ratio: median step times).
3. pretraining (b): configs/small.py (the paper's network) on the packed text for the minutes
   left after (a) and the reserve of (c), the step count planned from (a)'s measured step so
   that the linear decay ends when the time does; SIGTERM at the deadline saves a checkpoint
   as on preemption. Batch 512 x 128: 65k tokens a step, each layer's matrix products 34 GFLOP,
   enough that the GPU is not waiting on kernel launches (`mini` at 128 x 128 was), while a
   run of a few minutes keeps thousands of updates (1,024 would halve them).
   Learning rate 1e-3: the paper's 5e-4 at batch 128 scaled by the square root of the batch
   ratio (sqrt(512/128) = 2), the scaling for Adam (Malladi et al. 2022, "On the SDEs and
   scaling rules for adaptive gradient algorithms"; linear scaling, 2e-3, is the rate that
   collapsed `tiny`'s discriminator); 1e-3 at 128 trained `mini` well on an H200. Warmup 5% of
   the steps, then linear decay to zero. Attention dropout 0 (the fused path, a listed
   difference from the paper), unless the fused benchmark failed.
4. fine-tuning (c): `python -m electra_jax.finetune` on SST-2 (20,000 of its training
   examples drawn at random, to fit the budget; --sst2_examples=0 for all 67,349) and MRPC
   (all), seed 0, the paper's recipe, both at once on the GPU; meanwhile
   `python -m electra_jax.export` on the CPU, the weights rounded to bfloat16, reloaded with
   transformers and compared.

The budget of --minutes=9.5 (570 s): the compile pass stops at 150 s; (a) runs nothing past
240 s (keeping 180 s for (b)), in the order the issue needs them (small fused, base fused, the
two peers without dropout, the einsum runs, the peers with dropout); (b) ends at 420 s; (c) at
550 s; then the files. By the estimates made here (nothing was timed on a GPU yet), (b) gets about
3 minutes, a minute of it compiling; --bench=fused gives it the einsum runs' minute too.

--smoke runs the same path on this CPU at tiny sizes (a tiny network for both `small` and
`base`, float32, a few steps, 300 examples a task, one epoch) in a few minutes, writing the same
files; tests/test_accelerator_run.py runs it.
"""

import argparse
import concurrent.futures
import datetime
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import math
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
import types

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'benchmarks'))
# benchmarks/compare.py's commands and ratio, reused.
import compare  # pylint: disable=g-import-not-at-top,wrong-import-position

SHARED_DATA = REPO.parent / 'shared' / 'data'
CORPORA = ('pretraining-text', 'pretraining-text-extra')
GLUE_TASKS = ('SST-2', 'MRPC')
PACK_FORMAT = 1
MiB = 1 << 20
TRAVEL_LIMIT = 64 * MiB          # what the device call takes along: checkout + carried folder
TRAVEL_MARGIN = 1 * MiB          # for files the checkout gains before the call
PART_BYTES = 15 * MiB            # each file that comes back must stay under 16 MiB
WHEELS = ('ml_collections', 'tensorboardX')  # in requirements.txt, not on the device
PAPER_BATCH, PAPER_LR = 128, 5e-4
PAPER_6_25_STEPS = 62_500        # the paper's ELECTRA-Small at 6.25% of its 1M steps (GLUE 74.1)
ISSUE_6_25_FLOPS = 8.8e16        # issue 69's figure for that point
# (a): key -> (ours or the transformers peer, network, attention variant or peer dropout)
BENCHMARKS = {
    'small/fused': ('ours', 'small', 'fused'), 'base/fused': ('ours', 'base', 'fused'),
    'base/transformers': ('peer', 'base', 0.0), 'small/transformers': ('peer', 'small', 0.0),
    'base/einsum': ('ours', 'base', 'einsum'), 'small/einsum': ('ours', 'small', 'einsum'),
    'base/transformers-dropout': ('peer', 'base', 0.1),
    'small/transformers-dropout': ('peer', 'small', 0.1)}
BENCH_PRESETS = {
    'all': list(BENCHMARKS),
    'fused': ['small/fused', 'base/fused', 'base/transformers', 'small/transformers'],
    'none': ['small/fused'],
    # the smoke: each network, and a peer, on two cores
    'smoke': ['small/fused', 'small/transformers', 'base/fused']}
SUMMARY_KEYS = ('smoke', 'started', 'device', 'budget', 'phases', 'benchmarks', 'ratios',
                'pretraining', 'finetuning', 'export', 'files', 'errors')


# ---------------------------------------------------------------------------------------------
# pack: here, before the device call


def corpus_files(data: Path) -> list[tuple[str, Path]]:
  """(path relative to the data folder, file) of every text file of both corpora, sorted."""
  found = []
  for corpus in CORPORA:
    for kind in ('gutenberg', 'enwiki'):
      for path in sorted((data / corpus / kind).glob('*.txt')):
        found.append((f'{corpus}/{kind}/{path.name}', path))
  if not found:
    raise SystemExit(f'no text under {data}/{{{",".join(CORPORA)}}}/{{gutenberg,enwiki}}')
  return found


def held_out(files: list[tuple[str, Path]], smoke: bool) -> tuple[list, list]:
  """(train, eval): the last two shards and books of pretraining-text-extra are held out; the
  smoke keeps the two smallest books and the smallest shard to train and the third book."""
  if smoke:
    books = sorted((f for f in files if '/gutenberg/' in f[0]), key=lambda f: f[1].stat().st_size)
    shards = sorted((f for f in files if '/enwiki/' in f[0]), key=lambda f: f[1].stat().st_size)
    return [books[0], books[1], shards[0]], [books[2]]
  held = set()
  for kind in ('gutenberg', 'enwiki'):
    names = [f[0] for f in files if f[0].startswith(f'{CORPORA[-1]}/{kind}/')]
    held.update(names[-2:])
  return [f for f in files if f[0] not in held], [f for f in files if f[0] in held]


def sha256_of(path: Path) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    while chunk := f.read(1 << 22):
      digest.update(chunk)
  return digest.hexdigest()


def checkout_bytes() -> int:
  """Bytes of what the device call sends besides the carried folder: tracked files and untracked
  ones git does not ignore."""
  try:
    listed = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '-z'], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b'\0')
  except (OSError, subprocess.CalledProcessError):
    return 0
  return sum((REPO / os.fsdecode(p)).stat().st_size for p in listed
             if p and (REPO / os.fsdecode(p)).is_file())


def compress_chunk(path: str, members: list[tuple[str, str]]) -> int:
  """Writes members (name in the archive, file) as one solid tar.xz; returns its size."""
  with tarfile.open(path, 'w:xz', preset=9) as archive:
    for name, source in members:
      archive.add(source, arcname=name, recursive=False)
  return os.path.getsize(path)


def chunk_plan(files: list[tuple[str, Path]], count: int) -> list[list[tuple[str, Path]]]:
  """`count` chunks of about equal raw size, books and shards mixed (order by the hash of the
  name), so that a chunk dropped for room drops a bit of each."""
  ordered = sorted(files, key=lambda f: hashlib.sha256(f[0].encode()).hexdigest())
  total = sum(f[1].stat().st_size for f in ordered)
  chunks, current, size = [], [], 0
  for name, path in ordered:
    current.append((name, path))
    size += path.stat().st_size
    if size >= total / count and len(chunks) < count - 1:
      chunks.append(current)
      current, size = [], 0
  if current:
    chunks.append(current)
  return chunks


def download_wheels(folder: Path) -> list[str]:
  """The WHEELS at this environment's versions, pure-Python, for the device's Python 3.12."""
  folder.mkdir(parents=True, exist_ok=True)
  pins = [f'{name}=={importlib.metadata.version(name)}' for name in WHEELS]
  subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--only-binary=:all:',
                  '--python-version', '3.12', '--implementation', 'cp', '--platform',
                  'manylinux2014_x86_64', '-d', str(folder), *pins], check=True)
  return sorted(p.name for p in folder.glob('*.whl'))


def pack_glue(glue: Path, path: Path, smoke: bool) -> dict:
  """SST-2 and MRPC's train.tsv and dev.tsv as one tar.xz (the smoke: 300 and 200 rows)."""
  rows = {}
  with tarfile.open(path, 'w:xz', preset=9) as archive:
    for task in GLUE_TASKS:
      for split, limit in (('train', 300), ('dev', 200)):
        data = (glue / task / f'{split}.tsv').read_bytes()
        if smoke:  # the header and the first rows
          data = b''.join(data.splitlines(keepends=True)[:limit + 1])
        info = tarfile.TarInfo(f'{task}/{split}.tsv')
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
        rows[f'{task}/{split}'] = data.count(b'\n') - 1
  return {'file': path.name, 'rows': rows}


def train_pack_vocab(train: list[tuple[str, Path]], out: Path, vocab_size: int,
                     sentences: int) -> dict:
  """The run's sentencepiece vocabulary, trained by electra_jax on a sample of the training
  files (uncased, as ELECTRA's)."""
  from electra_jax.data import preparation, sources  # pylint: disable=g-import-not-at-top
  if any(',' in str(p) for _, p in train):
    raise SystemExit('a corpus path holds a comma, which data.sources cannot name')
  specs = sources.parse_sources(','.join(str(p) for _, p in train))
  start = time.perf_counter()
  vocab = preparation.train_vocab(specs, vocab_size, str(out / 'vocab'), max_sentences=sentences,
                                  seed=0, lowercase=True)
  (out / 'vocab.vocab').unlink(missing_ok=True)  # the piece listing: not needed there
  return {'file': 'vocab.model', 'vocab_size': vocab.size, 'lowercase': True,
          'sample_sentences': sentences, 'seconds': round(time.perf_counter() - start, 1),
          'sha256': sha256_of(out / 'vocab.model')}


def pack(args) -> dict:
  out = Path(args.out).resolve()
  data = Path(args.data)
  out.mkdir(parents=True, exist_ok=True)
  for old in [*out.glob('text-*.tar.xz'), out / 'glue.tar.xz', out / 'vocab.model',
              out / 'pack.json']:
    old.unlink(missing_ok=True)
  shutil.rmtree(out / 'wheels', ignore_errors=True)
  start = time.perf_counter()
  train, evaluation = held_out(corpus_files(data), args.smoke)
  manifest = {'format': PACK_FORMAT, 'smoke': args.smoke,
              'created': datetime.datetime.now(datetime.timezone.utc).isoformat(),
              'source': str(data)}
  manifest['wheels'] = download_wheels(out / 'wheels') if args.wheels else []
  print(f'pack: wheels {manifest["wheels"]}', flush=True)
  vocab_size = args.vocab_size or (1024 if args.smoke else 30522)
  sentences = args.vocab_sentences or (20_000 if args.smoke else 1_000_000)
  manifest['vocab'] = train_pack_vocab(train, out, vocab_size, sentences)
  print(f'pack: vocabulary {manifest["vocab"]}', flush=True)
  manifest['glue'] = pack_glue(data / 'glue', out / 'glue.tar.xz', args.smoke)

  chunks = [('eval', evaluation)] + [
      ('train', c) for c in chunk_plan(train, 1 if args.smoke else args.chunks)]
  names = ['text-eval.tar.xz'] + [f'text-{i:02d}.tar.xz' for i in range(len(chunks) - 1)]
  workers = max(1, min(len(chunks), os.cpu_count() or 1))
  with concurrent.futures.ProcessPoolExecutor(workers) as pool:
    sizes = list(pool.map(compress_chunk, [str(out / n) for n in names],
                          [[(m, str(p)) for m, p in c] for _, c in chunks]))
  entries = []
  for name, (split, members), size in zip(names, chunks, sizes):
    entries.append({'file': name, 'split': split, 'bytes': size,
                    'raw_bytes': sum(p.stat().st_size for _, p in members),
                    'members': [{'path': m, 'bytes': p.stat().st_size, 'sha256': sha256_of(p)}
                                for m, p in members]})
    print(f'pack: {name}: {len(members)} files, {entries[-1]["raw_bytes"]:,} -> {size:,} bytes',
          flush=True)

  repo = checkout_bytes()
  budget = (int(args.max_mib * MiB) if args.max_mib else TRAVEL_LIMIT - TRAVEL_MARGIN - repo)
  fixed = sum(p.stat().st_size for p in out.rglob('*') if p.is_file()
              and not p.name.startswith('text-'))
  dropped = []
  while entries and fixed + sum(e['bytes'] for e in entries) > budget - 8192:  # pack.json
    if len(entries) == 1 or entries[-1]['split'] == 'eval':
      raise SystemExit(f'the pack cannot fit {budget:,} bytes even without training text')
    gone = entries.pop()
    (out / gone['file']).unlink()
    dropped.append(gone)
  manifest['text'] = entries
  manifest['dropped'] = [{'file': e['file'], 'raw_bytes': e['raw_bytes'],
                          'paths': [m['path'] for m in e['members']]} for e in dropped]
  manifest['counts'] = {
      'train_files': sum(len(e['members']) for e in entries if e['split'] == 'train'),
      'eval_files': sum(len(e['members']) for e in entries if e['split'] == 'eval'),
      'train_raw_bytes': sum(e['raw_bytes'] for e in entries if e['split'] == 'train'),
      'eval_raw_bytes': sum(e['raw_bytes'] for e in entries if e['split'] == 'eval')}
  manifest['budget'] = {'travel_limit_bytes': TRAVEL_LIMIT, 'checkout_bytes': repo,
                        'pack_budget_bytes': budget}
  (out / 'pack.json').write_text(json.dumps(manifest, indent=1) + '\n')
  manifest['budget']['pack_bytes'] = folder_bytes(out)
  manifest['budget']['travel_bytes'] = manifest['budget']['pack_bytes'] + repo
  manifest['seconds'] = round(time.perf_counter() - start, 1)
  (out / 'pack.json').write_text(json.dumps(manifest, indent=1) + '\n')
  print(f'pack: {out}: {manifest["budget"]["pack_bytes"] / MiB:.1f} MiB, with the checkout '
        f'{manifest["budget"]["travel_bytes"] / MiB:.1f} MiB of {TRAVEL_LIMIT / MiB:.0f}; '
        f'{len(dropped)} chunk(s) dropped; {manifest["seconds"]} s', flush=True)
  return manifest


def folder_bytes(folder: Path) -> int:
  return sum(p.stat().st_size for p in Path(folder).rglob('*') if p.is_file())


# ---------------------------------------------------------------------------------------------
# the run: there (or --smoke here)


class Clock:
  """Seconds since the run began, against its total budget."""

  def __init__(self, total_s: float):
    self.start, self.total = time.monotonic(), total_s

  def now(self) -> float:
    return time.monotonic() - self.start

  def left(self) -> float:
    return self.total - self.now()


class Child:
  """A command in its own process group, its output in a log file, stopped at a deadline."""

  def __init__(self, run, name: str, command: list[str], env: dict, *, nice: int = 0):
    self.run, self.name, self.command = run, name, [str(c) for c in command]
    self.log_path = run.work / 'logs' / f'{name}.log'
    self.log_path.parent.mkdir(parents=True, exist_ok=True)
    self.started = time.monotonic()
    self.timed_out, self.returncode, self.seconds = False, None, None
    run.log(f'{name}: start: {" ".join(self.command)}')
    with open(self.log_path, 'w') as log:
      self.process = subprocess.Popen(
          self.command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
          start_new_session=True)
    if nice:  # before it starts its workers, which inherit it
      os.setpriority(os.PRIO_PROCESS, self.process.pid, nice)
    self.finished = None
    threading.Thread(target=self._reap, daemon=True).start()

  def _reap(self):
    self.process.wait()
    self.finished = time.monotonic()  # when it ended, even if nobody was waiting then

  def wait(self, deadline: float, grace: float = 10.0) -> int:
    """Waits until the clock reaches `deadline`; then SIGTERM, and SIGKILL `grace` s later."""
    try:
      self.returncode = self.process.wait(timeout=max(0.0, deadline - self.run.clock.now()))
    except subprocess.TimeoutExpired:
      self.timed_out = True
      self.run.log(f'{self.name}: deadline reached; stopping it (SIGTERM)')
      self._signal(signal.SIGTERM)
      try:
        self.returncode = self.process.wait(timeout=grace)
      except subprocess.TimeoutExpired:
        self._signal(signal.SIGKILL)
        self.returncode = self.process.wait()
    self.seconds = round((self.finished or time.monotonic()) - self.started, 1)
    self.run.log(f'{self.name}: exit {self.returncode} after {self.seconds} s'
                 + (' (stopped at its deadline)' if self.timed_out else ''))
    return self.returncode

  def _signal(self, sig):
    try:
      os.killpg(self.process.pid, sig)  # its workers (prepare's processes) too
    except ProcessLookupError:
      pass

  def output(self) -> str:
    return self.log_path.read_text(errors='replace')

  def records(self) -> list[dict]:
    """The JSON lines it printed."""
    found = []
    for line in self.output().splitlines():
      if line.startswith('{'):
        try:
          found.append(json.loads(line))
        except json.JSONDecodeError:
          pass
    return found

  def failure(self) -> str | None:
    if self.returncode == 0:
      return None
    tail = '\n'.join(self.output().splitlines()[-15:])
    why = 'stopped at its deadline' if self.timed_out else f'exit status {self.returncode}'
    return f'{self.name}: {why}\n{tail}'[-3000:]


CONFIG_FILE = '''"""Written by benchmarks/accelerator_run.py: {what}."""

import json

from electra_jax.common.config import load_config_file

OVERRIDES = json.loads({overrides!r})


def get_config():
  c = load_config_file({base!r})
  for path, value in OVERRIDES.items():
    *parents, leaf = path.split('.')
    node = c
    for name in parents:
      node = node[name]
    node[leaf] = value
  return c
'''


class Run:
  """The accelerator run: its settings, clock, log, child processes and summary."""

  def __init__(self, args):
    self.args, self.smoke = args, args.smoke
    self.clock = Clock(args.minutes * 60)
    self.out = Path(args.out).resolve()
    self.out.mkdir(parents=True, exist_ok=True)
    self.work = Path(args.work or tempfile.mkdtemp(prefix='accelerator_run-')).resolve()
    self.work.mkdir(parents=True, exist_ok=True)
    self.pack = Path(args.pack or REPO / ('.accelerator-smoke' if self.smoke else '.accelerator'))
    self.pack = self.pack.resolve()
    self.log_file = open(self.work / 'accelerator_run.log', 'a')
    self.summary = {key: {} for key in SUMMARY_KEYS}
    self.summary.update(smoke=self.smoke, errors=[], files=[],
                        started=datetime.datetime.now(datetime.timezone.utc).isoformat())
    self.summary['budget'] = {'minutes': args.minutes, 'work': str(self.work)}
    self.site = None
    self.pretrain_dir = self.work / 'pretrain'
    self.settings = self.smoke_settings() if self.smoke else self.gpu_settings()

  # -- settings ---------------------------------------------------------------------------

  def gpu_settings(self) -> dict:
    batch = self.args.pretrain_batch or 512
    return {
        'dtype': 'bfloat16', 'steps': 20, 'warmup': 3, 'peer_device': [],
        'networks': {'small': ('configs/small.py', {'batch_size': batch, 'max_seq_length': 128}),
                     'base': ('configs/base.py', {'batch_size': 256, 'max_seq_length': 128})},
        'pretrain_base': 'configs/small.py', 'pretrain_batch': batch,
        'max_pretrain_steps': self.args.max_pretrain_steps or None,
        'finetune': {'max_seq_length': 128, 'dtype': 'float32'},
        'reserve': {'finetune': self.args.finetune_seconds or 130, 'final': 20,
                    'min_pretrain': 180, 'warm': 150},
        'sst2_examples': 20_000 if self.args.sst2_examples is None else self.args.sst2_examples,
    }

  def smoke_settings(self) -> dict:
    tiny = {'max_seq_length': 64, 'batch_size': 8, 'model.embedding_size': 32,
            'model.num_heads': 2, 'model.num_layers': 1}
    return {
        'dtype': 'float32', 'steps': 2, 'warmup': 1,
        'peer_device': ['--device=cpu', '--peak_matmul_size=256'],
        'networks': {'small': ('configs/tiny.py', {**tiny, 'model.hidden_size': 64,
                                                   'model.intermediate_size': 128}),
                     'base': ('configs/tiny.py', {**tiny, 'model.hidden_size': 96,
                                                  'model.intermediate_size': 192})},
        'pretrain_base': 'configs/tiny.py', 'pretrain_batch': 8,
        'max_pretrain_steps': self.args.max_pretrain_steps or 9,
        'finetune': {'max_seq_length': 64, 'dtype': 'float32', 'num_epochs': 1.0},
        'reserve': {'finetune': self.args.finetune_seconds or 150, 'final': 20,
                    'min_pretrain': 60, 'warm': 120},
        'sst2_examples': 0 if self.args.sst2_examples is None else self.args.sst2_examples,
    }

  # -- plumbing -----------------------------------------------------------------------------

  def log(self, message: str):
    line = f'[{self.clock.now():6.1f}s] {message}'
    print(line, flush=True)
    self.log_file.write(line + '\n')
    self.log_file.flush()

  def env(self, **extra) -> dict:
    env = dict(os.environ)
    paths = ([str(self.site)] if self.site else []) + [str(REPO)]
    if env.get('PYTHONPATH'):
      paths.append(env['PYTHONPATH'])
    env['PYTHONPATH'] = os.pathsep.join(paths)
    env['PYTHONUNBUFFERED'] = '1'
    env.setdefault('JAX_COMPILATION_CACHE_DIR', str(self.work / 'jax_cache'))
    if self.smoke:
      env.update(JAX_PLATFORMS='cpu', JAX_NUM_CPU_DEVICES='1')
    env.update({k: str(v) for k, v in extra.items()})
    return env

  def phase(self, name: str, function, *args):
    """Runs one phase; what it raises is logged as its failure, and the run goes on."""
    started = self.clock.now()
    self.log(f'== {name} ({self.clock.left():.0f} s left)')
    record = {'start_s': round(started, 1)}
    try:
      result = function(*args)
      record['status'] = 'ok'
    except Exception as e:  # pylint: disable=broad-except  (a failed phase is a result)
      result = None
      record['status'] = 'failed'
      record['error'] = f'{type(e).__name__}: {e}'[:3000]
      self.summary['errors'].append({'phase': name, 'error': record['error'],
                                     'traceback_tail': traceback.format_exc()[-2000:]})
      self.log(f'{name} failed: {record["error"]}')
    record['seconds'] = round(self.clock.now() - started, 1)
    self.summary['phases'][name] = record
    self.write_summary()
    return result

  def config_file(self, name: str, base: str, overrides: dict, what: str) -> Path:
    path = self.work / 'configs' / f'{name}.py'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CONFIG_FILE.format(what=what, base=str(REPO / base),
                                       overrides=json.dumps(overrides)))
    return path

  def write_summary(self):
    path = self.out / 'summary.json'
    path.with_suffix('.tmp').write_text(json.dumps(self.summary, indent=1, default=str) + '\n')
    os.replace(path.with_suffix('.tmp'), path)

  # -- 1. setup ---------------------------------------------------------------------------

  def setup(self):
    manifest_path = self.pack / 'pack.json'
    if not manifest_path.is_file():
      raise FileNotFoundError(f'no pack at {self.pack}: run `python benchmarks/accelerator_run.py '
                              f'pack --out={self.pack}` first')
    self.manifest = json.loads(manifest_path.read_text())
    if self.manifest.get('smoke') != self.smoke:
      raise ValueError(f'{self.pack} was packed with smoke={self.manifest.get("smoke")}')
    self.install_wheels()
    self.summary['device'] = self.device_info()
    text = self.work / 'text'
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # lzma lets other threads run
      checked = list(pool.map(lambda e: unpack_chunk(self.pack / e['file'], text / e['split'],
                                                     e['members']), self.manifest['text']))
    with tarfile.open(self.pack / 'glue.tar.xz') as archive:
      archive.extractall(self.work / 'glue', filter='data')
    vocab_size = self.manifest['vocab']['vocab_size']
    self.summary['budget']['text'] = {'files': sum(checked), 'raw_bytes': sum(
        e['raw_bytes'] for e in self.manifest['text']), 'dropped_chunks': len(
            self.manifest.get('dropped', []))}
    self.vocab_size = vocab_size
    self.configs = {
        size: self.config_file(size, base, {**overrides, 'model.vocab_size': vocab_size},
                               f'{size} for the speed benchmarks')
        for size, (base, overrides) in self.settings['networks'].items()}
    self.prepared = self.work / 'prepared'
    workers = max(1, (os.cpu_count() or 2) // 2)
    prepare_config = self.config_file('prepare', self.settings['pretrain_base'], {
        'model.vocab_size': vocab_size,
        'max_seq_length': self.settings['networks']['small'][1]['max_seq_length'],
        'data.sources': f'{text}/train/*/*/*.txt', 'data.eval_sources': f'{text}/eval/*/*/*.txt',
        'data.vocab_model': str(self.pack / 'vocab.model'), 'data.prepare_workers': workers},
        'the corpus to prepare')
    # JAX on the CPU: prepare must not take the GPU's memory from the benchmarks beside it.
    self.preparing = Child(self, 'prepare', [sys.executable, '-m', 'electra_jax.prepare',
                                             f'--config={prepare_config}',
                                             f'--out={self.prepared}'],
                           self.env(JAX_PLATFORMS='cpu'), nice=10)

  def install_wheels(self):
    missing = [m for m in WHEELS if importlib.util.find_spec(m) is None]
    self.summary['budget']['wheels_installed'] = missing
    if not missing:
      return
    wheels = sorted((self.pack / 'wheels').glob('*.whl'))
    if not wheels:
      raise FileNotFoundError(f'{", ".join(missing)} missing and no wheels in {self.pack}/wheels')
    self.site = self.work / 'site'
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps',
                    '--no-compile', '--no-cache-dir', '--upgrade', '--target', str(self.site),
                    *map(str, wheels)], check=True)
    sys.path.insert(0, str(self.site))
    self.log(f'installed {", ".join(w.name for w in wheels)} into {self.site}')

  def device_info(self) -> dict:
    info = {'python': sys.version.split()[0], 'cpus': os.cpu_count()}
    for name in ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'torch', 'transformers'):
      try:
        info[name] = importlib.metadata.version(name)
      except importlib.metadata.PackageNotFoundError:
        info[name] = None
    try:
      info['nvidia_smi'] = subprocess.run(
          ['nvidia-smi', '--query-gpu=name,memory.total,driver_version', '--format=csv,noheader'],
          capture_output=True, text=True, timeout=20, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
      info['nvidia_smi'] = None
    return info

  def wait_prepared(self, deadline: float):
    if self.preparing.returncode is None:
      self.preparing.wait(deadline)
    if failure := self.preparing.failure():
      raise RuntimeError(failure)
    self.data_counts = {}
    for line in self.preparing.records():
      if 'split' in line:
        self.data_counts[line['split']] = line
    self.summary['pretraining']['data'] = self.data_counts

  # -- 2. speed -----------------------------------------------------------------------------

  VARIANTS = {'fused': ('auto', 0.0), 'einsum': ('auto', 0.1)}  # config.attention, dropout

  def ours_command(self, size: str, variant: str, steps: int, warmup: int) -> list[str]:
    attention, dropout = self.VARIANTS[variant]
    overrides = self.settings['networks'][size][1]
    namespace = types.SimpleNamespace(
        config_path=str(self.configs[size]), batch_size=overrides['batch_size'],
        max_seq_length=overrides['max_seq_length'], steps=steps, warmup=warmup,
        attention=attention, attention_dropout_rate=dropout)
    command = compare.ours_command(namespace, self.settings['dtype'])
    return command + (['--peak_matmul_size=256'] if self.smoke else [])

  def peer_command(self, size: str, dropout: float) -> list[str]:
    overrides = self.settings['networks'][size][1]
    namespace = types.SimpleNamespace(
        config_path=str(self.configs[size]), batch_size=overrides['batch_size'],
        max_seq_length=overrides['max_seq_length'], steps=self.settings['steps'],
        warmup=self.settings['warmup'], modes=self.args.peer_modes,
        attention_dropout_rate=dropout)
    return compare.peer_command(namespace, self.settings['dtype']) + self.settings['peer_device']

  def warm_compile(self):
    """Compiles the four programs at once into the compilation cache (their timings are not
    kept), so that each timed run reads its program back rather than compiling alone."""
    ours = [BENCHMARKS[k] for k in self.benchmark_keys() if BENCHMARKS[k][0] == 'ours']
    # Several at once on the one GPU: each takes memory as it needs it.
    children = [Child(self, f'warm-{size}-{variant}',
                      self.ours_command(size, variant, steps=1, warmup=0),
                      self.env(XLA_PYTHON_CLIENT_PREALLOCATE='false'))
                for _, size, variant in ours]
    deadline = self.clock.now() + self.settings['reserve']['warm']
    for child in children:
      child.wait(deadline)
    self.summary['benchmarks']['warm_compile'] = {
        c.name: {'seconds': c.seconds, 'returncode': c.returncode,
                 'compile_s': next((r.get('compile_s') for r in c.records()), None)}
        for c in children}

  def benchmark(self, key: str, command: list[str], deadline: float) -> dict | None:
    # The warm pass's environment, so that nothing in it keys the compilation cache apart.
    child = Child(self, key.replace('/', '-'), command,
                  self.env(XLA_PYTHON_CLIENT_PREALLOCATE='false'))
    child.wait(deadline)
    records = [r for r in child.records() if 'framework' in r]
    record = records[0] if records else {'error': child.failure() or 'no record printed'}
    record['wall_s'] = child.seconds
    self.summary['benchmarks'][key] = record
    self.write_summary()
    return record if 'median_step_s' in record else None

  def speed(self):
    """The benchmarks in order of what the issue needs first; each starts only where its
    estimated time fits before (a)'s deadline, which keeps min_pretrain for (b)."""
    reserve = self.settings['reserve']
    deadline = self.clock.total - reserve['final'] - reserve['finetune'] - reserve['min_pretrain']
    self.phase('warm_compile', self.warm_compile)
    estimate = {'ours': 60.0, 'peer': 45.0}
    for key in self.benchmark_keys():
      kind, size, variant = BENCHMARKS[key]
      if key != 'small/fused' and deadline - self.clock.now() < estimate[kind]:
        self.summary['benchmarks'][key] = {'skipped': f'{estimate[kind]:.0f} s estimated, '
                                                      f'{deadline - self.clock.now():.0f} s left'}
        self.log(f'{key}: skipped, no time left for it')
        continue
      command = (self.ours_command(size, variant, self.settings['steps'], self.settings['warmup'])
                 if kind == 'ours' else self.peer_command(size, variant))
      # (b) plans its steps from small/fused, so that one runs whatever the clock says.
      record = self.benchmark(key, command, deadline if key != 'small/fused'
                              else max(deadline, self.clock.now() + 120))
      if record:
        estimate[kind] = max(record['wall_s'] * 1.2, 10.0)  # the next of its kind: like this one
    self.summary['ratios'] = self.ratios()

  def benchmark_keys(self) -> list[str]:
    chosen = self.args.bench or ('smoke' if self.smoke else 'all')
    keys = BENCH_PRESETS[chosen] if chosen in BENCH_PRESETS else chosen.split(',')
    unknown = [k for k in keys if k not in BENCHMARKS]
    if unknown:
      raise ValueError(f'--bench: unknown {unknown}; use {", ".join(BENCH_PRESETS)} or keys of '
                       f'{", ".join(BENCHMARKS)}')
    return ['small/fused'] + [k for k in keys if k != 'small/fused']

  def ratios(self) -> dict:
    """Each of our steps against the peer of its size at the same attention dropout."""
    found = {}
    bench = self.summary['benchmarks']
    for size in ('small', 'base'):
      for variant, peer_key in (('fused', 'transformers'), ('einsum', 'transformers-dropout')):
        ours, peer = bench.get(f'{size}/{variant}', {}), bench.get(f'{size}/{peer_key}', {})
        if 'median_step_s' in ours and 'median_step_s' in peer:
          line = compare.ratio_lines([ours, peer])[0]
          found[f'{size}/{variant}'] = {**line, 'peer': f'{size}/{peer_key}',
                                        'our_mfu': ours.get('mfu'), 'peer_mfu': peer.get('mfu')}
    return found

  # -- 3. pretraining -----------------------------------------------------------------------

  def pretrain_plan(self, window: float) -> dict:
    """Steps, warmup and evaluation cadence that fill `window` seconds, from (a)'s small step."""
    bench = self.summary['benchmarks']
    measured = bench.get('small/fused', {})
    fused = 'median_step_s' in measured
    if not fused and 'median_step_s' in bench.get('small/einsum', {}):
      measured = bench['small/einsum']
    batch = self.settings['pretrain_batch']
    if 'median_step_s' in measured:
      step_s = measured.get('pipelined_step_s') or measured['median_step_s']
      warm = bench.get('warm_compile', {}).get(f'warm-small-{"fused" if fused else "einsum"}', {})
      # The warm pass compiled beside three others, so alone it takes less.
      compile_s = max(0.8 * (warm.get('compile_s') or 0.0), measured.get('compile_s') or 0.0)
      timing = (self.settings['warmup'] + 2 * self.settings['steps']) * measured['median_step_s']
      startup = max(0.0, measured['wall_s'] - measured.get('compile_s', 0.0) - timing)
    else:  # no measurement: a cautious guess, and the SIGTERM at the deadline
      step_s, compile_s, startup = batch * 128 / 3e5, 90.0, 15.0
    # The trainer compiles its step and its evaluation step, opens the data and evaluates at
    # step 0; at the end it evaluates and saves.
    overhead = startup + 1.4 * compile_s + (20.0 if not self.smoke else 5.0)
    evals, eval_steps = (3 if self.smoke else 8), self.eval_steps(batch)
    eval_s = (evals + 1) * eval_steps * step_s * 0.5
    steps = int(max(0.0, window - overhead - eval_s) / (step_s * 1.05))
    if self.settings['max_pretrain_steps']:
      steps = min(steps, self.settings['max_pretrain_steps'])
    steps = max(steps, 10)
    return {'steps': steps, 'warmup_steps': max(1, round(0.05 * steps)),
            'eval_every': max(1, steps // evals), 'eval_steps': eval_steps,
            'log_every': max(1, min(100, steps // 40)), 'fused': fused,
            'planned_from': {'step_s': step_s, 'compile_s': compile_s, 'startup_s': startup,
                             'overhead_s': overhead, 'window_s': window}}

  def eval_steps(self, batch: int) -> int:
    examples = self.data_counts.get('eval', {}).get('examples', 0) if hasattr(
        self, 'data_counts') else 0
    return int(max(1, min(2 if self.smoke else 16, examples // batch)))

  def pretrain(self):
    reserve = self.settings['reserve']
    self.wait_prepared(self.clock.now() + 240)
    end = self.clock.total - reserve['final'] - reserve['finetune']
    if self.args.pretrain_minutes:
      end = min(end, self.clock.now() + self.args.pretrain_minutes * 60)
    plan = self.pretrain_plan(end - self.clock.now())
    batch = self.settings['pretrain_batch']
    learning_rate = self.args.learning_rate or PAPER_LR * math.sqrt(batch / PAPER_BATCH)
    overrides = {
        'model.vocab_size': self.vocab_size, 'batch_size': batch,
        'max_seq_length': self.settings['networks']['small'][1]['max_seq_length'],
        'learning_rate': learning_rate, 'warmup_steps': plan['warmup_steps'],
        'num_train_steps': plan['steps'], 'log_every': plan['log_every'],
        'eval_every': plan['eval_every'], 'eval_steps': plan['eval_steps'],
        'save_every': plan['steps'], 'keep_checkpoints': 1, 'dtype': self.settings['dtype'],
        'data.prepared_dir': str(self.prepared)}
    if plan['fused']:
      overrides.update({'attention': 'auto', 'model.attention_dropout_rate': 0.0})
    if self.smoke:  # the small benchmark's network
      overrides.update({k: v for k, v in self.settings['networks']['small'][1].items()
                        if k.startswith('model.')})
    config = self.config_file('pretrain', self.settings['pretrain_base'], overrides,
                              'the pretraining run')
    record = self.summary['pretraining']
    record.update({'config': overrides, 'plan': plan, 'learning_rate_rule':
                   f'{PAPER_LR} x sqrt({batch} / {PAPER_BATCH})'})
    self.write_summary()
    child = Child(self, 'pretrain', [sys.executable, '-m', 'electra_jax.main',
                                     f'--config={config}', f'--workdir={self.pretrain_dir}'],
                  self.env())
    child.wait(end - 25, grace=30)  # SIGTERM: the trainer saves its step, as when preempted
    record.update(self.pretrain_results(config, child))
    if not record.get('steps'):
      raise RuntimeError(child.failure() or 'the run saved no step')

  def pretrain_results(self, config: Path, child: Child) -> dict:
    metrics = read_jsonl(self.pretrain_dir / 'metrics.jsonl')
    train_lines = [m for m in metrics if 'loss' in m]
    evals = [m for m in metrics if 'eval_disc_auc' in m or 'eval_mlm_accuracy' in m]
    # The saved step: a run stopped at its deadline saves the step it was at, unlogged.
    saved = [int(p.name) for p in (self.pretrain_dir / 'checkpoints').glob('*') if
             p.name.isdigit()] if (self.pretrain_dir / 'checkpoints').is_dir() else []
    steps = max(saved or [m['step'] for m in train_lines] or [0])
    from electra_jax.common.config import load_config_file  # pylint: disable=g-import-not-at-top
    from electra_jax.training import flops  # pylint: disable=g-import-not-at-top
    settings = load_config_file(str(config))
    step_flops = flops.train_step_flops(settings)
    paper = load_config_file(str(REPO / 'configs' / 'small.py'))
    paper_flops = flops.train_step_flops(paper) * PAPER_6_25_STEPS
    tokens_per_step = settings.batch_size * settings.max_seq_length
    # Each line's rate covers the steps since the line before; the first window holds the
    # step's compilation, so its steps are counted at the median rate of the others.
    windows = [(line['step'] - before['step'] if before else line['step'], line['tokens_per_s'])
               for before, line in zip([None] + train_lines[:-1], train_lines)]
    rates = sorted(rate for _, rate in windows[1:]) or [windows[0][1] if windows else 1.0]
    seconds = sum(n * tokens_per_step / max(rate, 1e-9) for n, rate in windows[1:])
    if windows:
      seconds += windows[0][0] * tokens_per_step / max(rates[len(rates) // 2], 1e-9)
    final = evals[-1] if evals else {}
    return {
        'steps': steps, 'planned_steps': settings.num_train_steps,
        'stopped_at_deadline': child.timed_out, 'process_s': child.seconds,
        'train_s': round(seconds, 2), 'minutes': round(seconds / 60, 4),
        'tokens': steps * tokens_per_step, 'flops': steps * step_flops,
        'flops_per_step': step_flops,
        'paper_6.25%_flops': paper_flops, 'issue_6.25%_flops': ISSUE_6_25_FLOPS,
        'share_of_6.25%_point': steps * step_flops / paper_flops,
        'tokens_per_s': steps * tokens_per_step / seconds if seconds else None,
        'final_eval': {k.removeprefix('eval_'): v for k, v in final.items()},
        'eval_curve': [{'step': m['step'], 'mlm_accuracy': m.get('eval_mlm_accuracy'),
                        'disc_auc': m.get('eval_disc_auc')} for m in evals],
        'error': child.failure()}

  # -- 4. fine-tuning and the export ----------------------------------------------------------

  def finetune_and_export(self):
    if not (self.pretrain_dir / 'config.json').is_file():
      raise RuntimeError('no pretraining run to fine-tune or export')
    deadline = self.clock.total - self.settings['reserve']['final']
    children = {}
    for task in GLUE_TASKS:
      flags = {'task': task, 'init_from': str(self.pretrain_dir),
               'data_dir': str(self.work / 'glue'), 'seeds': '0', 'predict_test': False,
               'length_multiple': 0, 'save_every': 0, **self.settings['finetune']}
      if task == 'SST-2' and self.settings['sst2_examples']:
        flags['max_train_examples'] = self.settings['sst2_examples']
      command = [sys.executable, '-m', 'electra_jax.finetune',
                 f'--config={REPO / "configs" / "finetune" / "glue.py"}',
                 *[f'--config.{k}={v}' for k, v in flags.items()],
                 f'--workdir={self.work / "finetune" / task}']
      # Both on the one GPU at once: each takes a share of its memory, not the default 75%.
      children[task] = Child(self, f'finetune-{task}', command,
                             self.env(XLA_PYTHON_CLIENT_MEM_FRACTION='0.3'))
      self.summary['finetuning'][task] = {'flags': flags}
    self.phase('export', self.export, deadline)
    for task, child in children.items():
      child.wait(deadline)
      results = self.work / 'finetune' / task / 'results.json'
      record = self.summary['finetuning'][task]
      record['seconds'] = child.seconds
      if results.is_file():
        record['results'] = json.loads(results.read_text())
        record['score'] = record['results'].get('score')
        record['score_metric'] = record['results'].get('score_metric')
      else:
        record['error'] = child.failure() or 'no results.json'
      self.log(f'{task}: {record.get("score_metric")} {record.get("score")}')
    self.write_summary()
    if any('error' in self.summary['finetuning'][t] for t in GLUE_TASKS):
      raise RuntimeError('a fine-tuning run failed; see finetuning.<task>.error')

  def export(self, deadline: float):
    exported = self.work / 'export'
    child = Child(self, 'export', [sys.executable, '-m', 'electra_jax.export',
                                   f'--workdir={self.pretrain_dir}', f'--out={exported}',
                                   '--overwrite'], self.env(JAX_PLATFORMS='cpu'))
    child.wait(deadline)
    if failure := child.failure():
      raise RuntimeError(failure)
    source, rounded = exported / 'discriminator', exported / 'discriminator-bf16'
    record = self.summary['export']
    record.update(round_to_bfloat16(source, rounded))
    parts = split_tar(rounded, self.out, 'discriminator-bf16.tar')
    record.update({'format': 'tar of the transformers directory (weights in bfloat16), split '
                             'into parts: cat discriminator-bf16.tar.* | tar x',
                   'parts': parts})
    self.write_summary()
    check = Child(self, 'export-check', [sys.executable, str(Path(__file__).resolve()),
                                         'check-export', f'--fp32={source}',
                                         f'--bf16={rounded}'], self.env(CUDA_VISIBLE_DEVICES=''))
    check.wait(deadline)
    found = check.records()
    record['check'] = found[-1] if found else {'error': check.failure()}

  # -- 5. what comes back ---------------------------------------------------------------------

  def finish(self):
    metrics = self.pretrain_dir / 'metrics.jsonl'
    if metrics.is_file():
      shutil.copyfile(metrics, self.out / 'metrics.jsonl')
    try:
      plot(self.summary, read_jsonl(self.out / 'metrics.jsonl'), self.out / 'plots.png')
    except Exception as e:  # pylint: disable=broad-except  (no plot is no reason to lose the rest)
      self.summary['errors'].append({'phase': 'plots', 'error': f'{type(e).__name__}: {e}'})
    self.summary['budget']['total_s'] = round(self.clock.now(), 1)
    self.summary['files'] = sorted(p.name for p in self.out.iterdir() if p.is_file()) + [
        'run.log', 'summary.json']
    self.summary['files'] = sorted(set(self.summary['files']) - {'summary.tmp'})
    self.write_summary()
    self.log(f'done in {self.clock.now():.0f} s; wrote {", ".join(self.summary["files"])}')
    write_run_log(self.work, self.out / 'run.log')

  def run(self):
    self.log(f'accelerator run: out {self.out}, work {self.work}, pack {self.pack}, '
             f'{self.clock.total:.0f} s budget{" (smoke)" if self.smoke else ""}')
    self.phase('setup', self.setup)
    if self.summary['phases']['setup']['status'] != 'ok':
      self.finish()
      return 1
    self.phase('speed', self.speed)
    self.phase('pretrain', self.pretrain)
    self.phase('finetune', self.finetune_and_export)
    if getattr(self, 'preparing', None) and self.preparing.returncode is None:
      self.preparing.wait(self.clock.now())
    self.finish()
    return 0


def unpack_chunk(archive_path: Path, into: Path, members: list[dict]) -> int:
  """Extracts one text chunk and checks every file against the sha256 recorded when packing."""
  with tarfile.open(archive_path, 'r:xz') as archive:
    archive.extractall(into, filter='data')
  for member in members:
    if sha256_of(into / member['path']) != member['sha256']:
      raise ValueError(f'{member["path"]} from {archive_path.name} differs from what was packed')
  return len(members)


def round_to_bfloat16(source: Path, target: Path) -> dict:
  """A copy of a transformers directory whose float32 tensors are stored in bfloat16."""
  import ml_dtypes  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from safetensors.numpy import load_file, save_file  # pylint: disable=g-import-not-at-top
  shutil.rmtree(target, ignore_errors=True)
  shutil.copytree(source, target)
  tensors = load_file(str(source / 'model.safetensors'))
  rounded = {k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v
             for k, v in tensors.items()}
  save_file(rounded, str(target / 'model.safetensors'), metadata={'format': 'pt'})
  return {'float32_bytes': folder_bytes(source), 'bfloat16_bytes': folder_bytes(target),
          'parameters': int(sum(v.size for v in tensors.values()))}


def split_tar(folder: Path, out: Path, name: str) -> list[str]:
  """`folder` as an uncompressed tar in parts of PART_BYTES in `out`: name.00, name.01, ..."""
  for old in out.glob(f'{name}.*'):
    old.unlink()
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode='w') as archive:
    archive.add(folder, arcname=folder.name)
  data, parts = buffer.getvalue(), []
  for index, start in enumerate(range(0, len(data), PART_BYTES)):
    part = out / f'{name}.{index:02d}'
    part.write_bytes(data[start:start + PART_BYTES])
    parts.append(part.name)
  return parts


def read_jsonl(path: Path) -> list[dict]:
  if not Path(path).is_file():
    return []
  lines = []
  for line in Path(path).read_text().splitlines():
    try:
      lines.append(json.loads(line))
    except json.JSONDecodeError:
      pass
  return lines


def write_run_log(work: Path, path: Path, limit: int = 12 * MiB):
  """This script's log, then every child's, each cut to its head and tail if it is long."""
  logs = [work / 'accelerator_run.log'] + sorted((work / 'logs').glob('*.log'))
  share = limit // max(1, len(logs))
  with open(path, 'w') as out:
    for log in logs:
      if not log.is_file():
        continue
      text = log.read_text(errors='replace')
      if len(text) > share:
        text = (text[:share // 4] + f'\n[... {len(text) - share:,} characters left out ...]\n'
                + text[-(share * 3 // 4):])
      out.write(f'===== {log.name}\n{text}\n')


def plot(summary: dict, metrics: list[dict], path: Path):
  """Four panels: held-out MLM accuracy and AUC, training loss, tokens/s, GLUE scores."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axes = plt.subplots(2, 2, figsize=(12, 8))
  evals = [m for m in metrics if 'eval_disc_auc' in m]
  ax = axes[0][0]
  for key, label in (('eval_mlm_accuracy', 'generator MLM accuracy'),
                     ('eval_disc_auc', 'discriminator AUC')):
    ax.plot([m['step'] for m in evals], [m.get(key) for m in evals], marker='o', label=label)
  ax.set(title='held-out', xlabel='step')
  ax.legend()
  train = [m for m in metrics if 'loss' in m]
  ax = axes[0][1]
  ax.plot([m['step'] for m in train], [m['loss'] for m in train])
  ax.set(title='training loss (MLM + 50 x RTD)', xlabel='step')
  ax = axes[1][0]
  bench = {k: v for k, v in summary['benchmarks'].items() if 'tokens_per_s' in v}
  ax.barh(list(bench), [v['tokens_per_s'] for v in bench.values()])
  ax.set(title='train step tokens/s (bfloat16)' if not summary['smoke'] else 'tokens/s',
         xlabel='tokens/s')
  ax = axes[1][1]
  scores = {t: v['score'] for t, v in summary['finetuning'].items() if v.get('score') is not None}
  ax.bar(list(scores), list(scores.values()))
  ax.set(title='GLUE dev (seed 0)', ylim=(0, 1 if all(s <= 1 for s in scores.values()) else 100))
  figure.suptitle(f'ELECTRA-Small accelerator run{" (smoke)" if summary["smoke"] else ""}: '
                  f'{summary["pretraining"].get("minutes", "?")} min of pretraining')
  figure.tight_layout()
  figure.savefig(path, dpi=80)
  plt.close(figure)


# ---------------------------------------------------------------------------------------------
# check-export: the bfloat16 export read back by transformers


SENTENCES = ('The chef cooked the meal in a small kitchen near the river.',
             'Stocks fell sharply on Monday after the bank raised its interest rates.')


def check_export(args) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.bf16)
  batch = tokenizer(list(SENTENCES), return_tensors='pt', padding=True)
  logits = {}
  for name, folder in (('fp32', args.fp32), ('bf16', args.bf16)):
    model = transformers.ElectraForPreTraining.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
      logits[name] = model(**batch).logits
  mask = batch['attention_mask'].bool()
  a, b = logits['fp32'][mask], logits['bf16'][mask]
  return {'transformers': transformers.__version__, 'tokens': int(mask.sum()),
          'max_abs_logit_diff': float((a - b).abs().max()),
          'mean_abs_logit': float(a.abs().mean()),
          'same_decision': float(((a > 0) == (b > 0)).float().mean())}


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('verb', nargs='?', default='run', choices=('run', 'pack', 'check-export'))
  parser.add_argument('--out', help='run: the results folder; pack: the pack folder')
  parser.add_argument('--smoke', action='store_true', help='tiny sizes on a CPU')
  # run
  parser.add_argument('--pack', help='the folder `pack` wrote (default .accelerator, or '
                      '.accelerator-smoke with --smoke)')
  parser.add_argument('--work', help='scratch folder (default: a new one under the temp dir)')
  parser.add_argument('--minutes', type=float, help='wall-clock budget of the whole run '
                      '(default 9.5; the device stops a command at 10; smoke 10)')
  parser.add_argument('--pretrain_minutes', type=float, help='at most this long for (b); '
                      'default: what (a) and the reserve of (c) leave')
  parser.add_argument('--pretrain_batch', type=int, help='default 512')
  parser.add_argument('--learning_rate', type=float,
                      help='default 5e-4 x sqrt(batch / 128) (docstring)')
  parser.add_argument('--max_pretrain_steps', type=int, help='cap (smoke: 12)')
  parser.add_argument('--finetune_seconds', type=float, help='reserve for (c) (default 130)')
  parser.add_argument('--sst2_examples', type=int, help='SST-2 training examples (default 20000 '
                      'on the GPU, 0 = all)')
  parser.add_argument('--bench', help='(a): all (default), fused (with their peers), none '
                      '(only small/fused, which (b) plans from), smoke (--smoke\'s default), or '
                      'keys: ' + ','.join(BENCHMARKS))
  parser.add_argument('--peer_modes', default='eager', help='hf_peer.py --modes')
  # pack
  parser.add_argument('--data', default=str(SHARED_DATA), help='pack: the shared data folder')
  parser.add_argument('--chunks', type=int, default=16, help='pack: training text chunks')
  parser.add_argument('--vocab_size', type=int, help='pack: default 30522 (smoke 1024)')
  parser.add_argument('--vocab_sentences', type=int, help='pack: lines sampled for the vocabulary')
  parser.add_argument('--max_mib', type=float,
                      help='pack: size limit of the folder (default: 63 MiB less the checkout)')
  parser.add_argument('--wheels', action=argparse.BooleanOptionalAction, default=None,
                      help='pack: download the wheels (default: yes, no with --smoke)')
  # check-export
  parser.add_argument('--fp32')
  parser.add_argument('--bf16')
  args = parser.parse_args(argv)
  if args.verb in ('run', 'pack') and not args.out:
    parser.error('--out is required')
  if args.minutes is None:
    args.minutes = 10.0 if args.smoke else 9.5
  if args.wheels is None:
    args.wheels = not args.smoke
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.verb == 'pack':
    pack(args)
    return 0
  if args.verb == 'check-export':
    print(json.dumps(check_export(args)), flush=True)
    return 0
  return Run(args).run()


if __name__ == '__main__':
  sys.exit(main())
