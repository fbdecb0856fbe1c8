"""compare_studies.py: studies side by side, each start at the setting its study chose."""

import json

import pytest

from research.transfer_study import compare_studies


def run(scores: dict[str, float], metric: str = 'accuracy') -> dict:
  """A fine-tuning summary with these per-seed scores (x100) and their median as its score."""
  middle = sorted(scores.values())[len(scores) // 2] / 100
  return {'score_metric': f'dev {metric}', 'score': middle,
          'median': {'accuracy': middle, 'f1': middle + 0.1},
          'seeds': {seed: {'accuracy': s / 100, 'f1': (s + 10) / 100}
                    for seed, s in scores.items()}}


def study(sst2: dict[str, list[float]], mrpc: dict[str, list[float]], choice: bool = True):
  """results.json of a study: per fine-tuning run, SST-2 and MRPC seeds."""
  finetuning = {v: {'SST-2': run(dict(zip('012', sst2[v]))),
                    'MRPC': run(dict(zip('012', mrpc[v])))} for v in sst2}
  results = {'finetuning': finetuning}
  if choice:
    best = lambda start, task: max(
        (v for v in finetuning if v.split('_no_decay')[0] == start),
        key=lambda v: finetuning[v][task]['score'])
    results['choice'] = {s: {t: best(s, t) for t in ('SST-2', 'MRPC')}
                         for s in ('electra', 'mlm', 'random')}
  return results


def test_each_start_at_its_chosen_setting_and_electras_lead(tmp_path):
  compare = compare_studies
  new = study({'electra': [78, 79, 80], 'electra_no_decay': [82, 83, 81],
               'mlm': [77, 77, 78], 'mlm_no_decay': [70, 70, 70],
               'random': [79, 80, 81], 'random_no_decay': [75, 75, 75]},
              {'electra': [70, 70, 71], 'electra_no_decay': [60, 60, 60],
               'mlm': [66, 67, 68], 'mlm_no_decay': [69, 69, 69],
               'random': [65, 66, 64], 'random_no_decay': [63, 63, 63]})
  # A study from before both decay settings: its pretrained starts ran once, under their name.
  old = study({'electra': [76, 77, 78], 'mlm': [78, 79, 80], 'random': [78, 78, 78]},
              {'electra': [68, 68, 68], 'mlm': [65, 65, 65], 'random': [66, 66, 66]},
              choice=False)
  (tmp_path / 'new').mkdir()
  (tmp_path / 'new' / 'results.json').write_text(json.dumps(new))
  (tmp_path / 'old.json').write_text(json.dumps(old))
  out = tmp_path / 'side' / 'by'
  compare.main([f'--out={out}', f"--study=new, 2 decays={tmp_path / 'new'}",
                f"--study=old={tmp_path / 'old.json'}"])
  table = (tmp_path / 'side' / 'by.md').read_text()
  assert (tmp_path / 'side' / 'by.png').stat().st_size > 10_000
  sst2, mrpc = table.split('## MRPC')
  # SST-2: ELECTRA without decay (82), MLM and random init at the recipe's (77, 80).
  assert ('| new, 2 decays | 82.0 (82.0, 83.0, 81.0) | 77.0 (77.0, 77.0, 78.0) '
          '| 80.0 (79.0, 80.0, 81.0) | +2.0 | +5.0 |') in sst2
  assert '| old | 77.0 (76.0, 77.0, 78.0) | 79.0 (78.0, 79.0, 80.0) | 78.0 (78.0, 78.0, 78.0) ' \
         '| -1.0 | -2.0 |' in sst2
  # MRPC shows accuracy / F1; MLM's better setting there is no decay (69).
  assert ('| new, 2 decays | 70.0 / 80.0 (70.0/80.0, 70.0/80.0, 71.0/81.0) '
          '| 69.0 / 79.0 (69.0/79.0, 69.0/79.0, 69.0/79.0) '
          '| 65.0 / 75.0 (65.0/75.0, 66.0/76.0, 64.0/74.0) | +5.0 | +1.0 |') in mrpc


def test_a_study_without_results_is_one_clear_error(tmp_path, capsys):
  compare = compare_studies
  with pytest.raises(SystemExit) as stopped:
    compare.main([f'--out={tmp_path / "x"}', f'--study=a={tmp_path}'])
  assert str(stopped.value) == (
      f"{tmp_path / 'results.json'} not found: --study wants a transfer study --out directory "
      'that has written its results.json (run python -m research.transfer_study --out=DIR)')
  with pytest.raises(SystemExit) as stopped:
    compare.main([f'--out={tmp_path / "x"}', f'--study={tmp_path}'])
  assert stopped.value.code == 2
  assert f'--study={tmp_path}: give LABEL=DIR' in capsys.readouterr().err
  assert not list(tmp_path.iterdir())  # nothing written
