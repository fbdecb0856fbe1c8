"""One place for each pretraining field (common/config.py's FIELDS): a saved config is upgraded
once when read, so the library never repeats a default with `.get(field, default)` (issue 76)."""

import re

from conftest import REPO
from electra_jax import objective
from electra_jax.common import config as config_lib
from electra_jax.finetune import settings

# A `.get` with a literal key and a default, possibly across lines.
GET_WITH_DEFAULT = re.compile(r"""\.get\(\s*(['"])(\w+)\1\s*,""")
# The issue's count: `grep -rn "config.get(\|\.get('" electra_jax | wc -l`.
GREP = re.compile(r"config.get\(|\.get\('")
MOST_GETS = 15  # each left reads a field a user may leave unset on purpose (env, optional JSON)
FIELD_NAMES = {name.rsplit('.', 1)[-1] for name in config_lib.FIELDS}


def field_gets(text: str) -> list[str]:
  """The FIELDS leaf names that `text` reads with `.get(name, default)`."""
  return [m.group(2) for m in GET_WITH_DEFAULT.finditer(text) if m.group(2) in FIELD_NAMES]


def library_files():
  return [p for p in sorted((REPO / 'electra_jax').rglob('*'))
          if p.is_file() and '__pycache__' not in p.parts]


def test_the_scan_catches_a_default_repeated_for_a_declared_field():
  assert field_gets("x = config.get('mask_prob', 0.15)") == ['mask_prob']
  assert field_gets('x = config.data.get(\n    "local_dir", "")') == ['local_dir']
  assert field_gets("x = record.get('answers', ())") == []  # not a config field
  assert field_gets("x = config.get('mask_prob')") == []  # no default repeated


def test_no_library_module_repeats_a_fields_default_with_get():
  found = [f'{path.relative_to(REPO)}: .get({name!r}, ...)'
           for path in sorted((REPO / 'electra_jax').rglob('*.py'))
           for name in field_gets(path.read_text())]
  assert not found, ('read the attribute: config_lib.upgrade / read_saved give every field '
                     f'its default; {found}')


def test_few_gets_are_left_in_the_library():
  lines = [f'{path.relative_to(REPO)}: {line.strip()}' for path in library_files()
           for line in path.read_text(errors='replace').splitlines() if GREP.search(line)]
  assert len(lines) <= MOST_GETS, '\n'.join(lines)


def test_an_empty_saved_config_upgrades_to_the_defaults():
  upgraded = config_lib.upgrade({})
  assert upgraded.to_dict() == config_lib.default_config().to_dict()
  assert upgraded.generator_kind == 'joint'


def test_an_old_saved_config_upgrades_to_todays_spelling():
  frozen = config_lib.upgrade({'generator_kind': 'mlm', 'generator_init': '/x'})
  assert (frozen.generator_kind, frozen.embedding_sharing) == ('frozen', 'none')
  assert config_lib.upgrade({'two_stage_steps': 5}).generator_kind == 'two_stage'


def test_a_retired_field_in_a_saved_config_is_dropped():
  upgraded = config_lib.upgrade({'retired_switch': 1, 'model': {'old_size': 2, 'num_layers': 3}})
  assert 'retired_switch' not in upgraded and 'old_size' not in upgraded.model
  assert upgraded.model.num_layers == 3


def test_the_objective_choices_are_the_objectives():
  choices = [field.allowed for name, field in config_lib.FIELDS.items()
             if name.rsplit('.', 1)[-1] == 'objective']
  assert choices and all(tuple(c) == tuple(objective.OBJECTIVES) for c in choices)


def test_a_fine_tuning_config_without_the_newer_fields_reads_them_as_its_runs_had():
  """settings.with_added_fields fills a config.json or config file older than a field; GLUE's
  classifier fields go to GLUE's configs only, so chunk's config.json gains no head."""
  glue = config_lib.load_config_file(str(REPO / 'configs' / 'finetune' / 'glue.py')).to_dict()
  newer = {**settings.ADDED, **settings.GLUE_ADDED}
  old = {name: value for name, value in glue.items() if name not in newer}
  assert settings.with_added_fields(old) == {**old, **newer}
  assert settings.with_added_fields(glue) == glue  # a field set is kept
  chunk = config_lib.load_config_file(str(REPO / 'configs' / 'finetune' / 'chunk.py')).to_dict()
  assert settings.with_added_fields(chunk) == chunk and 'head' not in chunk
