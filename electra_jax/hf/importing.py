"""Hugging Face directories -> a new run workdir at step 0, or a frozen generator.

The workdir holds what a run has after its first save (config.json, the vocabulary, an Orbax
checkpoint of step 0), built with the trainer's own functions so it restores exactly. A network
not given starts afresh; the shared embedding block comes from the discriminator where both are
given (it is the one fine-tuned; Google's pairs hold identical copies). A ModernBERT directory
starts a 'modern' run (modern_subtrees).
"""

import json
import os
from typing import Any

from absl import logging
import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from electra_jax.common import config as config_lib, storage
from electra_jax.common.errors import UsageError
from electra_jax.data import vocab as vocab_lib
from electra_jax.hf import bert, files, model_config, modern as hf_modern, params as params_lib
from electra_jax.model import networks
from electra_jax.training import checkpoint, generator_modes, inputs, optim, train



def find_model_dirs(hf_dir: str, generator_dir: str | None = None,
                    allow_pickle: bool = False) -> dict[str, files.ModelDir]:
  """The model directories by kind: `hf_dir` is one, or holds discriminator/ and generator/."""
  paths = [hf_dir]  # where neither is there, read_model_dir names the missing config.json
  if os.path.isdir(hf_dir) and not os.path.exists(os.path.join(hf_dir, 'config.json')):
    nested = [os.path.join(hf_dir, kind) for kind in params_lib.KINDS]
    paths = [p for p in nested if os.path.isfile(os.path.join(p, 'config.json'))] or paths
  found = {}
  for path in paths:
    model_dir = files.read_model_dir(path, allow_pickle)
    if model_dir.kind in found:
      raise UsageError(f"both '{found[model_dir.kind].path}' and '{path}' hold an ELECTRA "
                       f'{model_dir.kind}; pass one of each')
    found[model_dir.kind] = model_dir
  if generator_dir:
    model_dir = files.read_model_dir(generator_dir, allow_pickle)
    if model_dir.kind != 'generator':
      raise UsageError(f"--generator_dir '{generator_dir}' holds a discriminator "
                       '(ElectraForPreTraining); pass it as --hf_dir')
    if 'generator' in found:
      raise UsageError(f"'{hf_dir}' already holds a generator; drop --generator_dir or point "
                       '--hf_dir at the discriminator alone')
    found['generator'] = model_dir
  return found


def find_vocab(model_dirs: dict[str, files.ModelDir], vocab_path: str | None) -> str:
  if vocab_path:
    return vocab_lib.vocab_file(vocab_path)
  # What our export writes (Google's have vocab.txt); a tokenizer.json only where neither is there.
  for model_dir in model_dirs.values():
    if found := inputs.vocab_in(model_dir.path):
      return found
  where = ' or '.join(f"'{d.path}'" for d in model_dirs.values())
  raise UsageError(f'no vocabulary ({" or ".join(vocab_lib.VOCAB_NAMES)}) in {where}; pass '
                   '--vocab=PATH with the checkpoint\'s WordPiece vocab.txt, sentencepiece '
                   '.model or tokenizer.json')


def _check_casing(vocab, model_dirs: dict[str, files.ModelDir]):
  """A WordPiece vocab's inferred casing must agree with what its tokenizer config says."""
  if not isinstance(vocab, vocab_lib.WordPieceVocab):
    return
  for model_dir in model_dirs.values():
    path = os.path.join(model_dir.path, 'tokenizer_config.json')
    if os.path.isfile(path):
      with open(path) as f:
        lowercase = json.load(f).get('do_lower_case')
      if lowercase is not None and bool(lowercase) != vocab.lowercase:
        raise UsageError(
            f"{path} sets do_lower_case={lowercase}, but the pieces of {vocab.model_path} are "
            f"{'all lowercase' if vocab.lowercase else 'cased'}; electra_jax lowercases "
            'exactly the vocabularies without uppercase pieces, so it cannot tokenize as this '
            'checkpoint did')


def load_vocab_for(vocab_path: str, model: ml_collections.ConfigDict,
                   model_dirs: dict[str, files.ModelDir]):
  vocab = vocab_lib.load_vocab(vocab_path)
  if vocab.size != model.vocab_size:
    raise UsageError(f'the vocabulary {vocab_path} has {vocab.size} pieces but the checkpoint '
                     f'has vocab_size={model.vocab_size}; pass --vocab=PATH with the '
                     "checkpoint's own vocabulary")
  _check_casing(vocab, model_dirs)
  file_pad = vocab.file_pad_id if isinstance(vocab, vocab_lib.TokenizerJsonVocab) else 0
  for model_dir in model_dirs.values():  # both swap that id with 0 (hf/modern.padding_first)
    pad = hf_modern.file_pad_id(model_dir.config) if hf_modern.is_modern(model_dir.config) else 0
    if pad != file_pad:
      raise UsageError(f"{vocab_path} pads with id {file_pad}, but {model_dir.path}'s config.json "
                       f"has pad_token_id={pad}; pass --vocab=PATH with the checkpoint's own "
                       'tokenizer.json')
  return vocab


def convert(model_dirs: dict[str, files.ModelDir], target: dict[str, Any]
            ) -> dict[str, dict[str, Any]]:
  """Each given network's weights as our subtrees, checked against `target`'s shapes."""
  return {kind: params_lib.from_hf(d.tensors, d.network, target,
                                   os.path.join(d.path, files.WEIGHTS))
          for kind, d in model_dirs.items()}


def modern_model(model_dirs: dict[str, files.ModelDir], model: ml_collections.ConfigDict,
                 sources: dict[str, str]) -> ml_collections.ConfigDict:
  """The 'modern' run's `model` section: the encoder's config.json (the discriminator's where
  both are given, which also sets the generator's depth), the rest from `model`."""
  if len(model_dirs) == 2 and not all(hf_modern.is_modern(d.config) for d in model_dirs.values()):
    raise UsageError('one of the two directories is a ModernBERT and the other is not; pass '
                     'both networks of one architecture')
  kind = 'discriminator' if 'discriminator' in model_dirs else 'generator'
  derived = hf_modern.model_section(model_dirs[kind].config, model, sources[kind])
  if len(model_dirs) == 2:
    derived.generator_layers = (model_dirs['generator'].config['num_hidden_layers']
                                / derived.num_layers)
  return derived


def modern_subtrees(model_dirs: dict[str, files.ModelDir], model: ml_collections.ConfigDict,
                    target: dict[str, Any]) -> dict[str, Any]:
  """The subtrees of a 'modern' run that ModernBERT directories give, checked against `target`'s
  shapes: the encoder becomes the discriminator's; a ModernBertForMaskedLM also starts the
  generator (its bottom layers, final norm and MLM head), so it predicts tokens from step 0."""
  encoder = model_dirs['discriminator'] if 'discriminator' in model_dirs else model_dirs[
      'generator']
  source = os.path.join(encoder.path, files.WEIGHTS)
  layout = 'discriminator' if encoder.network == 'discriminator' else 'encoder'
  tree = hf_modern.from_hf(encoder.tensors, 'discriminator', 'discriminator_head', layout,
                           model.num_layers, source)
  if 'generator' in model_dirs:  # its own directory, or the bottom of a masked LM's
    generator = model_dirs['generator']
    mlm = hf_modern.from_hf(generator.tensors, 'generator', 'generator_head', 'generator',
                            config_lib.generator_depth(model),
                            os.path.join(generator.path, files.WEIGHTS))
    tree.update(generator=mlm['generator'], generator_head=mlm['generator_head'])
    words = lambda t: t['embeddings']['word_embeddings']['embedding']
    if 'generator_embeddings' in target:  # embedding_sharing 'none': a table each
      tree['generator_embeddings'] = mlm['embeddings']
    elif 'embedding_delta' in target:  # GDES: the discriminator reads the table + the delta
      tree['embedding_delta'] = words(tree) - words(mlm)
      tree['embeddings'] = mlm['embeddings']
  tree = {name: subtree for name, subtree in tree.items() if name in target}
  problems = checkpoint.shape_mismatches(tree, {k: target[k] for k in tree},
                                         'the ModernBERT weights', "the run's model")
  if problems:
    raise UsageError(f'{source} does not fit the run: {problems}')
  return tree


def merge_params(imported: dict[str, dict[str, Any]]) -> dict[str, Any]:
  """The imported networks' subtrees as one tree."""
  params = {}
  for kind in reversed(params_lib.KINDS):  # generator first, so the discriminator's block wins
    if kind in imported:
      params.update(imported[kind])
  if len(imported) == 2:
    difference = max(float(np.max(np.abs(a - b))) for a, b in zip(
        jax.tree.leaves(imported['discriminator']['embeddings']),
        jax.tree.leaves(imported['generator']['embeddings'])))
    if difference:
      logging.warning('the generator and discriminator embedding blocks differ (max abs '
                      'difference %.3g); using the discriminator\'s', difference)
  return params


def import_checkpoint(config: ml_collections.ConfigDict, workdir: str, hf_dir: str,
                      generator_dir: str | None = None, vocab_path: str | None = None,
                      allow_pickle: bool = False, pinned: set[str] = frozenset()
                      ) -> ml_collections.ConfigDict:
  """Creates a run in `workdir` from HF checkpoint(s) and returns its config: `config` with the
  checkpoint's model, refused where it disagrees with a field the user `pinned`."""
  storage.check_uri(workdir, '--workdir')
  if config.objective != 'electra':
    raise UsageError(f'import_hf starts ELECTRA runs (generator + discriminator); '
                     f"--config.objective={config.objective} is not supported: leave it 'electra'")
  if any(storage.exists(os.path.join(workdir, name)) for name in ('config.json', 'checkpoints')):
    raise UsageError(f"'{workdir}' already holds a run; import into a new --workdir")
  model_dirs = find_model_dirs(hf_dir, generator_dir, allow_pickle)
  sources = {kind: os.path.join(d.path, 'config.json') for kind, d in model_dirs.items()}
  if any(hf_modern.is_modern(d.config) for d in model_dirs.values()):
    derived = modern_model(model_dirs, config.model, sources)
  else:
    configs = [model_dirs[kind].config if kind in model_dirs else None
               for kind in params_lib.KINDS]
    derived = model_config.from_hf(*configs, config.model, sources)
  conflicts = [f'config.model.{k}={config.model[k]!r} (the checkpoint has {derived[k]!r})'
               for k in sorted(pinned) if config.model[k] != derived[k]]
  if conflicts:
    raise UsageError(f'{"; ".join(conflicts)}: the model comes from the checkpoint, so drop '
                     'these --config.model overrides')
  config = ml_collections.ConfigDict(config.to_dict())
  config.model = derived
  if config.max_seq_length > derived.max_position_embeddings:
    raise UsageError(f'config.max_seq_length={config.max_seq_length} exceeds the checkpoint\'s '
                     f'max_position_embeddings={derived.max_position_embeddings}; lower it')
  vocab_path = find_vocab(model_dirs, vocab_path)
  load_vocab_for(vocab_path, derived, model_dirs)

  model, optimizer = train.make_model(config), optim.make_optimizer(config)
  # Every tensor is checked against the model's shapes before anything is computed or written.
  target = jax.eval_shape(lambda: networks.init_params(model, jax.random.PRNGKey(0), 1))
  if derived.architecture == 'modern':
    subtrees = modern_subtrees(model_dirs, derived, target)
  else:
    subtrees = merge_params(convert(model_dirs, target))

  replicated = NamedSharding(train.make_mesh(), P())
  state = train.create_train_state(config, model, optimizer, replicated)
  params = jax.device_put({**jax.device_get(state.params), **subtrees}, replicated)
  opt_state = jax.jit(optimizer.init, out_shardings=replicated)(params)
  state = state.replace(params=params, opt_state=opt_state)

  storage.makedirs(workdir)
  storage.copy_file(vocab_path, inputs.run_vocab_path(workdir, vocab_path))
  manager = checkpoint.make_manager(workdir, config.keep_checkpoints)
  checkpoint.save(manager, 0, state, checkpoint.identity(config))
  manager.wait_until_finished()
  manager.close()
  config_lib.save_config(config, workdir)
  return config


def model_overrides(model: ml_collections.ConfigDict,
                    file_model: ml_collections.ConfigDict) -> list[str]:
  """The --config.model flags that make the config file describe `model`."""
  return [f'--config.model.{k}={v}' for k, v in model.items() if file_model[k] != v]


GENERATOR_SOURCES = ("a Hugging Face ElectraForMaskedLM (our export's generator/ or mlm/), "
                     'BertForMaskedLM or ModernBertForMaskedLM directory, or the workdir of one '
                     'of our mlm or electra runs')


def read_generator(directory: str, model: ml_collections.ConfigDict) -> generator_modes.Source:
  """The masked LM in `directory` (ours, BERT's, or a whole ModernBertForMaskedLM) as a frozen
  generator (config.generator_init), checked against its own config.json; `model` fills only
  what the file leaves open. electra_jax.main passes this to train.train_and_evaluate, since
  training may not import hf."""
  config = files.read_config(directory)
  model_dir = files.read_model_dir(directory, bert_masked_lm=True)
  if model_dir.kind != 'generator':
    raise UsageError(f"config.generator_init='{directory}' holds a discriminator or an "
                     f'encoder without an MLM head, which predicts no tokens; pass '
                     f'{GENERATOR_SOURCES}')
  hf, source = model_dir.config, os.path.join(directory, files.WEIGHTS)
  if hf_modern.is_modern(config):
    tree = hf_modern.from_hf(model_dir.tensors, 'generator', 'generator_head', 'generator',
                             hf['num_hidden_layers'], source)
    tables = (hf['hidden_size'], hf['vocab_size'], 0, 0)  # RoPE: no position or type table
    architecture = 'ModernBertForMaskedLM'
  else:
    base = ml_collections.ConfigDict(model.to_dict())
    base.generator_layers = 1.0  # from_hf sets num_layers to the generator's depth
    derived = model_config.from_hf(None, hf, base,
                                   {'generator': os.path.join(directory, 'config.json')})
    target = jax.eval_shape(lambda: networks.init_params(networks.Electra(derived),
                                                         jax.random.PRNGKey(0), 1))
    tree = params_lib.from_hf(model_dir.tensors, 'generator', target, source)
    tables = (derived.embedding_size, derived.vocab_size, derived.max_position_embeddings,
              derived.type_vocab_size)
    architecture = (model_config.architectures(config) or [
        'BERT masked LM' if bert.is_bert(config) else 'ElectraForMaskedLM'])[0]
  shape = generator_modes.Shape(hf['hidden_size'], hf['num_attention_heads'],
                                hf['intermediate_size'], hf['num_hidden_layers'], *tables)
  params = {new: tree[old] for old, new in generator_modes.RENAMED['electra'].items()}
  return generator_modes.Source(params, shape, f"the {architecture} in '{directory}'")
