"""Two-stage training, the paper's section 3.2 ablation (config.two_stage_steps = n > 0).

  1. Steps 0 .. n-1 train the generator alone (its MLM loss).
  2. Step n first initialises the discriminator with the generator's weights, then steps n, n+1,
     ... train the discriminator alone (its RTD loss), the generator frozen.

All of it runs inside the one compiled train step, with the step number as a traced value, so
the run compiles once and a resumed run is simply at its step. Each network owns its weights
only under embedding_sharing='none' (the generator's embedding block is its own) with a
generator of the discriminator's size (so its weights fit the discriminator); validation.validate
demands both. The discriminator head has no counterpart in the generator and keeps its
initialisation.

The losses need no change: the MLM loss never reaches the discriminator's weights, and the RTD
loss never the generator's (replacements are sampled under stop_gradient). What changes is
which gradients the optimizer sees: the network not in training gets zeros, so its Adam moments
stay zero until its stage begins, and its parameters are held bitwise (Adam's momentum and the
weight decay would otherwise still move them).
"""

import jax
import jax.numpy as jnp
import ml_collections

GENERATOR = ('generator_embeddings', 'generator', 'generator_head')
DISCRIMINATOR = ('embeddings', 'discriminator', 'discriminator_head')
# What the discriminator takes from the generator when stage 2 begins.
INITIALISED_FROM = {'embeddings': 'generator_embeddings', 'discriminator': 'generator'}


def enabled(config: ml_collections.ConfigDict) -> bool:
  return config.get('two_stage_steps', 0) > 0  # config.json of older runs lacks the field


def generator_in_training(config: ml_collections.ConfigDict, step) -> jax.Array:
  return step < config.two_stage_steps


def start_discriminator(params: dict, config: ml_collections.ConfigDict, step) -> dict:
  """`params` with the discriminator's embeddings and encoder replaced by copies of the
  generator's at the first step of stage 2, and unchanged at every other step."""
  begins = step == config.two_stage_steps
  params = dict(params)
  for target, source in INITIALISED_FROM.items():
    params[target] = jax.tree.map(lambda s, t: jnp.where(begins, s, t), params[source],
                                  params[target])
  return params


def _pick(config, step, in_training: dict, frozen: dict) -> dict:
  """Each top-level entry from `in_training` for the network in training at `step`, from
  `frozen` for the other."""
  generator_trains = generator_in_training(config, step)
  picked = {}
  for name in in_training:
    trains = generator_trains if name in GENERATOR else ~generator_trains
    picked[name] = jax.tree.map(lambda a, b, t=trains: jnp.where(t, a, b), in_training[name],
                                frozen[name])
  return picked


def stage_gradients(grads: dict, config: ml_collections.ConfigDict, step) -> dict:
  """The gradients with the network that is not in training at `step` set to zero."""
  return _pick(config, step, grads, jax.tree.map(jnp.zeros_like, grads))


def hold_frozen(new_params: dict, old_params: dict, config: ml_collections.ConfigDict,
                step) -> dict:
  """`new_params` with the network that is not in training at `step` kept as in `old_params`."""
  return _pick(config, step, new_params, old_params)
