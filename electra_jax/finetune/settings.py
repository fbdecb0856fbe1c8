"""The fine-tuning config resolved: fields left at 0 ('auto' for size) take ELECTRA's recipe for
the task and model size; DIR/config.json records the resolved numbers."""

import ml_collections

from electra_jax.common import config as config_lib
from electra_jax.common.errors import UsageError

# Fields of configs/finetune/glue.py that only GLUE's data and classifier read.
GLUE_ONLY = ('tfds_name', 'tfds_data_dir', 'max_train_examples', 'swap_pairs', 'predict_test',
             'head_dropout', 'pooling', 'head')

# Ranges of the numeric fields, as resolved (a 0 taking the recipe's value).
FINE_TUNING = {'learning_rate': '(0, inf)', 'num_epochs': '(0, inf)', 'layer_decay': '(0, 1]',
               'warmup_proportion': '[0, 1]', 'head_dropout': '[0, 1)',
               # Counts and sizes, SQuAD's and chunking's too (batch sizes: against the devices).
               **{name: '[1, inf)' for name in (
                   'max_seq_length', 'log_every', 'max_query_length', 'doc_stride', 'beam_size',
                   'n_best_size', 'max_answer_length')},
               **{name: '[0, inf)' for name in (  # 0: at the end only, or no limit
                   'save_every', 'max_train_examples', 'train_articles', 'dev_articles',
                   'max_train_sentences')},
               **config_lib.allowed('weight_decay', 'adam_b1', 'adam_b2', 'adam_eps',
                                    'max_grad_norm', 'on_nonfinite', 'max_consecutive_skips')}

# Per model size: peak learning rate and layer-wise decay (ELECTRA paper, Appendix).
SIZES = {'small': (3e-4, 0.8), 'base': (1e-4, 0.8), 'large': (5e-5, 0.9)}

# Fields added to the config files after runs were saved, at what those runs did: an older
# DIR/config.json, or a config file copied before, gets them in with_added_fields.
ADDED = {'reinit': '', 'dropout': -1.0, 'init_step': 0, 'compilation_cache_dir': '',
         'length_multiple': 0}
# GLUE's classifier's own (GLUE's config alone has tfds_name, as finetune/families.py tells).
GLUE_ADDED = {'pooling': 'cls', 'head': 'electra'}


def with_added_fields(fields: dict) -> dict:
  """A fine-tuning config's `fields` (its to_dict(), or a saved config.json) with those of ADDED
  (and GLUE_ADDED for GLUE) it lacks, so that the code reads every one as an attribute."""
  added = {**ADDED, **(GLUE_ADDED if 'tfds_name' in fields else {})}
  return {**fields, **{name: value for name, value in added.items() if name not in fields}}


def shared_recipe(glue_config_path: str) -> ml_collections.ConfigDict:
  """GLUE's config file without its GLUE-only fields: the start of the other task families'
  config files, so that the optimizer and the per-size recipe are written down once."""
  config = config_lib.load_config_file(glue_config_path)
  for name in GLUE_ONLY:
    del config[name]
  return config


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
  """A copy of `config` (with_added_fields) with task, size, learning rate, decay, epochs and
  init_step (the start's pretraining step: 0, the latest, moves as that run trains) explicit."""
  c = ml_collections.ConfigDict(with_added_fields(config.to_dict()))
  c.task = task.name
  if init_step is not None:
    c.init_step = init_step
  c.model = ml_collections.ConfigDict(model.to_dict())
  if c.size == 'auto':  # by the discriminator's width (smaller models count as small)
    width = model.hidden_size
    c.size = 'large' if width >= 1024 else 'base' if width >= 768 else 'small'
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
  if c.length_multiple < 0:
    raise UsageError(f'config.length_multiple={c.length_multiple}: use a positive multiple to cut '
                     "each batch to its longest example, or 0 for the training set's length")
  config_lib.check_allowed(c, FINE_TUNING)  # layer_decay 1 turns it off
  return c
