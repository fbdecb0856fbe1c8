"""The fine-tuning optimizer: pretraining's AdamW and schedule, with layer-wise LR decay.

Each parameter's whole update (Adam plus decoupled weight decay, as the original's per-layer
learning rate) is scaled by decay^depth (layer_factors). The original gave the top layer decay^2,
counting a slot for the pooler ELECTRA removed; we count without it.
"""

import re

import jax
import ml_collections
import optax

from electra_jax.training import optim as pretrain_optim

_LAYER = re.compile(r'layer_(\d+)$')


def layer_factors(params, num_layers: int, decay: float):
  """A tree like `params` of each parameter's factor decay^depth: depth 0 for the head (and a
  modern encoder's final norm), L - i for layer_i, L + 1 for the embeddings."""
  def factor(path, _):
    names = tuple(getattr(k, 'key', str(k)) for k in path)
    if names[0] == 'embeddings' or 'embeddings_project' in names:
      return decay ** (num_layers + 1)
    match = next((m for m in map(_LAYER.match, names) if m), None)
    depth = num_layers - int(match.group(1)) if names[0] == 'discriminator' and match else 0
    return decay ** depth
  return jax.tree_util.tree_map_with_path(factor, params)


def make_optimizer(config: ml_collections.ConfigDict, params, num_layers: int,
                   total_steps: int) -> optax.GradientTransformation:
  """clip -> Adam -> weight decay -> schedule -> layer-wise factors (config: the resolved one)."""
  schedule = learning_rate_schedule(config, total_steps)
  factors = layer_factors(params, num_layers, config.layer_decay)
  return optax.chain(
      optax.clip_by_global_norm(config.max_grad_norm),
      pretrain_optim.adam(config),
      optax.add_decayed_weights(config.weight_decay, mask=pretrain_optim.decay_mask),
      optax.scale_by_learning_rate(schedule),
      optax.stateless(lambda updates, _: jax.tree.map(lambda u, f: u * f, updates, factors)),
  )


def learning_rate_schedule(config: ml_collections.ConfigDict, total_steps: int):
  """The head's learning rate: warmup over warmup_proportion of the steps x linear decay."""
  warmup = int(round(config.warmup_proportion * total_steps))
  return pretrain_optim.learning_rate_schedule(config.learning_rate, warmup, total_steps)
