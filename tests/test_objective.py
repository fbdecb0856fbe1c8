"""The ELECTRA objective against the paper's rules."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_config
from electra_jax import model as model_lib
from electra_jax import objective
PAD_ID, CLS_ID, SEP_ID, MASK_ID = objective.SpecialIds()


def packed_like_sequences(rng, count, length, vocab=1000):
  """[CLS] A [SEP] B [SEP] + padding; 95% full length, the rest random shorter (as the packer)."""
  lengths = np.where(rng.random(count) < 0.95, length, rng.integers(5, length + 1, count))
  ids = rng.integers(5, vocab, (count, length))
  ids[np.arange(length)[None, :] >= lengths[:, None]] = PAD_ID
  ids[:, 0] = CLS_ID
  ids[np.arange(count), lengths - 1] = SEP_ID
  split = rng.integers(2, lengths - 1)
  ids[np.arange(count), split] = SEP_ID
  return ids


@pytest.fixture(scope='module')
def masked_10k():
  ids = packed_like_sequences(np.random.default_rng(0), 10_240, 128)
  fn = jax.jit(functools.partial(objective.mask_inputs, mask_prob=0.15))
  chunks = [fn(jax.random.PRNGKey(i), jnp.asarray(ids[i * 1024:(i + 1) * 1024]))
            for i in range(10)]
  masked = objective.Masked(*[np.concatenate(parts) for parts in zip(*chunks)])
  return ids, masked


def test_slot_count_as_original():
  assert objective.num_slots(128, 0.15) == 19
  assert objective.num_slots(512, 0.15) == 79
  assert objective.num_slots(512, 0.25) == 130


def test_masking_statistics_over_10k_sequences(masked_10k):
  ids, m = masked_10k
  selected = m.weights > 0
  num_tokens = (ids != PAD_ID).sum(-1)
  # Per sequence exactly max(1, min(N, round(num_tokens * p))) positions are selected...
  expected = np.clip(np.round(num_tokens * 0.15), 1, 19)
  np.testing.assert_array_equal(selected.sum(-1), expected)
  # ...which over the corpus is the mask probability within one percentage point.
  fraction = selected.sum() / num_tokens.sum()
  assert abs(fraction - 0.15) < 0.01, fraction
  # Never [CLS], [SEP], [MASK] or padding; no position twice.
  originals = np.take_along_axis(ids, m.positions, 1)[selected]
  assert not np.isin(originals, [PAD_ID, CLS_ID, SEP_ID, MASK_ID]).any()
  assert all(len(set(p[s])) == s.sum() for p, s in zip(m.positions, selected))
  # 85% of selected positions become [MASK]; the rest keep their token (never a random one).
  written = np.take_along_axis(m.input_ids, m.positions, 1)[selected]
  mask_share = (written == MASK_ID).mean()
  assert abs(mask_share - 0.85) < 0.02, mask_share
  np.testing.assert_array_equal(written[written != MASK_ID], originals[written != MASK_ID])
  # Positions that were not selected are untouched.
  untouched = np.ones_like(ids, bool)
  np.put_along_axis(untouched, np.where(selected, m.positions, 0), ~selected, 1)
  untouched[:, 0] = True  # position 0 ([CLS]) is never selected; the put above may hit it
  np.testing.assert_array_equal(m.input_ids[untouched], ids[untouched])
  print(f'selected fraction {fraction:.4f}, [MASK] share {mask_share:.4f}')


def test_special_ids_come_from_the_vocabulary():
  # A BERT WordPiece vocabulary: [CLS]=101, [SEP]=102, [MASK]=103.
  bert = objective.SpecialIds(pad=0, cls=101, sep=102, mask=103)
  ids = jnp.array([[101, 7, 8, 9, 102, 2, 3, 4, 102] + [0] * 23] * 64)
  m = objective.mask_inputs(jax.random.PRNGKey(0), ids, 0.5, bert)
  chosen = np.take_along_axis(np.asarray(ids), np.asarray(m.positions), 1)[np.asarray(m.weights) > 0]
  assert not np.isin(chosen, [0, 101, 102]).any() and np.isin([2, 3, 4], chosen).all()
  assert (np.asarray(m.input_ids) == 103).any()


def test_sequence_with_few_candidates_selects_only_candidates():
  ids = jnp.array([[CLS_ID, 7, SEP_ID] + [PAD_ID] * 29])
  m = objective.mask_inputs(jax.random.PRNGKey(0), ids, 0.15)
  assert float(m.weights.sum()) == 1.0
  assert int(m.positions[0, 0]) == 1


def test_correct_sample_is_labelled_original():
  ids = jnp.array([[CLS_ID, 10, 11, 12, 13, SEP_ID, PAD_ID, PAD_ID]])
  masked = objective.Masked(input_ids=ids, positions=jnp.array([[1, 2, 3]]),
                            weights=jnp.array([[1.0, 1.0, 0.0]]), targets=jnp.array([[10, 11, 12]]))
  sampled = jnp.array([[10, 99, 98]])  # slot 0 samples the original, slot 2 is unused
  fake, labels = objective.replace_and_label(ids, masked, sampled)
  np.testing.assert_array_equal(fake, [[CLS_ID, 10, 99, 12, 13, SEP_ID, PAD_ID, PAD_ID]])
  np.testing.assert_array_equal(labels, [[0, 0, 1, 0, 0, 0, 0, 0]])


def test_sampling_follows_softmax_with_temperature():
  logits = jnp.log(jnp.array([[0.1, 0.2, 0.3, 0.4]]))
  for temperature in (1.0, 0.5):
    keys = jax.random.split(jax.random.PRNGKey(0), 40_000)
    draws = jax.vmap(lambda k: objective.sample_replacements(k[None], logits[None], temperature))(
        keys)
    freq = np.bincount(np.asarray(draws).ravel(), minlength=4) / draws.size
    expected = np.asarray(jax.nn.softmax(logits / temperature))[0]
    np.testing.assert_allclose(freq, expected, atol=0.01)


@pytest.fixture(scope='module')
def tiny_model():
  config = load_config('tiny')
  config.model.vocab_size = 200
  model = model_lib.Electra(config.model)
  params = jax.jit(lambda rng: model_lib.init_params(model, rng, 32))(jax.random.PRNGKey(0))
  ids = packed_like_sequences(np.random.default_rng(1), 8, 32, vocab=200)
  batch = {'input_ids': jnp.asarray(ids), 'segment_ids': jnp.zeros_like(jnp.asarray(ids))}
  return config, model, params, batch


def test_rtd_gradient_never_reaches_the_generator(tiny_model):
  config, model, params, batch = tiny_model

  def losses(p):
    _, stats = objective.electra_loss(model.apply, p, batch, jax.random.PRNGKey(3), config)
    return jnp.stack([stats['mlm_loss'], stats['disc_loss']])

  # d(MLM)/d(params) and d(RTD)/d(params) in one compiled reverse pass over both rows.
  jacobian = jax.jit(jax.jacrev(losses))(params)
  mlm_grads = jax.tree.map(lambda g: np.asarray(g[0]), jacobian)
  rtd_grads = jax.tree.map(lambda g: np.asarray(g[1]), jacobian)
  for part in ('generator', 'generator_head'):
    assert all(np.all(g == 0) for g in jax.tree.leaves(rtd_grads[part])), part
  # The shared embeddings and the discriminator do learn from the RTD loss...
  assert np.abs(rtd_grads['embeddings']['word_embeddings']['embedding']).sum() > 0
  assert np.abs(rtd_grads['discriminator']['layer_0']['output']['kernel']).sum() > 0
  # ...and the generator from the MLM loss (so the zero above is not vacuous).
  assert np.abs(mlm_grads['generator']['layer_0']['output']['kernel']).sum() > 0


def test_loss_is_weighted_sum_and_metrics_are_rates(tiny_model):
  config, model, params, batch = tiny_model
  loss, stats = jax.jit(lambda p: objective.electra_loss(
      model.apply, p, batch, jax.random.PRNGKey(4), config))(params)
  np.testing.assert_allclose(loss, stats['mlm_loss'] + 50.0 * stats['disc_loss'], rtol=1e-6)
  metrics = objective.summarize(jax.device_get(stats), 1)
  for name in ('mlm_accuracy', 'sampled_accuracy', 'disc_accuracy', 'disc_precision',
               'disc_recall', 'disc_auc', 'replaced_fraction'):
    assert 0.0 <= metrics[name] <= 1.0, name
  # Only selected positions can be replaced: at most the selected share of tokens.
  assert 0.0 < metrics['replaced_fraction'] <= 0.16


def test_mlm_loss_matches_float64_cross_entropy(tiny_model):
  config, model, params, batch = tiny_model
  rng = jax.random.PRNGKey(5)
  _, stats = objective.electra_loss(model.apply, params, batch, rng, config, train=False)
  masked = objective.prepare(jax.random.split(rng)[0], batch['input_ids'], config).masked
  logits = np.asarray(model.apply({'params': params}, masked.input_ids, batch['segment_ids'],
                                  masked.positions, method='generate'), np.float64)
  log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
      - logits.max(-1, keepdims=True)
  nll = -np.take_along_axis(log_probs, np.asarray(masked.targets)[..., None], -1)[..., 0]
  w = np.asarray(masked.weights)
  np.testing.assert_allclose(float(stats['mlm_loss']), (nll * w).sum() / w.sum(), rtol=1e-5)


def test_batch_auc_matches_pairwise_definition():
  rng = np.random.default_rng(0)
  labels = (rng.random((8, 64)) < 0.1).astype(np.float32)
  weights = (rng.random((8, 64)) < 0.9).astype(np.float32)
  scores = rng.normal(0.5 * labels, 1.0).astype(np.float32)
  auc = float(objective.batch_auc(jnp.asarray(scores), jnp.asarray(labels), jnp.asarray(weights)))
  valid = weights > 0
  pos, neg = scores[valid & (labels > 0)], scores[valid & (labels == 0)]
  exact = (pos[:, None] > neg[None]).mean()
  np.testing.assert_allclose(auc, exact, rtol=1e-6)
  # Tiny but consistent differences still rank perfectly (a binned AUC would say 0.5 here).
  tiny = jnp.asarray(-1.75 + 1e-4 * labels)
  assert float(objective.batch_auc(tiny, jnp.asarray(labels), jnp.ones_like(tiny))) == 1.0
