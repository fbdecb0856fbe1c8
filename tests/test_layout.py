"""The library's floors (docs/layout.md): each package imports only the floors below it; a
module that moved is gone from its old path, and CHANGELOG.md's table says where it went."""

import ast
import re

import pytest

from conftest import REPO

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


# The old paths of CHANGELOG.md's "Modules moved" (a row may list several of one package).
MOVED = ('electra_jax.core.errors', 'electra_jax.core.cli', 'electra_jax.core.config',
         'electra_jax.core.storage', 'electra_jax.core.run_lock', 'electra_jax.core.bounds',
         'electra_jax.core.layers', 'electra_jax.core.model', 'electra_jax.core.optim',
         'electra_jax.core.flops', 'electra_jax.core.validation', 'electra_jax.data.benchmark',
         'electra_jax.data.sentences', 'electra_jax.data.prepared_dir',
         'electra_jax.data.wordpiece', 'electra_jax.common.bounds',
         'electra_jax.training.two_stage', 'electra_jax.training.frozen_generator',
         'electra_jax.objective.electra_15', 'electra_jax.training.health',
         'electra_jax.hf.finetuned', 'electra_jax.hf.generator_source',
         'electra_jax.finetune.train', 'electra_jax.finetune.run',
         'electra_jax.finetune.glue_data', 'electra_jax.finetune.features',
         'electra_jax.finetune.metrics', 'electra_jax.finetune.tasks',
         'electra_jax.finetune.squad_data', 'electra_jax.finetune.squad_features',
         'electra_jax.finetune.squad_metrics', 'electra_jax.finetune.squad_predict',
         'electra_jax.finetune.squad_run', 'electra_jax.finetune.qa_model',
         'electra_jax.finetune.chunk_data', 'electra_jax.finetune.chunk_metrics',
         'electra_jax.finetune.chunk_run', 'electra_jax.finetune.model',
         'electra_jax.finetune.results', 'electra_jax.finetune.glue.results',
         'electra_jax.finetune.glue.metrics', 'electra_jax.finetune.tagging.model',
         'electra_jax.training.validation', 'electra_jax.training.rng',
         'electra_jax.training.nonfinite', 'electra_jax.training.batches', 'electra_jax.data.pipeline',
         'electra_jax.data.run_vocab', 'electra_jax.data.tfds_source')


@pytest.mark.parametrize('old', MOVED)
def test_an_old_module_path_is_gone_and_the_changelog_says_where_it_went(old):
  with pytest.raises(ModuleNotFoundError):
    __import__(old)
  table = (REPO / 'CHANGELOG.md').read_text().split('### Modules moved', 1)[1].split('###', 1)[0]
  package, name = old.rsplit('.', 1)
  assert any(f'| `{old}`' in row or (f'| `{package}.' in row and f'`{name}`' in row)
             for row in table.splitlines()), old


def test_new_module_paths_import():
  for new in ('electra_jax.common.config', 'electra_jax.model.networks', 'electra_jax.training.optim',
              'electra_jax.training.flops', 'electra_jax.training.inputs',
              'electra_jax.data.sources', 'electra_jax.finetune.export',
              'electra_jax.finetune.glue.data', 'electra_jax.finetune.glue.model',
              'electra_jax.finetune.glue.run', 'electra_jax.finetune.squad.run',
              'electra_jax.finetune.tagging.run'):
    __import__(new)


def documented_modules() -> tuple[set[str], set[str]]:
  """(every module docs/layout.md's tree names, in its folder; the files its entries name).

  A folder's entry may list its modules inline ('glue/  run.py (...), tasks.py, ...'), on its
  line and the lines that continue it."""
  text = (REPO / 'docs' / 'layout.md').read_text()
  tree = text.split('```')[1].splitlines()[1:]  # below 'electra_jax/'
  folders, named, entries, current = [], set(), set(), ''
  for line in tree:
    marker = max(line.find('├── '), line.find('└── '))
    if marker >= 0:
      depth = marker // 4
      entry = line[marker + 4:].split()[0]
      folders = folders[:depth]
      parent = '/'.join(folders)
      if entry.endswith('/'):
        folders.append(entry.rstrip('/'))
        current = '/'.join(folders)
      else:
        current = parent
        entries.add(f'{parent}/{entry}'.lstrip('/'))
    named |= {f'{current}/{name}'.lstrip('/') for name in re.findall(r'\b(\w+\.py)\b', line)
              if marker < 0 or line[marker + 4:].split()[0].endswith('/')}
  return named | entries, entries


def test_docs_layout_names_every_module_in_its_folder():
  modules = {str(p.relative_to(REPO / 'electra_jax')) for p in (REPO / 'electra_jax').rglob('*.py')
             if p.name != '__init__.py'}
  named, entries = documented_modules()
  assert not modules - named, f'modules docs/layout.md does not name: {sorted(modules - named)}'
  assert not entries - modules, f'docs/layout.md names missing files: {sorted(entries - modules)}'
