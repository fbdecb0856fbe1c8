"""config.generator_kind='unigram': ELECTRA whose replacements come from the data's unigram
distribution, with no generator network (the paper's section 3.2, Figure 3)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from electra_jax import objective
from electra_jax.common import config as config_lib
from electra_jax.training import flops
from electra_jax.common.errors import UsageError
from electra_jax.objective import masking
from test_objective_ablations import (
    FAKE_IDS, INPUT_IDS, SELECTED, TOLERANCE, WEIGHTS, bce, config_for, fixed_batch, stub_apply)


def unigram_config(name='electra'):
  config = config_for(name)
  config.generator_kind = 'unigram'
  return config


def test_draws_follow_the_batchs_unigram_counts_and_never_a_special():
  # 3 sequences; [CLS]=2, [SEP]=3, [MASK]=4 and padding must never be drawn.
  ids = jnp.array([[2, 7, 7, 7, 9, 3, 0, 0],
                   [2, 9, 11, 7, 4, 3, 0, 0],
                   [2, 12, 7, 9, 11, 11, 5, 3]])
  counts = {5: 1, 7: 5, 9: 3, 11: 3, 12: 1}  # the 13 candidates, counted by hand
  draws = np.asarray(masking.unigram_replacements(jax.random.PRNGKey(0), ids, (400, 250)))
  assert draws.dtype == np.int32 and draws.shape == (400, 250)
  assert set(np.unique(draws)) == set(counts)
  total = draws.size
  for token, count in counts.items():
    p = count / 13
    sigma = np.sqrt(p * (1 - p) / total)
    assert abs(np.mean(draws == token) - p) < 5 * sigma, token


def test_prepare_writes_draws_at_the_selected_positions_only():
  ids = jnp.asarray(np.random.default_rng(3).integers(5, 60, (4, 16)))
  ids = ids.at[:, 0].set(2).at[:, -1].set(3).at[1, 10:].set(0)
  config = unigram_config()
  prepared = objective.prepare(jax.random.PRNGKey(7), ids, config)
  selected = masking.select_positions(jax.random.split(jax.random.PRNGKey(7))[0], ids,
                                      config.mask_prob)
  masked = prepared.masked
  # ELECTRA's selection, with no [MASK] written: nothing here reads one.
  for field in ('positions', 'weights', 'targets'):
    np.testing.assert_array_equal(getattr(masked, field), getattr(selected, field))
  assert prepared.sample_keys is None and not np.any(np.asarray(masked.input_ids) == 4)
  changed = np.asarray(masked.input_ids) != np.asarray(ids)
  rows, positions = np.nonzero(np.asarray(selected.weights))
  chosen = np.zeros_like(changed)
  chosen[rows, np.asarray(selected.positions)[rows, positions]] = True
  assert not np.any(changed & ~chosen) and changed.sum() > 0
  assert float(prepared.mlm_count) == np.sum(np.asarray(selected.weights))


def test_loss_is_disc_weight_times_rtd_at_every_token():
  """The hand batch's draws (FAKE_IDS: one replaced 5 by 9, one drew the original 9, one
  replaced 6 by 7), the discriminator's fixed logits, the formula in float64."""
  batch, prepared, logits = fixed_batch()
  masked = prepared.masked._replace(input_ids=jnp.asarray(FAKE_IDS))
  prepared = prepared._replace(masked=masked, sample_keys=None)
  seen = {}
  apply_fn = stub_apply(logits, seen)
  loss, stats = objective.partial_loss(
      lambda variables, ids, segments, deterministic, rngs=None: apply_fn(
          variables, ids, segments, method='discriminate'),
      {}, batch, prepared, jax.random.PRNGKey(1), unigram_config(), train=True)
  np.testing.assert_array_equal(seen['discriminate'], FAKE_IDS)
  d = logits['discriminate']
  rtd = np.mean([bce(d[r, p], float(FAKE_IDS[r, p] != INPUT_IDS[r, p]))
                 for r in range(INPUT_IDS.shape[0]) for p in range(INPUT_IDS.shape[1])
                 if INPUT_IDS[r, p]])
  np.testing.assert_allclose(stats['disc_loss'], rtd, **TOLERANCE)
  np.testing.assert_allclose(loss, 50.0 * rtd, **TOLERANCE)
  assert 'mlm_loss' not in stats
  assert stats['replaced_count'] == 2 and stats['token_count'] == 11
  assert stats['sampled_correct'] == 1 and stats['mlm_count'] == WEIGHTS.sum() == len(SELECTED)


def test_no_generator_network_and_its_flops():
  config = config_lib.default_config()
  config.model.update(vocab_size=100, embedding_size=16, hidden_size=32, num_layers=1,
                      num_heads=2, intermediate_size=64)
  config.update(batch_size=4, max_seq_length=16)
  electra = flops.forward_flops(config)
  config.generator_kind = 'unigram'
  unigram = flops.forward_flops(config)
  assert unigram == {k: electra[k] for k in ('discriminator', 'discriminator_attention',
                                             'discriminator_head')}
  from electra_jax.training import train  # pylint: disable=g-import-not-at-top
  params = jax.eval_shape(lambda: train.init_params(train.make_model(config),
                                                    jax.random.PRNGKey(0), 16))
  assert sorted(params) == ['discriminator', 'discriminator_head', 'embeddings']


@pytest.mark.parametrize('setting, message', [
    ({'objective': 'mlm'}, "generator_kind='unigram' applies to objective electra, not 'mlm'"),
    ({'embedding_sharing': 'none'}, "no generator network to share with; leave "
                                    "embedding_sharing unset, not 'none'"),
    ({'generator_kind': 'bigram'}, "generator_kind='bigram': use one of joint, two_stage, frozen, "
                                   'unigram'),
])
def test_settings_that_need_a_generator_network_are_refused(setting, message):
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  config.generator_kind = 'unigram'
  config.update(setting)
  with pytest.raises(UsageError, match=message):
    config_lib.validate(config, 1)
