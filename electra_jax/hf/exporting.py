"""A run's checkpoint -> transformers directories: DIR/discriminator, DIR/generator or DIR/mlm,
each complete on its own (config.json, model.safetensors with its own copy of the shared
embedding block, tokenizer files, README.md), so they load offline.
"""

import os
import shutil
from typing import Any, NamedTuple

import ml_collections

from electra_jax.common import config as config_lib, storage
from electra_jax.common.errors import UsageError
from electra_jax.model import networks as model_lib
from electra_jax.training import checkpoint, inputs, train
from electra_jax.hf import files, model_card, model_config, modern, params as params_lib
from electra_jax.hf import tokenizer

# The networks (params.NETWORKS) each objective exports, as DIR/<network>. All-Tokens MLM's copy
# head and Electric's two-tower cloze generator have no transformers class and are left out.
EXPORTED = {'electra': ('discriminator', 'generator'), 'mlm': ('mlm',),
            'electra_15': ('discriminator', 'generator'), 'electric': ('discriminator',),
            'replace_mlm': ('mlm', 'generator'), 'all_tokens_mlm': ('mlm', 'generator')}


def exported_networks(config: ml_collections.ConfigDict) -> tuple[str, ...]:
  """The networks a run exports: its objective's, less the generator where a unigram
  distribution stood in for one (config.generator_kind)."""
  if config.generator_kind == 'unigram':
    return ('discriminator',)
  return EXPORTED[config.objective]


class Run(NamedTuple):
  config: ml_collections.ConfigDict
  params: dict[str, Any]  # numpy arrays
  vocab: Any              # vocab_lib.Vocab or vocab_lib.WordPieceVocab
  step: int


def load_run_config(workdir: str) -> ml_collections.ConfigDict:
  """The run's config.json, upgraded to today's fields."""
  storage.check_uri(workdir, '--workdir')
  if not storage.is_file(os.path.join(workdir, 'config.json')):
    raise UsageError(f"'{workdir}' holds no run (no config.json); pass the --workdir of a "
                     'pretraining run')
  return config_lib.read_saved(workdir)


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
  params = checkpoint.restore_params(manager, step, train.abstract_params(config))
  manager.close()
  vocab = inputs.load_run_vocab(workdir, inputs.local_dir(config, workdir))
  if vocab.size != config.model.vocab_size:
    raise UsageError(f'the vocabulary {vocab.model_path} has {vocab.size} pieces but the run\'s '
                     f'model has vocab_size={config.model.vocab_size}; it is not this run\'s '
                     'vocabulary')
  return Run(config, params, vocab, step)


def export_params(params: dict[str, Any], model: ml_collections.ConfigDict, vocab,
                  out_dir: str, objective_name: str = 'electra',
                  networks: tuple[str, ...] | None = None) -> dict[str, str]:
  """Writes DIR/<network> for each of `networks` (default: the objective's); returns their
  paths by network."""
  written = {}
  for network in networks or EXPORTED[objective_name]:
    path, view = os.path.join(out_dir, network), network_view(params, network)
    if model.architecture == 'modern':
      encoder, head, kind = params_lib.NETWORKS[network]
      layers = params_lib.num_layers(view, encoder)
      files.write_model_dir(path, modern.hf_config(model, kind, layers, modern_special_ids(vocab)),
                            modern.to_hf(view, encoder, head, kind))
    else:
      files.write_model_dir(path, model_config.to_hf(model, network),
                            params_lib.to_hf(view, network))
    tokenizer.write_tokenizer(vocab, path, model_max_length=model.max_position_embeddings,
                              token_types=model.architecture != 'modern')
    written[network] = path
  return written


def network_view(params: dict[str, Any], network: str) -> dict[str, Any]:
  """`params` as `network` reads its weights (under GDES the discriminator's word table is the
  generator's plus a delta; embedding_sharing 'all' shares the encoder too)."""
  if network == 'discriminator':
    return model_lib.discriminator_view(params)
  return model_lib.generator_view(params) if network == 'generator' else params


def network_tensors(params: dict[str, Any], network: str) -> dict[str, Any]:
  """The HF ELECTRA tensors of `network`."""
  return params_lib.to_hf(network_view(params, network), network)


def modern_special_ids(vocab) -> dict[str, int]:
  return {'pad': vocab.pad_id, 'cls': vocab.cls_id, 'sep': vocab.sep_id}


def export_run(workdir: str, out_dir: str, step: int | None = None, overwrite: bool = False,
               language: str = '', license_id: str = '') -> Run:
  """Exports checkpoint `step` (default: the latest) of the run in `workdir` to `out_dir`; the
  model cards name `language` (ISO 639 codes, comma-separated) and `license_id` where given."""
  languages = model_card.languages_of(language)
  model_card.check_license(license_id)
  if storage.is_uri(out_dir):
    raise UsageError(f"--out='{out_dir}' is not a local path; export to local disk, then copy "
                     'the directory (gcloud storage cp -r)')
  networks = exported_networks(load_run_config(workdir))
  paths = [os.path.join(out_dir, network) for network in networks]
  existing = [p for p in paths if os.path.exists(p) and (not os.path.isdir(p) or os.listdir(p))]
  if existing and not overwrite:
    raise UsageError(f"'{existing[0]}' already exists; choose another --out or pass --overwrite")
  run = load_run(workdir, step)  # before removing anything, so a mistake costs nothing
  for path in existing:
    if os.path.isdir(path):
      shutil.rmtree(path)
    else:
      os.remove(path)
  written = export_params(run.params, run.config.model, run.vocab, out_dir, networks=networks)
  evaluation = model_card.last_evaluation(workdir, run.step)
  for network, path in written.items():
    with open(os.path.join(path, 'README.md'), 'w', encoding='utf-8') as f:
      f.write(model_card.model_card(network, run.config, files.read_config(path), run.step,
                                    evaluation, languages, license_id))
  return run
