"""The fine-tuning optimizer: pretraining's AdamW and schedule, with layer-wise LR decay.

Each parameter's whole update (Adam plus decoupled weight decay, as the original's per-layer
learning rate) is scaled by decay^depth (layer_depth). The original gave the top layer decay^2,
counting a slot for the pooler ELECTRA removed; we count without it.
"""

import re

import jax
import ml_collections
import optax

from electra_jax.training import optim as pretrain_optim

_LAYER = re.compile(r'layer_(\d+)$')


def layer_depth(path: tuple[str, ...], num_layers: int) -> int:
  """0 for the head (and a modern encoder's final norm), L - i for layer_i, L + 1 for the
  embeddings."""
  if path[0] == 'embeddings' or 'embeddings_project' in path:
    return num_layers + 1
  match = next((m for m in map(_LAYER.match, path) if m), None)
  return num_layers - int(match.group(1)) if path[0] == 'discriminator' and match else 0


def layer_factors(params, num_layers: int, decay: float):
  """A tree like `params` of each parameter's factor decay^depth."""
  def factor(path, _):
    names = tuple(getattr(k, 'key', str(k)) for k in path)
    return decay ** layer_depth(names, num_layers)
  return jax.tree_util.tree_map_with_path(factor, params)


def scale_by_tree(factors) -> optax.GradientTransformation:
  """Multiplies each update by its factor (a tree of Python floats)."""
  def update(updates, state, params=None):
    del params
    return jax.tree.map(lambda u, f: u * f, updates, factors), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(config: ml_collections.ConfigDict, params, num_layers: int,
                   total_steps: int) -> optax.GradientTransformation:
  """clip -> Adam -> weight decay -> schedule -> layer-wise factors (config: the resolved one)."""
  schedule = learning_rate_schedule(config, total_steps)
  return optax.chain(
      optax.clip_by_global_norm(config.max_grad_norm),
      pretrain_optim.adam(config),
      optax.add_decayed_weights(config.weight_decay, mask=pretrain_optim.decay_mask),
      optax.scale_by_learning_rate(schedule),
      scale_by_tree(layer_factors(params, num_layers, config.layer_decay)),
  )


def learning_rate_schedule(config: ml_collections.ConfigDict, total_steps: int):
  """The head's learning rate: warmup over warmup_proportion of the steps x linear decay."""
  warmup = int(round(config.warmup_proportion * total_steps))
  return pretrain_optim.learning_rate_schedule(config.learning_rate, warmup, total_steps)
