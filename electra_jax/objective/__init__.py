"""Pretraining objectives, chosen by `config.objective`, behind one interface: the train step
calls them through `draw` and `partial_loss` below and never asks which runs. An objective is
the network it trains and two pure functions:
  prepare(rng, input_ids, config, special) -> Prepared: everything random about the whole
      batch's inputs (masks, random tokens, sampling keys) and the counts that normalise the loss;
  partial_loss(apply_fn, params, batch, prepared, dropout_rng, config, train, special, auc)
      -> (loss, stats): the loss of `batch` (the whole batch, or a micro-batch with the matching
      rows of `prepared`) as its share of the batch's, and sums and counts for `summarize`.
Adding one: its module beside these, an entry in OBJECTIVES, its FLOPs in training/flops.py and
what it exports in hf/exporting.EXPORTED.
"""

import functools
from typing import Callable, NamedTuple

import jax
from ml_collections import ConfigDict

from electra_jax.model import networks as model_lib
from electra_jax.objective import all_tokens_mlm, electra, electric, mlm, replace_mlm, unigram
# The shared pieces, also reachable as objective.<name>.
from electra_jax.objective.masking import (  # noqa: F401
    Masked, Prepared, SpecialIds, num_slots, replace_and_label, sample_replacements)


class Objective(NamedTuple):
  model: Callable          # the Flax module it trains: model(config.model, dtype=..., ...)
  prepare: Callable        # see the module doc
  partial_loss: Callable
  detects: bool            # it has a replaced-token detector, so an AUC to report


OBJECTIVES = {
    'electra': Objective(model_lib.Electra, electra.prepare, electra.partial_loss, True),
    'mlm': Objective(model_lib.MaskedLM, mlm.prepare, mlm.partial_loss, False),
    'electra_15': Objective(model_lib.Electra, electra.prepare, electra.partial_loss_15, True),
    'replace_mlm': Objective(model_lib.ReplaceMLM, replace_mlm.prepare, replace_mlm.partial_loss,
                             False),
    'all_tokens_mlm': Objective(functools.partial(model_lib.ReplaceMLM, copy_mechanism=True),
                                all_tokens_mlm.prepare, all_tokens_mlm.partial_loss, False),
    'electric': Objective(model_lib.Electric, electric.prepare, electric.partial_loss, True),
}
# ELECTRA whose replacements come from the unigram distribution (config.generator_kind).
UNIGRAM_ELECTRA = Objective(model_lib.Discriminator, unigram.prepare, unigram.partial_loss, True)


def get(config: ConfigDict) -> Objective:
  return UNIGRAM_ELECTRA if config.generator_kind == 'unigram' else OBJECTIVES[config.objective]


def prepare(rng, input_ids, config: ConfigDict, special: SpecialIds = SpecialIds()) -> Prepared:
  return get(config).prepare(rng, input_ids, config, special)


def draw(rng, input_ids, config: ConfigDict,
         special: SpecialIds = SpecialIds()) -> tuple[Prepared, jax.Array]:
  """What a step with key `rng` draws: the prepared inputs and the key its dropout derives from
  (train step, eval step and `loss` alike, so a test can rebuild a step's masked inputs)."""
  prepare_rng, dropout_rng = jax.random.split(rng)
  return prepare(prepare_rng, input_ids, config, special), dropout_rng


def partial_loss(apply_fn, params, batch, prepared: Prepared, dropout_rng, config: ConfigDict,
                 train: bool = True, special: SpecialIds = SpecialIds(), auc: bool = False):
  return get(config).partial_loss(apply_fn, params, batch, prepared, dropout_rng, config, train,
                                  special, auc)


def loss(apply_fn, params, batch, rng, config: ConfigDict, train: bool = True,
         special: SpecialIds = SpecialIds(), auc: bool = False):
  """The objective's loss of one whole batch and its statistics; `train` turns dropout on, `auc`
  adds the discriminator's exact ROC AUC (objectives with one)."""
  prepared, dropout_rng = draw(rng, batch['input_ids'], config, special)
  return partial_loss(apply_fn, params, batch, prepared, dropout_rng, config, train, special, auc)


# Losses are per-step values (micro-batches add up to the step's), averaged over the steps.
_MEANS = ('loss', 'mlm_loss', 'disc_loss', 'disc_mlm_loss', 'copy_loss')
# Rates: metric -> (numerator, denominator), both summed over steps (and devices, micro-batches).
_RATES = {
    'mlm_accuracy': ('mlm_correct', 'mlm_count'),
    'sampled_accuracy': ('sampled_correct', 'mlm_count'),
    'disc_accuracy': ('disc_correct', 'token_count'),
    'disc_precision': ('true_positives', 'predicted_positives'),
    'disc_recall': ('true_positives', 'replaced_count'),
    'disc_auc': ('disc_auc', 'auc_batches'),  # the mean of the per-batch AUCs
    'replaced_fraction': ('replaced_count', 'token_count'),
    'disc_mlm_accuracy': ('disc_mlm_correct', 'disc_mlm_count'),  # the ablations' MLM
    'copy_accuracy': ('copy_correct', 'token_count'),
}


def summarize(stats, num_steps) -> dict[str, float]:
  """Statistics summed over `num_steps` steps as the metrics they support (host floats): an MLM
  run has loss, mlm_loss and mlm_accuracy, and no disc_* or sampled_* metrics."""
  metrics = {name: float(stats[name]) / num_steps for name in _MEANS if name in stats}
  metrics.update({name: float(stats[num]) / max(float(stats[den]), 1.0)
                  for name, (num, den) in _RATES.items() if num in stats})
  return metrics
