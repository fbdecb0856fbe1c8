"""The library's floors (docs/layout.md): each package imports only the floors below it, and an
old module path fails with one line that names the new one."""

import ast
import subprocess
import sys

import pytest

from conftest import REPO
import electra_jax

# Lowest first. A module may import its own package and any package before it.
FLOORS = ('common', 'model', 'objective', 'data', 'training', 'hf', 'finetune')
COMMANDS = ('main', 'prepare', 'export', 'import_hf', 'finetune_summary', 'benchmark', 'compile')


def floor_of(module: str) -> int:
  parts = module.split('.')
  if len(parts) < 2:
    return len(FLOORS)
  if parts[1] in COMMANDS:
    return len(FLOORS)
  return FLOORS.index(parts[1])


def library_imports():
  """(importing module, imported module) for every electra_jax import in the package."""
  for path in sorted((REPO / 'electra_jax').rglob('*.py')):
    relative = path.relative_to(REPO).with_suffix('')
    module = '.'.join(relative.parts).removesuffix('.__init__')
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('electra_jax'):
        yield module, node.module
      elif isinstance(node, ast.Import):
        yield from ((module, a.name) for a in node.names if a.name.startswith('electra_jax'))


def test_every_package_has_a_floor():
  packages = {p.name for p in (REPO / 'electra_jax').iterdir()
              if p.is_dir() and (p / '__init__.py').exists()}
  assert packages == set(FLOORS)
  commands = {p.stem for p in (REPO / 'electra_jax').glob('*.py')} - {'__init__'}
  assert commands == set(COMMANDS)


def test_no_import_runs_up_a_floor():
  upward = [(a, b) for a, b in library_imports()
            if b != 'electra_jax' and floor_of(b) > floor_of(a)]
  assert not upward, upward


def test_the_library_never_imports_a_command():
  into_commands = [(a, b) for a, b in library_imports()
                   if floor_of(a) < len(FLOORS) and floor_of(b) == len(FLOORS) and b != 'electra_jax']
  assert not into_commands, into_commands


def test_fine_tuning_shares_one_loop_and_the_families_do_not_import_each_other():
  families = ('glue', 'squad', 'tagging')
  crossing = []
  for a, b in library_imports():
    pa, pb = a.split('.'), b.split('.')
    if len(pa) > 3 and pa[1] == 'finetune' and pa[2] in families:
      if len(pb) > 2 and pb[1] == 'finetune' and pb[2] in families and pb[2] != pa[2]:
        crossing.append((a, b))
  assert not crossing, crossing


# The shared fine-tuning modules that reach into a family: the dispatcher, and the two that act
# on GLUE's recipe (aot compiles its step; export reads its task's labels).
READS_A_FAMILY = ('families', 'aot', 'export')


def test_the_shared_fine_tuning_modules_import_no_family():
  families = ('glue', 'squad', 'tagging')
  into_a_family = []
  for a, b in library_imports():
    pa, pb = a.split('.'), b.split('.')
    if (len(pa) == 3 and pa[1] == 'finetune' and pa[2] not in families + READS_A_FAMILY
        and len(pb) > 2 and pb[1] == 'finetune' and pb[2] in families):
      into_a_family.append((a, b))
  assert not into_a_family, into_a_family


@pytest.mark.parametrize('old', sorted(electra_jax.MOVED))
def test_an_old_module_path_names_its_new_one(old):
  with pytest.raises(ModuleNotFoundError, match=f'{old} has moved: use '):
    __import__(old)


def test_the_usual_import_forms_of_an_old_path_name_the_new_one():
  with pytest.raises(ModuleNotFoundError, match='electra_jax.core.config has moved: use '
                                                'electra_jax.common.config'):
    from electra_jax.core import config  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  with pytest.raises(ModuleNotFoundError, match='electra_jax.finetune.glue_data has moved'):
    from electra_jax.finetune.glue_data import load  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import


def test_an_old_module_path_fails_in_one_line_from_the_command_line():
  result = subprocess.run([sys.executable, '-m', 'electra_jax.data.benchmark'], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode != 0
  assert result.stderr.strip().count('\n') == 0, result.stderr
  assert 'benchmarks/data_pipeline.py' in result.stderr


def test_new_module_paths_import():
  for new in ('electra_jax.common.config', 'electra_jax.model.networks', 'electra_jax.training.optim',
              'electra_jax.training.flops', 'electra_jax.training.validation',
              'electra_jax.data.run_vocab', 'electra_jax.finetune.export',
              'electra_jax.finetune.glue.data', 'electra_jax.finetune.glue.model',
              'electra_jax.finetune.glue.run', 'electra_jax.finetune.squad.run',
              'electra_jax.finetune.tagging.model', 'electra_jax.finetune.tagging.run'):
    __import__(new)
