"""A run's checkpoint -> two transformers directories, DIR/discriminator and DIR/generator.

Each directory is complete on its own: config.json, model.safetensors (with its own copy of the
shared embedding block) and the tokenizer files, so `from_pretrained(DIR/discriminator)` and
`pipeline("fill-mask", DIR/generator)` work offline.
"""

import json
import os
import shutil
from typing import Any, NamedTuple

import jax
import ml_collections
from jax.sharding import NamedSharding, PartitionSpec as P

from electra_jax import checkpoint, input_pipeline, optim, storage, train
from electra_jax.errors import UsageError
from electra_jax.hf import files, model_config, params as params_lib, tokenizer
from electra_jax.model import Electra


class Run(NamedTuple):
  config: ml_collections.ConfigDict
  params: dict[str, Any]  # numpy arrays
  vocab: Any              # vocab_lib.Vocab or wordpiece.WordPieceVocab
  step: int


def load_run_config(workdir: str) -> ml_collections.ConfigDict:
  storage.check_uri(workdir, '--workdir')
  path = os.path.join(workdir, 'config.json')
  if not storage.is_file(path):
    raise UsageError(f"'{workdir}' holds no run (no config.json); pass the --workdir of a "
                     'pretraining run')
  return ml_collections.ConfigDict(json.loads(storage.read_text(path)))


def abstract_state(config: ml_collections.ConfigDict) -> train.TrainState:
  """The trainer's state as shapes, replicated on this host's devices, allocating nothing."""
  replicated = NamedSharding(train.make_mesh(), P())
  return train.abstract_train_state(config, Electra(config.model), optim.make_optimizer(config),
                                    replicated)


def load_run(workdir: str, step: int | None = None) -> Run:
  """Config, parameters (checkpoint `step`, default the latest) and vocabulary of a run."""
  config = load_run_config(workdir)
  if not storage.is_dir(os.path.join(workdir, 'checkpoints')):
    raise UsageError(f"'{workdir}' has no checkpoints yet; train until the first save "
                     '(config.save_every) and export then')
  manager = checkpoint.make_manager(workdir, config.keep_checkpoints)
  steps = sorted(manager.all_steps())
  if not steps:
    raise UsageError(f"'{workdir}' has no finished checkpoint yet; train until the first save "
                     '(config.save_every) and export then')
  if step is None:
    step = steps[-1]
  elif step not in steps:
    raise UsageError(f"'{workdir}' has no checkpoint of step {step}; it has steps "
                     f'{", ".join(map(str, steps))}')
  state = checkpoint.restore(manager, step, abstract_state(config))
  manager.close()
  vocab = input_pipeline.load_run_vocab(workdir, input_pipeline.local_dir(config, workdir))
  if vocab.size != config.model.vocab_size:
    raise UsageError(f'the vocabulary {vocab.model_path} has {vocab.size} pieces but the run\'s '
                     f'model has vocab_size={config.model.vocab_size}; it is not this run\'s '
                     'vocabulary')
  return Run(config, jax.device_get(state.params), vocab, step)


def export_params(params: dict[str, Any], model: ml_collections.ConfigDict, vocab,
                  out_dir: str) -> dict[str, str]:
  """Writes DIR/discriminator and DIR/generator; returns their paths by kind."""
  written = {}
  for kind in params_lib.KINDS:
    path = os.path.join(out_dir, kind)
    files.write_model_dir(path, model_config.to_hf(model, kind), params_lib.to_hf(params, kind))
    tokenizer.write_tokenizer(vocab, path, model_max_length=model.max_position_embeddings)
    written[kind] = path
  return written


def _existing_outputs(out_dir: str, overwrite: bool) -> list[str]:
  """The output directories that already hold something (refused unless overwriting)."""
  existing = []
  for kind in params_lib.KINDS:
    path = os.path.join(out_dir, kind)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
      if not overwrite:
        raise UsageError(f"'{path}' already exists; choose another --out or pass --overwrite")
      existing.append(path)
  return existing


def export_run(workdir: str, out_dir: str, step: int | None = None,
               overwrite: bool = False) -> Run:
  """Exports checkpoint `step` (default: the latest) of the run in `workdir` to `out_dir`."""
  if storage.is_uri(out_dir):
    raise UsageError(f"--out='{out_dir}' is not a local path; export to local disk, then copy "
                     'the directory (gcloud storage cp -r)')
  existing = _existing_outputs(out_dir, overwrite)
  run = load_run(workdir, step)  # before removing anything, so a mistake costs nothing
  for path in existing:
    if os.path.isdir(path):
      shutil.rmtree(path)
    else:
      os.remove(path)
  export_params(run.params, run.config.model, run.vocab, out_dir)
  return run
