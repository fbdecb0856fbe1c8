"""The fine-tuning config resolved: the paper's recipe filled in for the task and model size.

Fields left at 0 ('auto' for size) take the values of ELECTRA's fine-tuning recipe; the
resolved config, with every number used, is what DIR/config.json records.
"""

import ml_collections

from electra_jax.training import nonfinite
from electra_jax.common import bounds
from electra_jax.common.config import load_config_file
from electra_jax.common.errors import UsageError

# Fields of configs/finetune/glue.py that only GLUE's data and classifier read.
GLUE_ONLY = ('tfds_name', 'tfds_data_dir', 'max_train_examples', 'swap_pairs', 'predict_test',
             'head_dropout', 'pooling', 'head')

# Per model size: peak learning rate and layer-wise decay (ELECTRA paper, Appendix).
SIZES = {'small': (3e-4, 0.8), 'base': (1e-4, 0.8), 'large': (5e-5, 0.9)}


def shared_recipe(glue_config_path: str) -> ml_collections.ConfigDict:
  """GLUE's config file without its GLUE-only fields: the start of the other task families'
  config files, so that the optimizer and the per-size recipe are written down once."""
  config = load_config_file(glue_config_path)
  for name in GLUE_ONLY:
    del config[name]
  return config


def infer_size(model: ml_collections.ConfigDict) -> str:
  """small / base / large by the discriminator's width (smaller models count as small)."""
  if model.hidden_size >= 1024:
    return 'large'
  return 'base' if model.hidden_size >= 768 else 'small'


def parse_seeds(seeds: str) -> list[int]:
  try:
    parsed = [int(s) for s in str(seeds).replace(' ', '').split(',') if s]
  except ValueError:
    parsed = []
  if not parsed or len(set(parsed)) != len(parsed):
    raise UsageError(f'config.seeds={seeds!r}: give distinct integers separated by commas, '
                     'e.g. --config.seeds=0,1,2,3,4')
  return parsed


def resolve(config: ml_collections.ConfigDict, task, model: ml_collections.ConfigDict,
            num_devices: int, init_step: int | None = None) -> ml_collections.ConfigDict:
  """A copy of `config` with task, size, learning rate, decay and epochs made explicit, and
  init_step with the checkpoint a pretraining run's start was loaded from (`init_step`).
  `task` is any family's: its `name` and default `epochs` are read. A family checks the fields
  of its own head (glue/run.py's resolve, squad/run.py's check).

  init_step 0 means the run's latest checkpoint, which moves while the run trains on; recorded
  as a step, it lets a rerun tell seeds begun from an older checkpoint from its own.
  """
  c = ml_collections.ConfigDict(config.to_dict())
  c.task = task.name
  if init_step is not None:
    c.init_step = init_step
  c.model = ml_collections.ConfigDict(model.to_dict())
  if c.size == 'auto':
    c.size = infer_size(model)
  if c.size not in SIZES:
    raise UsageError(f"config.size={c.size!r}: use 'auto', 'small', 'base' or 'large'")
  learning_rate, layer_decay = SIZES[c.size]
  c.learning_rate = c.learning_rate or learning_rate
  c.layer_decay = c.layer_decay or layer_decay
  c.num_epochs = c.num_epochs or float(task.epochs)
  parse_seeds(c.seeds)
  if c.dtype not in ('float32', 'bfloat16'):
    raise UsageError(f"config.dtype={c.dtype!r}: use 'float32' or 'bfloat16'")
  if c.max_seq_length > model.max_position_embeddings:
    raise UsageError(f'config.max_seq_length={c.max_seq_length} exceeds the model\'s '
                     f'max_position_embeddings={model.max_position_embeddings}')
  for name in ('batch_size', 'eval_batch_size'):
    if c[name] <= 0 or c[name] % num_devices:
      raise UsageError(f'config.{name}={c[name]} must be a positive multiple of the '
                       f'{num_devices} devices')
  if c.get('length_multiple', 0) < 0:
    raise UsageError(f'config.length_multiple={c.length_multiple}: use a positive multiple to cut '
                     "each batch to its longest example, or 0 for the training set's length")
  bounds.check(c, {**bounds.OPTIMIZER, **bounds.FINE_TUNING})  # layer_decay 1 turns it off
  nonfinite.validate(c)
  return c
