"""Which task family `config.task` names, and that family's fine-tuning.

GLUE tasks use configs/finetune/glue.py, squad_v1 and squad_v2 configs/finetune/squad.py, chunk
configs/finetune/chunk.py: each family's config holds the fields its data and head need.
"""

import ml_collections

from electra_jax.core.errors import UsageError
from electra_jax.finetune import chunk_run, squad_run, tasks, train

# A field only the family's config file has, to tell a config file meant for another family.
_FAMILIES = {'glue': ('tfds_name', train.fine_tune), 'squad': ('doc_stride', squad_run.fine_tune),
             'chunk': ('tag_encoding', chunk_run.fine_tune)}


def family(task: str) -> str:
  if squad_run.get_task(task) is not None:
    return 'squad'
  if chunk_run.is_task(task):
    return 'chunk'
  try:
    tasks.get_task(task)
  except UsageError as e:
    raise UsageError(f'{e}; or squad_v1, squad_v2 (configs/finetune/squad.py) or chunk '
                     '(configs/finetune/chunk.py)') from None
  return 'glue'


def fine_tune(config: ml_collections.ConfigDict, workdir: str) -> dict:
  name = family(config.task)
  field, run = _FAMILIES[name]
  if field not in config:
    raise UsageError(f"--config.task={config.task} is a {name} task: pass "
                     f'--config=configs/finetune/{name}.py')
  return run(config, workdir)
