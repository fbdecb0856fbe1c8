"""A frozen pretrained generator, config.generator_init=DIR: Fast-ELECTRA (Dong et al., 2023,
"Fast-ELECTRA for Efficient Pre-training", https://arxiv.org/abs/2310.07347).

ELECTRA trains its generator jointly with the discriminator. Fast-ELECTRA takes an existing
masked LM instead and keeps it frozen. Replacements are sampled from softmax(logits / T), and T
is annealed downward over training (config.temperature_start -> config.temperature,
objective/masking.scheduled_temperature). The run's parameters hold the generator under the
GENERATOR names. embedding_sharing='none' means no weight is shared with the discriminator.
The step differentiates `trainable(params)` alone, and only those get optimizer state. The new
parameters are `merge(new trainable, old frozen)`, so the generator stays bitwise what was loaded.
The checkpoint holds it, so it is loaded only when a run starts.

What DIR may be (`load`):
  - a workdir of one of our runs: objective 'mlm' (its embeddings, encoder and MLM head), or
    'electra' / 'electra_15' (its generator, named as networks.generator_view names it). Only its
    parameters are read, from its latest checkpoint;
  - a Hugging Face ElectraForMaskedLM or BertForMaskedLM directory, read by
    hf/generator_source.py. Training may not import hf (the floor above it), so the caller
    passes that reader in: electra_jax.main does.
Before anything is written, two things are checked. The source's vocabulary must be the run's
(by fingerprint), and its network must have the run's generator's shape. Each mismatch raises
one UsageError that names the fix.
"""

import json
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from absl import logging
import jax
import ml_collections

from electra_jax.common import config as config_lib, storage
from electra_jax.common.errors import UsageError
from electra_jax.data import run_vocab, vocab as vocab_lib
from electra_jax.model import networks
from electra_jax.training import checkpoint

GENERATOR = ('generator_embeddings', 'generator', 'generator_head')
# Our runs' subtrees -> the generator's, by the source's objective (ELECTRA's after generator_view).
RENAMED = {
    'mlm': {'embeddings': 'generator_embeddings', 'discriminator': 'generator',
            'mlm_head': 'generator_head'},
    'electra': {'embeddings': 'generator_embeddings', 'generator': 'generator',
                'generator_head': 'generator_head'},
}
RUN_OBJECTIVES = ('mlm', 'electra', 'electra_15')
VOCAB_FILES = ('vocab.model', 'vocab.txt')  # what a Hugging Face directory of ours holds


class Shape(NamedTuple):
  """What fixes a generator's tensors, and its heads, which no tensor shape shows."""
  width: int
  heads: int
  ffn: int
  layers: int
  embedding_size: int
  vocab_size: int
  max_position_embeddings: int
  type_vocab_size: int


class Source(NamedTuple):
  params: dict[str, Any]  # numpy arrays under the GENERATOR names
  shape: Shape
  name: str               # what it is, for messages


# Reads a Hugging Face directory against the run's `model` config section (hf/generator_source).
HFReader = Callable[[str, ml_collections.ConfigDict], Source]


def enabled(config: ml_collections.ConfigDict) -> bool:
  return bool(config.get('generator_init', ''))  # config.json of older runs lacks the field


def trainable(params: dict) -> dict:
  """The top-level entries the step trains: all but the generator's."""
  return {name: value for name, value in params.items() if name not in GENERATOR}


def frozen(params: dict) -> dict:
  return {name: value for name, value in params.items() if name in GENERATOR}


def merge(trainable_params: dict, frozen_params: dict) -> dict:
  return {**trainable_params, **frozen_params}


def with_frozen(loss_fn: Callable, frozen_params: dict) -> Callable:
  """loss_fn(params, ...) as a function of the trainable entries, the generator held constant."""
  return lambda trainable_params, *args: loss_fn(merge(trainable_params, frozen_params), *args)


def generator_shape(m: ml_collections.ConfigDict) -> Shape:
  """The run's generator (networks.generator_encoder): generator_width wide, heads width // 64,
  a 4x FFN, generator_depth layers."""
  width = networks.generator_width(m)
  return Shape(width, max(1, width // 64), 4 * width, networks.generator_depth(m),
               m.embedding_size, m.vocab_size, m.max_position_embeddings, m.type_vocab_size)


def _saved_config(directory: str) -> dict:
  path = os.path.join(directory, 'config.json')
  if not storage.is_file(path):
    raise UsageError(f"config.generator_init='{directory}' has no config.json; pass the workdir "
                     'of an mlm or electra run, or a Hugging Face ElectraForMaskedLM or '
                     'BertForMaskedLM directory')
  try:
    saved = json.loads(storage.read_text(path))
  except ValueError as e:
    raise UsageError(f"cannot read '{path}' ({e}); it must be a JSON object") from None
  if not isinstance(saved, dict):
    raise UsageError(f"'{path}' is not a JSON object")
  return saved


def is_hugging_face(directory: str) -> bool:
  """A transformers config.json has a model_type; a run's config.json never does."""
  return 'model_type' in _saved_config(directory)


def source_vocab(directory: str) -> str:
  """The vocabulary file the generator in `directory` was trained with."""
  if is_hugging_face(directory):
    found = [os.path.join(directory, n) for n in VOCAB_FILES
             if os.path.isfile(os.path.join(directory, n))]
    if not found:
      raise UsageError(f"config.generator_init='{directory}' holds no vocabulary "
                       f"({' or '.join(VOCAB_FILES)}); put the one the generator was trained "
                       'with beside its weights (export writes it there)')
    return found[0]
  path = run_vocab.run_vocab_path(directory)
  if not storage.exists(path):
    raise UsageError(f"config.generator_init='{directory}' holds no vocabulary (vocab.model or "
                     'vocab.txt); pass a run that has trained, or a directory export wrote')
  return path


def with_source_vocab(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config`, or, where it names no vocabulary (no data.vocab_model, no prepared_dir), a copy
  whose data.vocab_model is the generator's own: the run must read the generator's ids."""
  if not enabled(config) or config.data.vocab_model or config.data.prepared_dir:
    return config
  path = source_vocab(config.generator_init)
  logging.info('config.data.vocab_model is unset: using the frozen generator\'s vocabulary, %s',
               path)
  config = config.copy_and_resolve_references()
  config.data.vocab_model = path
  return config


def _run_vocab_file(config: ml_collections.ConfigDict, workdir: str) -> str:
  """The vocabulary the run will read (run_vocab.setup_vocab's choice), '' if it trains one."""
  existing = run_vocab.run_vocab_path(workdir)
  if storage.exists(existing):
    return run_vocab.local_copy(existing, run_vocab.local_dir(config, workdir))
  if config.data.vocab_model:
    return config.data.vocab_model
  for name in VOCAB_FILES:
    if config.data.prepared_dir and os.path.exists(os.path.join(config.data.prepared_dir, name)):
      return os.path.join(config.data.prepared_dir, name)
  return ''


def check_vocab(config: ml_collections.ConfigDict, workdir: str):
  """The run reads the ids the generator was trained on, or one UsageError names both files."""
  directory, theirs = config.generator_init, source_vocab(config.generator_init)
  ours = _run_vocab_file(config, workdir)
  if storage.is_uri(ours):
    return  # a data.vocab_model at a URI: run_vocab.setup_vocab refuses it, naming the fix
  if not ours:
    raise UsageError(f'this run would train a vocabulary of its own, and the frozen generator in '
                     f"'{directory}' reads {theirs}; pass --config.data.vocab_model={theirs}")
  fingerprint = lambda path: vocab_lib.vocab_fingerprint(vocab_lib.load_vocab(path))
  if fingerprint(ours) != fingerprint(theirs):
    raise UsageError(f"the frozen generator in '{directory}' was trained on the vocabulary "
                     f'{theirs}, and this run reads another, {ours} (other pieces or ids); pass '
                     f'--config.data.vocab_model={theirs} (with data prepared with it) or a '
                     'new --workdir')


def read_run(directory: str) -> Source:
  """The generator of one of our runs: an MLM run's whole network, an ELECTRA run's generator."""
  saved = _saved_config(directory)
  objective = config_lib.saved_objective(saved)
  if objective not in RUN_OBJECTIVES or saved.get('generator_kind', 'mlm') != 'mlm':
    what = (f"objective {objective!r}" if objective not in RUN_OBJECTIVES
            else "generator_kind 'unigram' (no generator network)")
    raise UsageError(f"config.generator_init='{directory}' holds a run of {what}; pass a run of "
                     f"objective {', '.join(RUN_OBJECTIVES)}, or a Hugging Face "
                     'ElectraForMaskedLM or BertForMaskedLM directory')
  manager = checkpoint.make_manager(directory, saved.get('keep_checkpoints', 3))
  try:
    step = manager.latest_step()
    if step is None:
      raise UsageError(f"config.generator_init='{directory}' has no finished checkpoint yet; "
                       'train that run until its first save (config.save_every)')
    # Only the parameters (no optimizer state), in the shapes the checkpoint has.
    params = checkpoint.restore_params(manager, step, manager.item_metadata(step)['params'])
  finally:
    manager.close()
  m = ml_collections.ConfigDict(saved['model'])
  if objective == 'mlm':
    renamed = RENAMED['mlm']
    shape = Shape(m.hidden_size, m.num_heads, m.intermediate_size, m.num_layers,
                  m.embedding_size, m.vocab_size, m.max_position_embeddings, m.type_vocab_size)
  else:
    params, renamed, shape = networks.generator_view(params), RENAMED['electra'], generator_shape(m)
  return Source({new: params[old] for old, new in renamed.items()}, shape,
                f"the {objective} run in '{directory}' (step {step})")


def _fix(have: Shape, m: ml_collections.ConfigDict) -> str:
  """The flags that give the run a generator of shape `have`, or why none can."""
  if have.heads != max(1, have.width // 64) or have.ffn != 4 * have.width:
    return ("electra_jax's generator has max(1, width // 64) heads and a 4 x width FFN, so no "
            f'setting holds {have.heads} heads and a {have.ffn}-wide FFN at width {have.width}; '
            'start from a network shaped that way')
  want = generator_shape(m)
  flags = []
  if have.width != want.width:
    flags.append(f'--config.model.generator_hidden_size={have.width}')
  if have.layers != want.layers:  # a count above 1, else a fraction of num_layers
    flags.append('--config.model.generator_layers='
                 f'{have.layers if have.layers > 1 else have.layers / m.num_layers}')
  for field in ('embedding_size', 'vocab_size', 'max_position_embeddings', 'type_vocab_size'):
    if getattr(have, field) != getattr(want, field):
      flags.append(f'--config.model.{field}={getattr(have, field)}')
  return 'set ' + ' '.join(flags)


def check_fits(source: Source, config: ml_collections.ConfigDict, target: dict):
  """`source` has the run's generator's shape: sizes first (they name the fix), then every array."""
  want = generator_shape(config.model)
  if source.shape != want:
    differences = ', '.join(f'{field} {have} (the run\'s generator: {ours})'
                            for field, have, ours in zip(Shape._fields, source.shape, want)
                            if have != ours)
    raise UsageError(f'config.generator_init: {source.name} does not fit this run\'s generator: '
                     f'{differences}; {_fix(source.shape, config.model)}')
  problems = checkpoint.shape_mismatches(source.params, {k: target[k] for k in GENERATOR},
                                         'source', "run's generator")
  if problems:
    raise UsageError(f'config.generator_init: {source.name} does not fit this run\'s generator: '
                     f'{problems}')


def load(config: ml_collections.ConfigDict, target: dict, workdir: str,
         read_hf: HFReader | None = None) -> dict[str, Any]:
  """The frozen generator's weights (numpy, the GENERATOR subtrees) for a run in `workdir` whose
  parameters have `target`'s shapes, checked against the run's vocabulary and model."""
  directory = config.generator_init
  check_vocab(config, workdir)
  if is_hugging_face(directory):
    if read_hf is None:
      raise ValueError(f"'{directory}' is a Hugging Face directory: pass its reader, "
                       'read_hf=electra_jax.hf.generator_source.read (electra_jax.main does)')
    source = read_hf(directory, config.model)
  else:
    source = read_run(directory)
  check_fits(source, config, target)
  logging.info('the generator is frozen: %s parameters from %s', f'{_count(source.params):,}',
               source.name)
  return source.params


def _count(params) -> int:
  return sum(x.size for x in jax.tree.leaves(params))
