"""electra_jax: ELECTRA pretraining in JAX.

Top-level modules are commands (python -m electra_jax.main, .prepare, ...); the packages are the
library: common/, model/, objective/, data/, training/, hf/, finetune/. docs/layout.md has the map.
"""

import importlib.abc
import importlib.machinery
import sys

# Modules that moved in the layout of CHANGELOG.md's "Unreleased": importing an old path fails
# with one line that names the new one, rather than "No module named ...".
MOVED = {
    'electra_jax.core.errors': 'electra_jax.common.errors',
    'electra_jax.core.cli': 'electra_jax.common.cli',
    'electra_jax.core.config': 'electra_jax.common.config',
    'electra_jax.core.storage': 'electra_jax.common.storage',
    'electra_jax.core.run_lock': 'electra_jax.common.run_lock',
    'electra_jax.core.bounds': 'electra_jax.common.bounds',
    'electra_jax.core.layers': 'electra_jax.model.layers',
    'electra_jax.core.model': 'electra_jax.model.networks',
    'electra_jax.core.optim': 'electra_jax.training.optim',
    'electra_jax.core.flops': 'electra_jax.training.flops',
    'electra_jax.core.validation': 'electra_jax.training.validation',
    'electra_jax.data.benchmark': 'benchmarks/data_pipeline.py (python benchmarks/data_pipeline.py)',
    'electra_jax.hf.finetuned': 'electra_jax.finetune.export',
    'electra_jax.finetune.train': ('electra_jax.finetune.loop (the shared loop) and '
                                   'electra_jax.finetune.glue.run (GLUE)'),
    'electra_jax.finetune.run': 'electra_jax.finetune.families',
    'electra_jax.finetune.glue_data': 'electra_jax.finetune.glue.data',
    'electra_jax.finetune.features': 'electra_jax.finetune.glue.features',
    'electra_jax.finetune.metrics': 'electra_jax.finetune.glue.metrics',
    'electra_jax.finetune.tasks': 'electra_jax.finetune.glue.tasks',
    'electra_jax.finetune.squad_data': 'electra_jax.finetune.squad.data',
    'electra_jax.finetune.squad_features': 'electra_jax.finetune.squad.features',
    'electra_jax.finetune.squad_metrics': 'electra_jax.finetune.squad.metrics',
    'electra_jax.finetune.squad_predict': 'electra_jax.finetune.squad.predict',
    'electra_jax.finetune.squad_run': 'electra_jax.finetune.squad.run',
    'electra_jax.finetune.qa_model': 'electra_jax.finetune.squad.model',
    'electra_jax.finetune.chunk_data': 'electra_jax.finetune.tagging.data',
    'electra_jax.finetune.chunk_metrics': 'electra_jax.finetune.tagging.metrics',
    'electra_jax.finetune.chunk_run': 'electra_jax.finetune.tagging.run',
}


# A package that is gone, every module of which moved: it imports empty, so that importing one
# of its modules reaches MOVED.
GONE_PACKAGES = ('electra_jax.core',)


class _MovedModules(importlib.abc.MetaPathFinder):

  def find_spec(self, name, path=None, target=None):
    if name in MOVED:
      # No name=: `from package import module` would swallow the error as a missing attribute.
      raise ModuleNotFoundError(f'{name} has moved: use {MOVED[name]}')
    if name in GONE_PACKAGES:
      return importlib.machinery.ModuleSpec(name, None, is_package=True)
    return None


sys.meta_path.insert(0, _MovedModules())
