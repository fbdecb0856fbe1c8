"""Where fine-tuning starts, and the encoder every task family's network shares.

A start is a pretraining run's checkpoint (its discriminator's ENCODER subtrees, model config
and vocabulary), a Hugging Face ELECTRA discriminator, BERT or ModernBERT directory (converted by
electra_jax.hf), or '' (random initialisation: the config's model and vocabulary). The task head
starts at random from each seed. Every family's network calls `encode`, so its tree holds
ENCODER under pretraining's names and a start's subtrees drop in unchanged; on the 'modern'
architecture the families put `modern_head` (transformers' ModernBERT task head) on top.
"""

import functools
import os
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from electra_jax.training import checkpoint
from electra_jax.common import config as config_lib
from electra_jax.model import networks as pretrain_model
from electra_jax.model import modern
from electra_jax.model.layers import Embeddings, Encoder, gelu
from electra_jax.data import vocab as vocab_lib
from electra_jax.common.errors import UsageError
from electra_jax.hf import exporting, files, importing, model_config, modern as hf_modern

ENCODER = ('embeddings', 'discriminator')  # the pretrained subtrees fine-tuning keeps


def encode(module: nn.Module, input_ids, segment_ids, deterministic: bool):
  """The discriminator's sequence output [B, L, H], built in `module`'s compact call from its
  `config`, `dtype` and `attention`, with ENCODER's parameter names."""
  c = module.config
  if c.architecture == 'modern':
    embedded = modern.ModernEmbeddings(c.vocab_size, c.embedding_size, c.dropout_rate,
                                       module.dtype, name='embeddings')(
                                           input_ids, segment_ids, deterministic)
    return modern.ModernEncoder(
        c.hidden_size, c.num_layers, c.num_heads, c.intermediate_size, c.dropout_rate,
        c.attention_dropout_rate, c.local_window, c.global_every, c.rope_theta,
        c.local_rope_theta, module.dtype, attention=module.attention, name='discriminator')(
            embedded, input_ids != 0, deterministic)
  embedded = Embeddings(c.vocab_size, c.embedding_size, c.max_position_embeddings,
                        c.type_vocab_size, c.dropout_rate, module.dtype, name='embeddings')(
                            input_ids, segment_ids, deterministic)
  return Encoder(hidden_size=c.hidden_size, num_layers=c.num_layers, num_heads=c.num_heads,
                 intermediate_size=c.intermediate_size, dropout_rate=c.dropout_rate,
                 attention_dropout_rate=c.attention_dropout_rate, dtype=module.dtype,
                 attention=module.attention, name='discriminator')(
                     embedded, input_ids != 0, deterministic)


class ModernPredictionHead(nn.Module):
  """dense -> GELU -> norm, without biases: transformers' ModernBertPredictionHead, which every
  ModernBERT task class puts before its classifier."""

  @nn.compact
  def __call__(self, hidden):
    hidden = nn.Dense(hidden.shape[-1], use_bias=False, kernel_init=modern._init,
                      dtype=jnp.float32, name='dense')(hidden)
    return modern.norm('layer_norm')(gelu(hidden))


def modern_head(hidden, num_outputs: int, dropout_rate: float, deterministic: bool):
  """ModernBERT's task head on [..., H] features (pooled or per token), called inside a
  family's compact call: the prediction head, dropout, then the classifier (with a bias)."""
  hidden = ModernPredictionHead(name='head')(hidden.astype(jnp.float32))
  hidden = nn.Dropout(dropout_rate)(hidden, deterministic=deterministic)
  return nn.Dense(num_outputs, kernel_init=nn.initializers.glorot_uniform(), dtype=jnp.float32,
                  name='classifier')(hidden)


def init_params(model: nn.Module, rng, max_seq_length: int):
  """Fresh parameters of a fine-tuning network, by one program compiled once per model and
  length: op by op, the initialisers compile hundreds of small programs (seconds of CPU)."""
  frozen = model.clone(config=ml_collections.FrozenConfigDict(model.config))  # hashable
  return _init_program(frozen, max_seq_length)(rng)


@functools.lru_cache(maxsize=16)
def _init_program(model: nn.Module, max_seq_length: int):
  def init(rng):
    ids = jnp.zeros((1, max_seq_length), jnp.int32)
    return model.init({'params': rng}, ids, ids)['params']
  return jax.jit(init)


def param_shapes(model: nn.Module, max_seq_length: int):
  return jax.eval_shape(lambda: init_params(model, jax.random.PRNGKey(0), max_seq_length))


class Start(NamedTuple):
  model: ml_collections.ConfigDict   # a pretraining `model` section
  vocab: Any                         # vocab.Vocab or vocab.WordPieceVocab
  params: dict[str, Any] | None      # ENCODER subtrees (numpy); None = random initialisation
  description: str                   # for logs and results.json
  reinit: tuple[str, ...] = ()       # parts of the pretrained encoder drawn afresh (with_reinit)
  step: int | None = None            # the pretraining run's checkpoint it holds; None otherwise


def is_run(path: str) -> bool:
  return os.path.isdir(os.path.join(path, 'checkpoints'))


def from_run(workdir: str, step: int | None = None) -> Start:
  run = exporting.load_run(workdir, step)  # checks the checkpoint against the run's own config
  params = {name: pretrain_model.discriminator_view(run.params)[name] for name in ENCODER}
  return Start(run.config.model, run.vocab, params,
               f'pretraining run {workdir} (step {run.step})', step=run.step)


def from_hf(hf_dir: str, vocab_path: str = '') -> Start:
  model_dirs = importing.find_model_dirs(hf_dir)
  if any(hf_modern.is_modern(d.config) for d in model_dirs.values()):
    # A ModernBertModel's encoder, a ModernBertForMaskedLM's (as ModernBERT is published), or
    # our export's discriminator's.
    found = {'encoder': model_dirs['discriminator' if 'discriminator' in model_dirs
                                   else 'generator']}
    model_dir = found['encoder']
    model = hf_modern.model_section(model_dir.config, config_lib.default_config().model,
                                    os.path.join(model_dir.path, 'config.json'))
    vocab = importing.load_vocab_for(importing.find_vocab(found, vocab_path or None), model, found)
    tree = hf_modern.from_hf(model_dir.tensors, 'discriminator', '', 'encoder', model.num_layers,
                             os.path.join(model_dir.path, files.WEIGHTS))
    return Start(model, vocab, tree, f'Hugging Face {model_dir.path}')
  if 'discriminator' not in model_dirs:
    raise UsageError(f"'{hf_dir}' holds only an ELECTRA generator (ElectraForMaskedLM); "
                     'fine-tuning starts from the discriminator (ElectraForPreTraining)')
  disc = {'discriminator': model_dirs['discriminator']}
  source = os.path.join(disc['discriminator'].path, 'config.json')
  model = model_config.from_hf(disc['discriminator'].config, None,
                               config_lib.default_config().model, {'discriminator': source})
  vocab = importing.load_vocab_for(importing.find_vocab(disc, vocab_path or None), model, disc)
  target = jax.eval_shape(lambda: pretrain_model.init_params(
      pretrain_model.Electra(model), jax.random.PRNGKey(0), 1))
  tree = importing.convert(disc, target)['discriminator']
  return Start(model, vocab, {name: tree[name] for name in ENCODER},
               f'Hugging Face {disc["discriminator"].path}')


def load_start(config: ml_collections.ConfigDict) -> Start:
  """The start config.init_from names, with config.reinit's parts to draw afresh and its
  encoder's hidden and attention dropout at config.dropout (-1 keeps its own)."""
  path, step, rate = config.init_from, config.init_step, config.dropout
  if not path:
    if not config.vocab:
      raise UsageError('config.init_from is empty (random initialisation), so the model comes '
                       'from config.model and the vocabulary from config.vocab: pass '
                       "--config.vocab=PATH (a pretraining run's vocab.model, a vocab.txt or a "
                       'tokenizer.json)')
    vocab = vocab_lib.load_vocab(config.vocab)
    if vocab.size != config.model.vocab_size:
      raise UsageError(f'the vocabulary {config.vocab} has {vocab.size} pieces but '
                       f'config.model.vocab_size={config.model.vocab_size}; set '
                       f'--config.model.vocab_size={vocab.size}')
    start = Start(ml_collections.ConfigDict(config.model.to_dict()), vocab, None,
                  'random initialisation')
  elif not os.path.isdir(path):
    raise UsageError(f"config.init_from '{path}' is not a directory; pass a pretraining run's "
                     "workdir, a Hugging Face ELECTRA, BERT or ModernBERT directory, or '' for "
                     'random init')
  elif is_run(path):
    if config.vocab:  # the embeddings were trained on the run's own vocabulary
      raise UsageError(f"config.vocab='{config.vocab}' with config.init_from the pretraining run "
                       f"'{path}': fine-tuning reads the vocabulary the run was trained with, so "
                       "this one would be ignored; drop --config.vocab")
    start = from_run(path, step or None)
  elif step:
    raise UsageError(f"config.init_step={step} picks a checkpoint of a pretraining run, but "
                     f"'{path}' is a Hugging Face directory, which holds one set of weights; "
                     'leave init_step at 0')
  else:
    start = from_hf(path, config.vocab)
  start = with_reinit(start, config.reinit)
  if rate == -1:
    return start
  if not 0 <= rate < 1:  # Also NaN, and negatives that only look like "keep".
    raise UsageError(f'config.dropout={rate}: use a rate in [0, 1), or -1 to keep the '
                     "pretrained encoder's own")
  model = ml_collections.ConfigDict(start.model.to_dict())
  model.update(dropout_rate=float(rate), attention_dropout_rate=float(rate))
  return start._replace(model=model)


def with_reinit(start: Start, reinit: str) -> Start:
  """`start` with config.reinit's parts drawn afresh from each seed: 'embeddings' (everything
  below the first layer, embeddings_project included) and 'layer_N' (0 the bottom one)."""
  parts = tuple(part.strip() for part in reinit.split(',') if part.strip())
  if not parts:
    return start
  known = ('embeddings', *(f'layer_{i}' for i in range(start.model.num_layers)))
  unknown = [part for part in parts if part not in known]
  if unknown:
    raise UsageError(f'config.reinit={reinit!r}: {", ".join(unknown)} is not a part of this '
                     f'{start.model.num_layers}-layer encoder; use a comma-separated subset of '
                     f'{", ".join(known)}')
  if start.params is None:
    raise UsageError(f'config.reinit={reinit!r} re-draws parts of a pretrained encoder, but '
                     "config.init_from is '' (random initialisation, where every part is drawn "
                     "already); set init_from, or leave reinit ''")
  return start._replace(reinit=parts,
                        description=f'{start.description}, {", ".join(parts)} drawn afresh')


def initial_params(model: Any, start: Start, seed: int, max_seq_length: int) -> dict[str, Any]:
  """A fresh head from `seed` with the pretrained encoder, but for start.reinit's parts, which
  keep their fresh draw (what a task gains from each part of pretraining is then measurable)."""
  fresh = jax.device_get(init_params(model, jax.random.PRNGKey(seed), max_seq_length))
  if start.params is None:
    return fresh
  problems = checkpoint.shape_mismatches(start.params, {k: fresh[k] for k in ENCODER},
                                         'pretrained parameters', 'fine-tuning model')
  if problems:
    raise UsageError(f'the parameters of {start.description} do not fit the fine-tuning model: '
                     f'{problems}')
  params = {**fresh, **{k: jax.tree.map(np.asarray, start.params[k]) for k in ENCODER}}
  params['discriminator'] = dict(params['discriminator'])  # fresh's own dict stays as drawn
  for part in start.reinit:
    if part == 'embeddings':
      params['embeddings'] = fresh['embeddings']
      part = 'embeddings_project'
    if part in fresh['discriminator']:  # embeddings_project is only where E != H
      params['discriminator'][part] = fresh['discriminator'][part]
  return params
