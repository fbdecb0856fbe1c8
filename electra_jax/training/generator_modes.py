"""How the generator is made and trained (config.generator_kind), as the train step sees it.

Each mode is a `Mode` of five functions of the step number (a traced value, so a run compiles
once), and the step calls them whatever the mode (docs/training.md describes each):
  joint      the paper's: one loss, one optimizer over both networks.
  unigram    no generator network (objective/unigram.py draws the replacements): as joint.
  frozen     a pretrained masked LM read from generator_init (Fast-ELECTRA): a constant of the
             step, with no gradients and no optimizer state, bitwise what was loaded.
  two_stage  steps 0 .. n-1 train the generator alone; step n initialises the discriminator's
             embeddings and encoder with the generator's; steps n, ... train the discriminator.
Two-stage needs no change to the losses: the MLM loss never reaches the discriminator's weights,
nor the RTD loss the generator's. The network not in training gets zero gradients and its
parameters are held bitwise (momentum and weight decay would still move them).

A frozen generator's source is one of our runs (an MLM run's network, an ELECTRA run's
generator) or a Hugging Face directory, read by hf/importing.py (a floor above: main passes the
reader in). Its vocabulary and shapes are checked before anything is written.
"""

import os
from collections.abc import Callable
from typing import Any, NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections

from electra_jax.common import config as config_lib, storage
from electra_jax.common.errors import UsageError
from electra_jax.data import vocab as vocab_lib
from electra_jax.model import networks
from electra_jax.training import checkpoint, inputs

GENERATOR = ('generator_embeddings', 'generator', 'generator_head')
# What the discriminator takes from the generator when stage 2 begins.
INITIALISED_FROM = {'embeddings': 'generator_embeddings', 'discriminator': 'generator'}


class Mode(NamedTuple):
  start: Callable     # (params, step) -> the parameters the step starts from
  trained: Callable   # params -> the entries that get gradients and optimizer state
  merged: Callable    # (trained, params) -> what the loss reads: the trained with the rest
  gradients: Callable  # (grads, step) -> the gradients the optimizer sees
  updated: Callable   # (new trained, params the step started from, step) -> the new parameters


def _held(params: dict) -> dict:
  return {name: value for name, value in params.items() if name in GENERATOR}


def trainable(params: dict) -> dict:
  """A frozen generator's run: the entries the step trains, all but the generator's."""
  return {name: value for name, value in params.items() if name not in GENERATOR}


JOINT = Mode(start=lambda params, step: params, trained=lambda params: params,
             merged=lambda trained, params: trained, gradients=lambda grads, step: grads,
             updated=lambda new, params, step: new)
FROZEN = JOINT._replace(trained=trainable,
                        merged=lambda trained, params: {**trained, **_held(params)},
                        updated=lambda new, params, step: {**new, **_held(params)})


def two_stage(steps: int) -> Mode:
  """The two-stage mode whose generator trains alone for `steps` steps."""

  def start(params, step):
    begins = step == steps
    params = dict(params)
    for target, source in INITIALISED_FROM.items():
      params[target] = jax.tree.map(lambda s, t: jnp.where(begins, s, t), params[source],
                                    params[target])
    return params

  def pick(step, in_training: dict, other: dict) -> dict:
    """Each entry from `in_training` for the network in training at `step`, else from `other`."""
    generator_trains = step < steps
    return {name: jax.tree.map(
        lambda a, b, t=(generator_trains if name in GENERATOR else ~generator_trains):
        jnp.where(t, a, b), in_training[name], other[name]) for name in in_training}

  return JOINT._replace(
      start=start,
      gradients=lambda grads, step: pick(step, grads, jax.tree.map(jnp.zeros_like, grads)),
      updated=lambda new, params, step: pick(step, new, params))


def mode(config: ml_collections.ConfigDict) -> Mode:
  if config.generator_kind == 'two_stage':
    return two_stage(config.two_stage_steps)
  return FROZEN if config.generator_kind == 'frozen' else JOINT


# ---- a frozen generator's source, read and checked -----------------------------------------

# Our runs' subtrees -> the generator's, by the source's objective (ELECTRA's after generator_view).
RENAMED = {
    'mlm': {'embeddings': 'generator_embeddings', 'discriminator': 'generator',
            'mlm_head': 'generator_head'},
    'electra': {'embeddings': 'generator_embeddings', 'generator': 'generator',
                'generator_head': 'generator_head'},
}
RUN_OBJECTIVES = ('mlm', 'electra', 'electra_15')


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


# Reads a Hugging Face directory against the run's `model` config section (hf/importing.read_generator).
HFReader = Callable[[str, ml_collections.ConfigDict], Source]


def _shape(m: ml_collections.ConfigDict, width: int, heads: int, ffn: int, layers: int) -> Shape:
  if m.architecture == 'modern':  # RoPE: no position or token-type table, one width throughout
    return Shape(width, heads, ffn, layers, width, m.vocab_size, 0, 0)
  return Shape(width, heads, ffn, layers, m.embedding_size, m.vocab_size,
               m.max_position_embeddings, m.type_vocab_size)


def generator_shape(m: ml_collections.ConfigDict) -> Shape:
  """The shape of the run's generator (networks.generator_encoder builds it)."""
  return _shape(m, config_lib.generator_width(m), *config_lib.generator_heads_and_ffn(m),
                config_lib.generator_depth(m))


def _hf_config(directory: str) -> dict | None:
  """A transformers config.json (it has a model_type, a run's never does), or None for a run."""
  path = os.path.join(directory, 'config.json')
  if not storage.is_file(path):
    raise UsageError(f"config.generator_init='{directory}' has no config.json; pass the workdir "
                     'of an mlm or electra run, or a Hugging Face ElectraForMaskedLM or '
                     'BertForMaskedLM directory')
  saved = config_lib.read_json_object(path)
  return saved if 'model_type' in saved else None


def _saved_run(directory: str) -> ml_collections.ConfigDict:
  """The config of the run in `directory`, which must have trained a generator network."""
  saved = config_lib.read_saved(directory)
  if saved.objective not in RUN_OBJECTIVES or saved.generator_kind == 'unigram':
    what = (f'objective {saved.objective!r}' if saved.objective not in RUN_OBJECTIVES
            else "generator_kind 'unigram' (no generator network)")
    raise UsageError(f"config.generator_init='{directory}' holds a run of {what}; pass a run of "
                     f"objective {', '.join(RUN_OBJECTIVES)}, or a Hugging Face "
                     'ElectraForMaskedLM or BertForMaskedLM directory')
  return saved


def source_shape(directory: str) -> Shape:
  """The shape of the generator in `directory`, from its config.json alone."""
  hf = _hf_config(directory)
  if hf is not None and hf['model_type'] == 'modernbert':
    return Shape(hf['hidden_size'], hf['num_attention_heads'], hf['intermediate_size'],
                 hf['num_hidden_layers'], hf['hidden_size'], hf['vocab_size'], 0, 0)
  if hf is not None:  # BERT has no embedding_size: its embeddings are hidden_size wide
    return Shape(hf['hidden_size'], hf['num_attention_heads'], hf['intermediate_size'],
                 hf['num_hidden_layers'], hf.get('embedding_size') or hf['hidden_size'],
                 hf['vocab_size'], hf['max_position_embeddings'], hf['type_vocab_size'])
  saved = _saved_run(directory)
  m = saved.model
  if saved.objective == 'mlm':
    return _shape(m, m.hidden_size, m.num_heads, m.intermediate_size, m.num_layers)
  return generator_shape(m)


def source_vocab(directory: str) -> str:
  """The vocabulary file the generator in `directory` was trained with."""
  if _hf_config(directory) is not None:
    if not (found := inputs.vocab_in(directory)):
      raise UsageError(f"config.generator_init='{directory}' holds no vocabulary "
                       f"({' or '.join(vocab_lib.VOCAB_NAMES)}); put the one the generator was trained "
                       'with beside its weights (export writes it there)')
    return found
  path = inputs.run_vocab_path(directory)
  if not storage.exists(path):
    raise UsageError(f"config.generator_init='{directory}' holds no vocabulary "
                     f"({', '.join(vocab_lib.VOCAB_NAMES)}); pass a run that has trained, or a directory "
                     'export wrote')
  return path


def fitted(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config`, or for a frozen generator a copy with what it takes from its source: its width,
  depth and vocabulary size, and, where the run names no vocabulary (no data.vocab_model, no
  prepared_dir), its vocabulary file: the run must read the generator's ids."""
  if config.generator_kind != 'frozen':
    return config
  directory = config.generator_init
  have = source_shape(directory)
  config = config.copy_and_resolve_references()
  m = config.model
  m.vocab_size = have.vocab_size
  if config_lib.generator_width(m) != have.width:
    m.generator_hidden_size = have.width
  if config_lib.generator_depth(m) != have.layers:  # a count above 1, else a fraction of num_layers
    m.generator_layers = have.layers if have.layers > 1 else have.layers / m.num_layers
  want = generator_shape(m)
  if have != want:
    differences = ', '.join(f'{field} {theirs} (the run\'s: {ours})'
                            for field, theirs, ours in zip(Shape._fields, have, want)
                            if theirs != ours)
    raise UsageError(f"config.generator_init: the generator in '{directory}' does not fit this "
                     f'run: {differences}; {_fix(have, m)}')
  if not (config.data.vocab_model or config.data.prepared_dir):
    config.data.vocab_model = source_vocab(directory)
    logging.info("config.data.vocab_model is unset: using the frozen generator's vocabulary, %s",
                 config.data.vocab_model)
  return config


def _run_vocab_file(config: ml_collections.ConfigDict, workdir: str) -> str:
  """The vocabulary the run will read (inputs.setup_vocab's choice), '' if it trains one."""
  existing = inputs.run_vocab_path(workdir)
  if storage.exists(existing):
    return inputs.local_copy(existing, inputs.local_dir(config, workdir))
  if config.data.vocab_model or not config.data.prepared_dir:
    return config.data.vocab_model
  return inputs.vocab_in(config.data.prepared_dir)


def check_vocab(config: ml_collections.ConfigDict, workdir: str):
  """The run reads the ids the generator was trained on, or one UsageError names both files."""
  directory, theirs = config.generator_init, source_vocab(config.generator_init)
  ours = _run_vocab_file(config, workdir)
  if storage.is_uri(ours):
    return  # a data.vocab_model at a URI: inputs.setup_vocab refuses it, naming the fix
  if not ours:
    raise UsageError(f'this run would train a vocabulary of its own, and the frozen generator in '
                     f"'{directory}' reads {theirs}; pass --config.data.vocab_model={theirs}")
  if vocab_lib.load_vocab(ours).fingerprint() != vocab_lib.load_vocab(theirs).fingerprint():
    raise UsageError(f"the frozen generator in '{directory}' was trained on the vocabulary "
                     f'{theirs}, and this run reads another, {ours} (other pieces or ids); pass '
                     f'--config.data.vocab_model={theirs} (with data prepared with it) or a '
                     'new --workdir')


def read_run(directory: str) -> Source:
  """The generator of one of our runs: an MLM run's whole network, an ELECTRA run's generator."""
  saved = _saved_run(directory)
  manager = checkpoint.make_manager(directory, saved.keep_checkpoints)
  try:
    step = manager.latest_step()
    if step is None:
      raise UsageError(f"config.generator_init='{directory}' has no finished checkpoint yet; "
                       'train that run until its first save (config.save_every)')
    # Only the parameters (no optimizer state), in the shapes the checkpoint has.
    params = checkpoint.restore_params(manager, step, manager.item_metadata(step)['params'])
  finally:
    manager.close()
  if saved.objective != 'mlm':
    params = networks.generator_view(params)
  renamed = RENAMED['mlm' if saved.objective == 'mlm' else 'electra']
  return Source({new: params[old] for old, new in renamed.items()}, source_shape(directory),
                f"the {saved.objective} run in '{directory}' (step {step})")


def _fix(have: Shape, m: ml_collections.ConfigDict) -> str:
  """The flags that give the run a generator of shape `have`, or why none can."""
  if have.heads != max(1, have.width // 64) or have.ffn != 4 * have.width:
    return ("electra_jax's generator has max(1, width // 64) heads and a 4 x width FFN, so no "
            f'setting holds {have.heads} heads and a {have.ffn}-wide FFN at width {have.width}; '
            'start from a network shaped that way')
  want = generator_shape(m)  # `fitted` gave it the source's width, depth and vocabulary size
  fields = ('embedding_size', 'max_position_embeddings', 'type_vocab_size')
  return 'set ' + ' '.join(f'--config.model.{field}={getattr(have, field)}' for field in fields
                           if getattr(have, field) != getattr(want, field))


def check_fits(source: Source, target: dict):
  """Every array of `source` has the shape of the run's generator's (`target`'s)."""
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
  if _hf_config(directory) is not None:
    if read_hf is None:
      raise ValueError(f"'{directory}' is a Hugging Face directory: pass its reader, "
                       'read_hf=electra_jax.hf.importing.read_generator (electra_jax.main does)')
    source = read_hf(directory, config.model)
  else:
    source = read_run(directory)
  check_fits(source, target)
  logging.info('the generator is frozen: %s parameters from %s',
               f'{networks.count_params(source.params):,}', source.name)
  return source.params
