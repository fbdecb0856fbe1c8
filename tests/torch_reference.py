"""PyTorch training steps to hold ours against (tests/test_step_equivalence.py).

The networks and the masked-LM loss are transformers' own (`ElectraForMaskedLM` for a generator
or BERT-style masked LM, `ElectraForPreTraining` for the discriminator); the replaced-token loss
and the optimizer are written here anew in torch from their descriptions
(docs/ELECTRA_REFERENCE.md, electra_jax/training/optim.py), not derived from our code. Only the tensor
names of our HF export (electra_jax.hf.params, itself checked in test_hf.py) are shared, to load
our weights and to read the results back into our tree.

Everything the step draws at random (masks, sampled replacements) is given by the caller, so
both sides compute the same function of the same inputs. Covered: ELECTRA's step (generator +
discriminator over one embedding block) and the MLM baseline's (one ElectraForMaskedLM at the
discriminator's sizes, network 'mlm').
"""

from typing import Any, NamedTuple

import jax
import numpy as np
import torch
import transformers

from electra_jax.hf import model_config, params as params_lib

CLASSES = {'discriminator': transformers.ElectraForPreTraining,
           'generator': transformers.ElectraForMaskedLM}


def network(params, model: Any, name: str) -> torch.nn.Module:
  """transformers' network `name` (see params.NETWORKS) holding our `params`: float32, plain
  (eager) attention, a masked LM's output matrix tied to its word embeddings."""
  kind = params_lib.NETWORKS[name].kind
  net = CLASSES[kind](transformers.ElectraConfig(**model_config.to_hf(model, name)))
  net.set_attn_implementation('eager')
  tensors = {key: torch.from_numpy(np.array(value))
             for key, value in params_lib.to_hf(params, name).items()}
  missing, unexpected = net.load_state_dict(tensors, strict=False)
  assert not unexpected and set(missing) <= {params_lib.TIED_OUTPUT}, (missing, unexpected)
  embeddings = net.electra.embeddings
  if kind == 'generator':
    net.generator_lm_head.weight = embeddings.word_embeddings.weight
  # nn.Embedding(padding_idx=0) drops the gradient of row 0's lookups; neither our model nor the
  # original ELECTRA has such a rule, and a sampled replacement can be token 0.
  embeddings.word_embeddings.padding_idx = None
  return net.train()  # dropout is off through the config's rates of 0


def electra_networks(params, model: Any) -> dict[str, torch.nn.Module]:
  """Generator and discriminator sharing one embedding block, the generator's output tied to it.

  The shared tensors are the same Parameter objects, so their gradient is the sum of what both
  losses send them, as in one ELECTRA.
  """
  nets = {name: network(params, model, name) for name in ('discriminator', 'generator')}
  generator, embeddings = nets['generator'], nets['discriminator'].electra.embeddings
  generator.electra.embeddings = embeddings
  generator.generator_lm_head.weight = embeddings.word_embeddings.weight
  return nets


def parameters(nets: dict[str, torch.nn.Module]) -> dict[str, torch.nn.Parameter]:
  """Every distinct Parameter of `nets` once, named 'network/torch name' by its first owner."""
  seen, named = set(), {}
  for name, net in nets.items():
    for key, param in net.named_parameters():
      if id(param) not in seen:
        seen.add(id(param))
        named[f'{name}/{key}'] = param
  return named


def to_our_tree(nets: dict[str, torch.nn.Module], target, read=lambda p: p.detach()):
  """`read(parameter)` of every tensor of `nets`, laid out as our parameter tree `target`."""
  tree = {}
  for name, net in nets.items():
    tensors = {key: read(param).numpy().copy()
               for key, param in net.named_parameters(remove_duplicate=False)}
    for key, subtree in params_lib.from_hf(tensors, name, target, f'torch {name}').items():
      if key in tree:  # the shared embedding block: both networks must hold the same one
        assert jax.tree.all(jax.tree.map(np.array_equal, tree[key], subtree)), key
      tree[key] = subtree
  return tree


def gradients_as_our_tree(nets, target):
  return to_our_tree(nets, target, read=lambda p: p.grad)


class Draws(NamedTuple):
  """What our step drew at random for one batch, as torch tensors."""
  masked_ids: torch.Tensor  # [B, L] the masked LM's input
  positions: torch.Tensor   # [B, N]
  weights: torch.Tensor     # [B, N] 1.0 where a slot is a selected position
  targets: torch.Tensor     # [B, N] the original tokens there
  sampled: torch.Tensor | None = None  # [B, N] ELECTRA's sampled replacements


def scatter(input_ids, draws: Draws, values):
  """`input_ids` with `values` [B, N] written at the selected positions."""
  selected = draws.weights > 0
  rows = torch.arange(input_ids.shape[0])[:, None].expand_as(draws.positions)
  written = input_ids.clone()
  written[rows[selected], draws.positions[selected]] = values[selected]
  return written


def masked_lm_loss(net, segment_ids, draws: Draws):
  """transformers' own masked-LM loss: mean cross-entropy over the selected positions."""
  labels = scatter(torch.full_like(draws.masked_ids, -100), draws, draws.targets)
  return net(input_ids=draws.masked_ids, token_type_ids=segment_ids,
             attention_mask=(draws.masked_ids != 0).long(), labels=labels).loss


def electra_loss(nets, input_ids, segment_ids, draws: Draws, gen_weight, disc_weight):
  """(loss, mlm_loss, disc_loss, labels): generator MLM, then replaced-token detection."""
  mlm_loss = masked_lm_loss(nets['generator'], segment_ids, draws)
  fake_ids = scatter(input_ids, draws, draws.sampled)
  labels = (fake_ids != input_ids).float()
  # The attention mask is taken from the ids the discriminator sees, as model.Electra does: a
  # replacement sampled as token 0 ([PAD]) is not attended to.
  disc_logits = nets['discriminator'](input_ids=fake_ids, token_type_ids=segment_ids,
                                      attention_mask=(fake_ids != 0).long()).logits
  per_token = torch.nn.functional.binary_cross_entropy_with_logits(disc_logits, labels,
                                                                   reduction='none')
  input_mask = (input_ids != 0).float()
  disc_loss = (per_token * input_mask).sum() / input_mask.sum().clamp(min=1.0)
  return gen_weight * mlm_loss + disc_weight * disc_loss, mlm_loss, disc_loss, labels


# ---- the optimizer ----------------------------------------------------------------------------

class AdamState(NamedTuple):
  count: int                      # updates done so far
  mu: dict[str, torch.Tensor]     # first moments by parameter name
  nu: dict[str, torch.Tensor]     # second moments


def adam_init(named: dict[str, torch.nn.Parameter]) -> AdamState:
  zeros = lambda: {name: torch.zeros_like(p) for name, p in named.items()}
  return AdamState(0, zeros(), zeros())


def learning_rate(step: int, config) -> float:
  """Linear warmup times a linear decay to zero that starts at step 0."""
  decay = 1.0 - min(step, config.num_train_steps) / max(config.num_train_steps, 1)
  warmup = min(1.0, step / config.warmup_steps) if config.warmup_steps > 0 else 1.0
  return config.learning_rate * decay * warmup


def wants_decay(name: str) -> bool:
  """Weight decay for every tensor but LayerNorm parameters and biases (torch names)."""
  return not (name.endswith('bias') or 'LayerNorm' in name)


@torch.no_grad()
def adamw_update(named: dict[str, torch.nn.Parameter], state: AdamState, config) -> AdamState:
  """One update from the parameters' .grad: clip the global norm, Adam, decoupled decay, lr.

  Adam without bias correction, as the original ELECTRA ran it and as our default; the variant
  with correction is checked against a numpy reference in test_optim.py.
  """
  assert not config.adam_bias_correction
  grads = {name: p.grad for name, p in named.items()}
  norm = torch.sqrt(sum(torch.sum(g * g) for g in grads.values()))
  if norm >= config.max_grad_norm:
    grads = {name: g / norm * config.max_grad_norm for name, g in grads.items()}
  lr = learning_rate(state.count, config)
  b1, b2 = config.adam_b1, config.adam_b2
  mu, nu = {}, {}
  for name, p in named.items():
    mu[name] = b1 * state.mu[name] + (1 - b1) * grads[name]
    nu[name] = b2 * state.nu[name] + (1 - b2) * grads[name] * grads[name]
    update = mu[name] / (torch.sqrt(nu[name]) + config.adam_eps)
    if wants_decay(name):
      update = update + config.weight_decay * p
    p.add_(-lr * update)
  return AdamState(state.count + 1, mu, nu)
