"""python -m research.transfer_study: the whole study at toy scale on real files, a re-run that
skips everything, and the acceptance checks' arithmetic."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import ml_collections
import pytest

from conftest import REPO, SHARED_DATA, real_file, tree_digest
from electra_jax.common import run_lock
from electra_jax.common.errors import UsageError
from electra_jax.training import flops
from research.transfer_study import study as transfer_study
from research.transfer_study import study_corpus, study_parts, transfer_report

CORPUS = SHARED_DATA / 'pretraining-text'
GLUE = SHARED_DATA / 'glue'
STUDY = ['-m', 'research.transfer_study']  # run from REPO
FIGURES = REPO / 'research' / 'transfer_study' / 'figures'  # the committed studies' results
STARTS = ('electra', 'electra_no_decay', 'mlm', 'mlm_no_decay', 'random', 'random_no_decay')
TASKS = ('SST-2', 'MRPC')


def summary(scores: list[float]) -> dict:
  """A fine-tuning summary as transfer_report reads it, with `scores` as seeds 0, 1, ..."""
  ordered = sorted(scores)
  return {'score_metric': 'dev accuracy', 'score': ordered[len(ordered) // 2],
          'seeds': {str(i): {'accuracy': s} for i, s in enumerate(scores)}}


def test_acceptance_checks_and_the_better_decay_setting():
  report = transfer_report
  electra, mlm = summary([0.80, 0.82, 0.81]), summary([0.81, 0.805, 0.83])
  passed = report.acceptance_checks(electra, mlm, summary([0.75, 0.79, 0.78]))
  # 81 >= 78 + 2; worst 80 > best 79; 81 >= 81 (a tie passes).
  assert [c['passed'] for c in passed] == [True, True, True]
  failed = report.acceptance_checks(electra, summary([0.815, 0.82, 0.83]),
                                    summary([0.80, 0.795, 0.78]))
  # 81 < 79.5 + 2; worst 80 is not above best 80; 81 < MLM's 82.
  assert [c['passed'] for c in failed] == [False, False, False]
  assert [c['passed'] for c in report.acceptance_checks(electra, None, None)] == [None] * 3
  assert report.best_setting({'mlm': summary([0.7]), 'mlm_no_decay': summary([0.71])}) == \
      'mlm_no_decay'
  assert report.best_setting({'random': summary([0.7]), 'random_no_decay': summary([0.7])}) == \
      'random'  # the recipe's on a tie
  assert report.best_setting({'random': None, 'random_no_decay': summary([0.7])}) == \
      'random_no_decay'
  assert report.best_setting({'electra': None, 'electra_no_decay': None}) is None
  assert [report.split_variant(v) for v in report.variants('electra_15')] == [
      ('electra_15', ''), ('electra_15', '_no_decay')]
  assert report.label('all_tokens_mlm_no_decay') == 'All-Tokens MLM, no decay'


def test_table5_ranks_the_ablations_next_to_the_paper():
  report = transfer_report
  assert report.ranks({'a': 0.8, 'b': 0.9, 'c': 0.8}) == {'a': 2, 'b': 1, 'c': 2}
  run = lambda score: {'score': score}
  ft = {'electra': {'SST-2': run(0.78), 'MRPC': run(0.66)},
        'electra_15': {'SST-2': run(0.80), 'MRPC': None},
        'mlm': {'SST-2': run(0.78), 'MRPC': run(0.67)}}
  lines = report.table5(ft, ['electra', 'electra_15', 'mlm'])
  rows = [line for line in lines if line.startswith('| ') and 'objective' not in line]
  # In the paper's order; ELECTRA and MLM tie on SST-2 behind ELECTRA 15%.
  assert rows == ['| ELECTRA | 85.0 (1) | 78.0 (2) | 66.0 (2) |',
                  '| ELECTRA 15% | 82.4 (2) | 80.0 (1) | not run |',
                  '| MLM | 82.2 (3) | 78.0 (2) | 67.0 (1) |']
  assert report.table5(ft, ['electra', 'mlm']) == []  # the study's own pair: no section


def test_every_objective_is_planned_at_electras_flops(tmp_path):
  """--objectives: each run gets the steps that cost what ELECTRA's run costs, listed or not."""
  study = transfer_study
  ablations = ['electra_15', 'replace_mlm', 'all_tokens_mlm']
  args = study.parse_args([f'--out={tmp_path}', f"--objectives={','.join(ablations)}",
                           '--no-random_init', '--pretrain_steps=100'])
  assert study.starts(args) == [f'{o}{s}' for o in ablations for s in ('', '_no_decay')]
  recipe_only = study.parse_args([f'--out={tmp_path}', '--no-both_decays'])
  assert study.starts(recipe_only) == ['electra', 'mlm', 'random', 'random_no_decay']
  plan = study.plan_pretraining(args, str(tmp_path / 'data'))
  budget = 100 * plan['electra']['flops_per_step']
  for objective in ablations:
    run = plan[objective]
    config = study.resolve_config(run['flags'])
    assert config.objective == objective and config.num_train_steps == run['steps']
    assert run['flops_per_step'] == flops.train_step_flops(config)
    assert abs(run['steps'] * run['flops_per_step'] - budget) <= run['flops_per_step'] / 2
  assert plan['electra_15']['steps'] == 100  # the same network and FLOPs as ELECTRA
  assert plan['all_tokens_mlm']['steps'] < plan['replace_mlm']['steps'] < 100
  with pytest.raises(study.UsageError, match='--objectives=electra,bert: list each at most once'):
    study.parse_args([f'--out={tmp_path}', '--objectives=electra,bert'])


def toy_corpus(directory):
  """Two wiki shards and the two shortest books, linked (the study holds one of each out)."""
  for folder, count in (('enwiki', 2), ('gutenberg', 2)):
    files = sorted((CORPUS / folder).glob('*.txt'), key=lambda p: (p.stat().st_size, p.name))
    (directory / folder).mkdir(parents=True)
    for path in files[:count]:
      (directory / folder / path.name).symlink_to(path)
  return directory


def run_study(out, corpus, *extra):
  command = [sys.executable, *STUDY, f'--out={out}', f'--corpus={corpus}',
             f'--glue_dir={GLUE}', '--held_out=1', '--pretrain_steps=8', '--set=eval_every=2',
             '--set=eval_steps=1', '--set=log_every=2', '--set=batch_size=8',
             '--set=model.num_layers=1', '--seeds=0', '--sst2_examples=64',
             '--mrpc_examples=64', '--finetune_epochs=1', '--max_seq_length=32', *extra]
  result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stdout + result.stderr
  return result.stdout


def check_results(out):
  """results.json, results.md and the plots against the runs they summarise."""
  image = pytest.importorskip('matplotlib.image')
  results = json.loads((out / 'results.json').read_text())

  # Pretraining at equal model FLOPs, counted independently from each run's saved config.
  pretraining = results['pretraining']
  per_step = {}
  for objective in ('electra', 'mlm'):
    config = ml_collections.ConfigDict(json.loads((out / objective / 'config.json').read_text()))
    assert config.objective == objective
    per_step[objective] = flops.train_step_flops(config)
    run = pretraining[objective]
    assert run['flops_per_step'] == per_step[objective]
    assert run['flops'] == run['steps'] * per_step[objective]
    assert (out / objective / 'checkpoints' / str(run['steps'])).is_dir()
    lines = [json.loads(line) for line in (out / objective / 'metrics.jsonl').open()]
    evals = [m for m in lines if 'eval_mlm_accuracy' in m]
    assert [m['step'] for m in evals] == sorted({*range(0, run['steps'] + 1, 2), run['steps']})
    assert run['final_eval'] == evals[-1]
  assert pretraining['electra']['steps'] == 8
  assert per_step['mlm'] < per_step['electra']  # no generator: more MLM steps for the FLOPs
  assert pretraining['mlm']['steps'] == round(8 * per_step['electra'] / per_step['mlm']) > 8
  assert 'eval_disc_auc' in pretraining['electra']['final_eval']

  # Every fine-tuning run, as its own results.json has it; medians of one seed are that seed.
  assert len(results['runs']) == len(STARTS) * len(TASKS)
  for run in results['runs']:
    own = json.loads((out / 'finetune' / f"{run['start']}-{run['task']}" / 'results.json')
                     .read_text())
    assert run['seed'] == 0 and run['scores'] == own['seeds']['0'][run['task']]
    summary_ = results['finetuning'][run['start']][run['task']]
    assert summary_['median'] == run['scores'] and summary_['score'] == own['score']
    assert summary_['budget']['train_examples'] == 64  # the same fixed draw for every start
    assert summary_['layer_decay'] == (1.0 if run['start'].endswith('_no_decay') else 0.8)
  markdown = (out / 'results.md').read_text()
  by_run = results['finetuning']
  for task in TASKS:
    # Each start's score is its better setting's median (the recipe's on a tie).
    best = {}
    for start in ('electra', 'mlm', 'random'):
      recipe, none = by_run[start][task]['score'], by_run[f'{start}_no_decay'][task]['score']
      assert results['choice'][start][task] == (start if recipe >= none else
                                                f'{start}_no_decay')
      best[start] = max(recipe, none)
    assert [c['passed'] for c in results['checks'][task]] == [
        best['electra'] >= best['random'] + 0.02 - 1e-9, best['electra'] > best['random'],
        best['electra'] >= best['mlm']]
  sst2, mrpc = (by_run['electra_no_decay'][task]['median'] for task in TASKS)
  acc, f1 = 100 * mrpc['accuracy'], 100 * mrpc['f1']
  assert (f"| · ELECTRA, no decay | {100 * sst2['accuracy']:.1f} ({100 * sst2['accuracy']:.1f}) | "
          f'{acc:.1f} / {f1:.1f} ({acc:.1f}/{f1:.1f}) |') in markdown
  assert '| ELECTRA (better setting by median) | ' in markdown
  assert '## Acceptance checks' in markdown
  for name in ('pretraining_curves.png', 'finetune_scores.png'):
    pixels = image.imread(out / name)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.std() > 0  # not a blank image


def test_a_study_beside_joins_the_table5_comparison_only_with_the_same_settings(tmp_path):
  """--beside: the committed ELECTRA/MLM study sits beside an ablation study with the default
  settings; another seed list, held-out draw or pretraining budget is refused by name."""
  real_file(SHARED_DATA / 'pretraining-text' / 'MANIFEST.tsv')  # the study's default corpus
  study, report = transfer_study, transfer_report
  committed = FIGURES
  # The committed study fine-tuned its pretrained encoders at the recipe's decay only, and ran
  # `mini` at batch 32 for 6,000 steps: at today's batch 16, 12,000 steps cost the same FLOPs.
  args = study.parse_args([f'--out={tmp_path}', '--objectives=electra_15', '--no-random_init',
                           '--no-both_decays', f'--beside={committed}', '--pretrain_steps=12000',
                           f'--config={REPO / "configs" / "mini.py"}'])
  plan = study.plan_pretraining(args, str(tmp_path / 'data'))
  budget = plan['electra']['steps'] * plan['electra']['flops_per_step']
  held_out = study_corpus.held_out_split(args.corpus, args.held_out)[1]
  other = report.read_beside(str(committed), vars(args), budget, held_out)
  assert set(other['plan']) == {'electra', 'mlm'}

  for changed, expected in [({'seeds': '0,1'}, "seeds '0,1,2' \\(here '0,1'\\)"),
                            ({'held_out': 3}, 'held_out 2 \\(here 3\\)'),
                            ({'both_decays': True}, 'both_decays False \\(here True\\)')]:
    with pytest.raises(study.UsageError, match=expected):
      report.read_beside(str(committed), {**vars(args), **changed}, budget, held_out)
  with pytest.raises(study.UsageError, match='the held-out files'):
    report.read_beside(str(committed), vars(args), budget, held_out[:-1] + ['enwiki/x.txt'])
  half = r'ELECTRA pretrained at 7\.931e\+13 FLOPs \(here 3\.966e\+13\)'
  with pytest.raises(study.UsageError, match=half):
    report.read_beside(str(committed), vars(args), budget / 2, held_out)
  # From the command line: refused before anything runs.
  result = subprocess.run([sys.executable, *STUDY, f'--out={tmp_path / "out"}',
                           f'--beside={tmp_path}', '--objectives=electra_15'],
                          capture_output=True, text=True, cwd=REPO)
  assert result.returncode != 0 and not (tmp_path / 'out' / 'data').exists()
  assert result.stderr.strip().splitlines()[-1] == (
      f'transfer_study: error: --beside={tmp_path}: no results.json there; give the --out of '
      'a study that has run')

  # The ablation's median ranks among the committed study's, marked as coming from beside.
  beside = {'dir': 'DIR', 'best': {o: other['finetuning'][o] for o in ('electra', 'mlm')}}
  ablation = {'SST-2': summary([0.70, 0.71, 0.72]), 'MRPC': summary([0.80, 0.80, 0.80])}
  lines = report.table5({'electra_15': ablation}, ['electra_15'], beside)
  rows = {line.split(' | ')[0]: line for line in lines if line.startswith('| ')}
  assert rows['| ELECTRA †'] == '| ELECTRA † | 85.0 (1) | 77.9 (1) | 66.4 (3) |'
  assert rows['| MLM †'] == '| MLM † | 82.2 (3) | 77.1 (2) | 66.9 (2) |'
  assert rows['| ELECTRA 15%'] == '| ELECTRA 15% | 82.4 (2) | 71.0 (3) | 80.0 (1) |'
  assert lines[-1].startswith('† from the study in `DIR`')


def test_parts_run_one_at_a_time_on_an_accelerator(monkeypatch):
  """By default a part per core on a CPU host, but one part at a time where JAX finds a GPU or
  TPU: a second process could not open a TPU's chips, nor fit beside another's GPU memory."""
  study = study_parts
  assert [study.default_jobs('cpu', n) for n in (1, 2, 16)] == [1, 2, 8]
  assert study.default_jobs('gpu', 16) == 1 and study.default_jobs('tpu', 96) == 1
  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')  # asked of a child process, which reads it
  assert study.jax_backend() == 'cpu'
  monkeypatch.setenv('JAX_PLATFORMS', 'no_such_platform')
  with pytest.raises(study.UsageError, match=r'JAX could not start .*no_such_platform.* --jobs=N'):
    study.jax_backend()


def test_a_part_starts_as_soon_as_what_it_needs_has_ended():
  """--jobs=2: the fine-tuning of the run that finished first goes on the core it left while
  the other run still pretrains; a failure starts nothing that needs it and is raised."""
  study = study_parts
  if len(study.usable_cores()) < 2:
    pytest.skip('needs two cores to pin two parts')
  started, log = {n: threading.Event() for n in 'abcd'}, []

  def part(name, wait_for=None, fail=False):
    def run(cores):
      log.append(('start', name, frozenset(cores)))
      started[name].set()
      if wait_for:  # holds its share until `wait_for` has started beside it
        assert started[wait_for].wait(timeout=30), f'{wait_for} did not start while {name} ran'
      log.append(('end', name, frozenset(cores)))
      if fail:
        raise SystemExit(f'{name} failed')
    return run

  # a: a long pretraining run, b: a short one; d fine-tunes a's encoder, c b's. d comes first in
  # the order given, but only c is ready when b ends.
  needs = {'a': (), 'b': (), 'd': ('a',), 'c': ('b',)}
  study.run_all({'a': (part('a', wait_for='c'), ()), 'b': (part('b'), ()),
                 'd': (part('d'), needs['d']), 'c': (part('c'), needs['c'])}, jobs=2)
  events = [(kind, name) for kind, name, _ in log]
  assert sorted(events) == sorted((kind, n) for kind in ('start', 'end') for n in 'abcd')
  for name, needed in needs.items():
    for other in needed:
      assert events.index(('end', other)) < events.index(('start', name)), events
  shares = {cores for _, _, cores in log}
  assert len(shares) == 2 and not frozenset.intersection(*shares)  # two disjoint pinned shares

  log.clear()
  for event in started.values():
    event.clear()
  with pytest.raises(SystemExit, match='b failed'):
    study.run_all({'a': (part('a'), ()), 'b': (part('b', fail=True), ()),
                   'c': (part('c'), ('b',))}, jobs=2)
  assert sorted(name for kind, name, _ in log if kind == 'start') == ['a', 'b']
  with pytest.raises(ValueError, match=r"need parts that never run: \['x'\]"):
    study.run_all({'c': (part('c'), ('x',))}, jobs=2)


def test_a_part_that_ends_well_but_unfinished_is_not_recorded_as_done(tmp_path, capsys):
  """main exits 0 when preempted (it saved where it stopped): the study must not count that
  pretraining as finished."""
  study = study_parts
  state, command = {}, [sys.executable, '-c', 'pass']
  stopped = r'pretrain_x: main stopped at step 7, before the planned 9; see .*/pretrain_x\.log'
  with pytest.raises(SystemExit, match=stopped):
    study.run_part(str(tmp_path), state, 'pretrain_x', command, 'x',
                   unfinished=lambda: 'main stopped at step 7, before the planned 9')
  assert 'command' not in state['pretrain_x'] and 'done in' not in capsys.readouterr().out
  study.run_part(str(tmp_path), state, 'pretrain_x', command, 'x')
  assert state['pretrain_x']['command'] == ['$PYTHON', '-c', 'pass']
  assert 'done in' in capsys.readouterr().out
  # Its wall time spans both attempts, and the report says so.
  assert state['pretrain_x']['attempts'] == 2
  report = transfer_report
  wall = {'pretrain_x': 6180.0, 'pretrain_y': 2868.0}
  assert report.wall_with_attempts(wall, {'pretrain_x': 2}, 'pretrain_x') == '1h43m (2 attempts)'
  assert report.wall_with_attempts(wall, {'pretrain_x': 2}, 'pretrain_y') == '47m48s'
  # Steps trained before the study ran the part are not passed off as covered by its timer.
  assert report.pretraining_wall(wall, {}, {'pretrain_y': 900}, 'pretrain_y', 900) == \
      'not timed (trained before the study ran it)'
  assert report.pretraining_wall(wall, {}, {'pretrain_y': 300}, 'pretrain_y', 900) == \
      '47m48s for its last 600 steps (the first 300 trained before the study ran it)'


# A part's process: says it is up, then waits; SIGTERM makes it "save" (a marker) and end well.
STOPPABLE_PART = """
import os, signal, sys, time
base = sys.argv[1]
signal.signal(signal.SIGTERM, lambda *_: (open(base + '.saved', 'w').close(), sys.exit(0)))
with open(base + '.tmp', 'w') as f:
  f.write(str(os.getpid()))
os.replace(base + '.tmp', base + '.pid')
time.sleep(120)
"""

# A study of three parts: a and b at once, c once b has ended. Run as its own process, to be sent
# SIGTERM as a user or a preempted VM would.
STUDY_OF_STOPPABLE_PARTS = """
import sys
from research.transfer_study import study_parts
out, python, child = sys.argv[1], sys.executable, sys.argv[2]
state = {}
part = lambda name: lambda cores: study_parts.run_part(
    out, state, name, [python, '-c', child, f'{out}/{name}'], name, cores)
study_parts.stop_parts_on_sigterm()
study_parts.run_all({'a': (part('a'), ()), 'b': (part('b'), ()), 'c': (part('c'), ('b',))}, jobs=2)
"""


def test_sigterm_stops_the_running_parts_with_the_study_and_starts_no_more(tmp_path):
  """Killing a study must not leave its parts running on and writing into its directory."""
  if len(os.sched_getaffinity(0)) < 2:  # run_all runs one part per usable core at most
    pytest.skip('needs two usable CPU cores, to have two parts running when the signal comes')
  study = subprocess.Popen(
      [sys.executable, '-c', STUDY_OF_STOPPABLE_PARTS, str(tmp_path), STOPPABLE_PART],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  pids = [tmp_path / 'a.pid', tmp_path / 'b.pid']
  deadline = time.monotonic() + 60
  while not all(p.exists() for p in pids):
    assert study.poll() is None and time.monotonic() < deadline, study.communicate()
    time.sleep(0.05)
  study.send_signal(signal.SIGTERM)
  out, err = study.communicate(timeout=60)
  assert study.returncode != 0
  # Both running parts got the signal and ended (saved) before the study did ...
  assert (tmp_path / 'a.saved').exists() and (tmp_path / 'b.saved').exists()
  for pid in pids:
    with pytest.raises(ProcessLookupError):
      os.kill(int(pid.read_text()), 0)
  # ... and c, free to start once b had ended well, did not.
  assert err.strip().splitlines()[-1] == \
      'c: not started: the study was stopped (SIGTERM); run it again to go on'
  assert 'c: running' not in out and not (tmp_path / 'c.pid').exists()


def test_whole_study_at_toy_scale_then_a_rerun_skips_everything(tmp_path):
  """Needs config.objective=mlm (the MLM baseline) in electra_jax."""
  pytest.importorskip('matplotlib')
  if not CORPUS.is_dir() or not GLUE.is_dir():
    pytest.skip(f'real data not found in {SHARED_DATA}')
  out, corpus = tmp_path / 'study', toy_corpus(tmp_path / 'corpus')
  first = run_study(out, corpus)
  parts = ['data', 'pretrain_electra', 'pretrain_mlm'] + [
      f'finetune_{start}_{task}' for task in TASKS for start in STARTS]
  for part in parts:
    assert f'{part}: done in' in first, first
  check_results(out)

  # Again: nothing runs, nothing in the runs changes, and the report comes out the same.
  before = {d: tree_digest(out / d) for d in ('data', 'electra', 'mlm', 'finetune')}
  report = (out / 'results.json').read_text()
  second = run_study(out, corpus)
  assert 'running' not in second, second
  for part in parts:
    assert f'{part}: finished before' in second, second
  assert {d: tree_digest(out / d) for d in before} == before
  assert (out / 'results.json').read_text() == report

  # An MLM run the study did not train (here: its record dropped, as for a run trained by hand
  # and put in place): main finds it finished in seconds, which the report must not quote as
  # its pretraining wall time.
  state = json.loads((out / 'state.json').read_text())
  del state['pretrain_mlm']
  (out / 'state.json').write_text(json.dumps(state))
  third = run_study(out, corpus)
  assert 'pretrain_mlm: running' in third and 'pretrain_electra: finished before' in third
  results = json.loads((out / 'results.json').read_text())
  assert results['untimed_steps'] == {'pretrain_mlm': results['pretraining']['mlm']['steps']}
  markdown = (out / 'results.md').read_text()
  assert 'not timed (trained before the study ran it)' in markdown
  assert markdown.count('not timed') == 1  # ELECTRA's pretraining kept its own time

  # Carried elsewhere with its corpus (another machine, after a preemption): nothing runs again.
  moved, corpus = tmp_path / 'moved', toy_corpus(tmp_path / 'corpus_elsewhere')
  out.rename(moved)
  fourth = run_study(moved, corpus)
  assert 'running' not in fourth and fourth.count('finished before') == len(parts), fourth
  assert json.loads((moved / 'results.json').read_text())['finetuning'] == results['finetuning']

  # Fine-tuning runs to do again, in folders finetune must not continue, are set aside: one begun
  # from another step of its encoder (which has trained on since; its seeds' checkpoints would
  # pass for the new step's), and one stopped before the move (finetune refuses its old paths).
  state = json.loads((moved / 'state.json').read_text())
  state['finetune_electra_MRPC']['pretrained_step'] = 7
  del state['finetune_random_MRPC']['command']  # as a part stopped midway leaves it
  (moved / 'state.json').write_text(json.dumps(state))
  fifth = run_study(moved, corpus)
  tuned = moved / 'finetune'
  assert (f'finetune_electra_MRPC: {tuned}/electra-MRPC was fine-tuned from step 7 of electra, '
          f'which has trained on to step 8; it is now {tuned}/electra-MRPC.from-step-7') in fifth
  assert (f'finetune_random_MRPC: {tuned}/random-MRPC was begun where the study was before, '
          f'{out}; it is now {tuned}/random-MRPC.moved') in fifth, fifth
  assert fifth.count('running') == 2 and fifth.count('done in') == 2, fifth
  for name in ('electra-MRPC', 'electra-MRPC.from-step-7', 'random-MRPC', 'random-MRPC.moved'):
    assert (tuned / name / 'results.json').exists()


def test_commands_are_recorded_with_their_folders_by_role():
  """What a part ran is compared wherever the study, the repository and the interpreter now
  are: a whole path under a root, or the start of one, after '=' or ',', and nothing else."""
  study = study_parts
  def command(python, out, repo, corpus):
    return [python, '-m', 'electra_jax.main', f'--workdir={out}/electra',
            f'--config={repo}/configs/mini.py', f'--out={out}',
            f'--config.data.train_files={corpus}/g/1.txt,{corpus}/w/2.txt', f'{out}/x']
  here = {'$OUT': '/a/study', '$REPO': '/a', '$CORPUS': '/c/text'}  # the study in the repo
  ran = command('/venv/bin/python', '/a/study', '/a', '/c/text')
  recorded = study.by_role(ran, here)
  assert recorded == [
      '$PYTHON', '-m', 'electra_jax.main', '--workdir=$OUT/electra',
      '--config=$REPO/configs/mini.py', '--out=$OUT',
      '--config.data.train_files=$CORPUS/g/1.txt,$CORPUS/w/2.txt', '$OUT/x']
  assert study.by_role(recorded, here) == recorded  # a record stays as it is
  assert study.by_role(['python', '--x=/a/study2/y', 'x/a/study', '--y=/c/text.old'], here) == \
      ['$PYTHON', '--x=$REPO/study2/y', 'x/a/study', '--y=/c/text.old']  # whole names only

  there = {'$OUT': '/b/run', '$REPO': '/b/repo', '$CORPUS': '/d'}
  moved = command('/usr/bin/python3', '/b/run', '/b/repo', '/d')
  assert study.same_command(recorded, moved, there)
  assert not study.same_command(recorded, [*moved[:-1], '/b/run/y'], there)
  assert study.same_command(ran, ran, here)  # a record from before roles, where nothing moved
  assert not study.same_command(ran, moved, there)
  assert not study.same_command(None, ran, here)


def test_bad_parts_is_one_clear_error(tmp_path):
  result = subprocess.run([sys.executable, *STUDY, f'--out={tmp_path}', '--parts=train'],
                          capture_output=True, text=True, cwd=REPO)
  assert result.returncode != 0
  assert result.stderr.strip().splitlines()[-1].startswith('transfer_study: error: --parts=train')


def test_a_second_study_in_the_same_out_is_refused_while_the_first_runs(tmp_path):
  (tmp_path / 'state.json').write_text('{"parts": {}}')
  before = tree_digest(tmp_path)
  with run_lock.only_run_in(str(tmp_path), 'transfer study'):  # as a running study holds it
    with pytest.raises(UsageError) as refused:
      transfer_study.main([f'--out={tmp_path}', '--jobs=1', f'--corpus={tmp_path}/no-corpus'])
  assert str(refused.value) == (
      f'{tmp_path} is in use by another transfer study (a running process holds it); wait for '
      'that one to end or stop it, or use another directory')
  assert tree_digest(tmp_path) == before


def test_each_subfolder_of_the_corpus_is_a_source_with_its_own_held_out_files(tmp_path):
  study = study_corpus
  corpus = tmp_path / 'corpus'
  for folder, count in (('news', 4), ('books', 3), ('forum', 5)):
    (corpus / folder).mkdir(parents=True)
    for i in range(count):
      (corpus / folder / f'{i}.txt').write_text(f'{folder} {i}\n')
  (corpus / 'notes').mkdir()  # no .txt files: not a source
  (corpus / 'README.txt').write_text('about the corpus\n')  # not in a source folder
  train, evaluation = study.held_out_split(str(corpus), 2)
  assert [os.path.basename(os.path.dirname(f)) for f in evaluation] == [
      'books', 'books', 'forum', 'forum', 'news', 'news']
  assert sorted(train + evaluation) == sorted(map(str, corpus.glob('*/*.txt')))
  assert len(set(train)) == 6

  for bad, message in ((corpus, f'{corpus}/books holds 3 .txt files; the study needs more than '
                                '--held_out=3 of each source folder'),
                       (corpus / 'notes', f'--corpus={corpus}/notes has no subfolder holding '
                                          '.txt files'),
                       (tmp_path / 'missing', f'--corpus={tmp_path}/missing is not a folder')):
    with pytest.raises(UsageError) as refused:
      study.held_out_split(str(bad), 3 if bad == corpus else 2)
    assert str(refused.value).startswith(message), refused.value


def test_the_shared_corpus_holds_out_the_files_every_documented_study_held_out():
  real_file(CORPUS / 'MANIFEST.tsv')
  evaluation = study_corpus.held_out_split(str(CORPUS), 2)[1]
  recorded = json.loads((FIGURES / 'split_results.json').read_text())
  assert transfer_report.corpus_relative(evaluation) == transfer_report.corpus_relative(
      recorded['held_out_files']) == [
          'enwiki/AC_wiki_18.txt', 'enwiki/AC_wiki_36.txt',
          'gutenberg/doyle--the-firm-of-girdlestone.txt',
          'gutenberg/tolstoy--a-russian-proprietor-and-other-stories.txt']
