"""Which task family `config.task` names (each has its configs/finetune/<family>.py), and that
family's fine-tuning."""

from absl import logging
import ml_collections

from electra_jax.common import storage
from electra_jax.common.errors import UsageError
from electra_jax.finetune import settings
from electra_jax.finetune.glue import run as glue_run, tasks
from electra_jax.finetune.squad import run as squad_run
from electra_jax.finetune.tagging import run as chunk_run
from electra_jax.training import compile_cache

# A field only the family's config file has, to tell a config file meant for another family.
_FAMILIES = {'glue': ('tfds_name', glue_run.fine_tune),
             'squad': ('doc_stride', squad_run.fine_tune),
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
  settings.parse_seeds(config.seeds)  # a typo fails before the start (a checkpoint) loads
  # A config file copied before a field existed: settings.ADDED's value, as its runs had.
  config = ml_collections.ConfigDict(settings.with_added_fields(config.to_dict()))
  cache_setting = config.compilation_cache_dir
  storage.check_uri(cache_setting, '--config.compilation_cache_dir')
  hits = compile_cache.hits()
  summary = run(config, workdir)  # points the cache at its place once DIR is accepted
  cache = compile_cache.cache_dir(cache_setting, workdir)
  if cache:
    logging.info('%d compiled programs read from the compilation cache at %s',
                 compile_cache.hits() - hits, cache)
  return summary
