"""The objectives against the papers' rules: ELECTRA's masking and loss, BERT's MLM baseline."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from conftest import load_config
from electra_jax.model import networks as model_lib
from electra_jax import objective
from electra_jax.objective import electra, masking
PAD_ID, CLS_ID, SEP_ID, MASK_ID, UNK_ID = objective.SpecialIds().ids()


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


def mask_10k(mask_fn):
  """`mask_fn` over 10,240 packed-like sequences of 128 tokens (vocabulary 1000), in chunks."""
  ids = packed_like_sequences(np.random.default_rng(0), 10_240, 128)
  fn = jax.jit(functools.partial(mask_fn, mask_prob=0.15))
  chunks = [fn(jax.random.PRNGKey(i), jnp.asarray(ids[i * 1024:(i + 1) * 1024]))
            for i in range(10)]
  return ids, objective.Masked(*[np.concatenate(parts) for parts in zip(*chunks)])


@pytest.fixture(scope='module')
def masked_10k():
  return mask_10k(masking.mask_inputs)


@pytest.fixture(scope='module')
def bert_masked_10k():
  return mask_10k(functools.partial(masking.bert_mask_inputs, vocab_size=1000))


def test_slot_count_as_original():
  assert objective.num_slots(128, 0.15) == 19
  assert objective.num_slots(512, 0.15) == 79
  assert objective.num_slots(512, 0.25) == 130


def check_selection(ids, m):
  """The selection rule every objective shares; returns the originals and what was written."""
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
  np.testing.assert_array_equal(np.asarray(m.targets)[selected], originals)
  # Positions that were not selected are untouched.
  untouched = np.ones_like(ids, bool)
  np.put_along_axis(untouched, np.where(selected, m.positions, 0), ~selected, 1)
  untouched[:, 0] = True  # position 0 ([CLS]) is never selected; the put above may hit it
  np.testing.assert_array_equal(m.input_ids[untouched], ids[untouched])
  print(f'selected fraction {fraction:.4f}')
  return originals, np.take_along_axis(m.input_ids, m.positions, 1)[selected]


def test_masking_statistics_over_10k_sequences(masked_10k):
  originals, written = check_selection(*masked_10k)
  # 85% of selected positions become [MASK]; the rest keep their token (never a random one).
  mask_share = (written == MASK_ID).mean()
  assert abs(mask_share - 0.85) < 0.02, mask_share
  np.testing.assert_array_equal(written[written != MASK_ID], originals[written != MASK_ID])
  print(f'[MASK] share {mask_share:.4f}')


def test_bert_masking_statistics_over_10k_sequences(bert_masked_10k):
  """BERT's rule on ELECTRA's selection: 80% [MASK], 10% a random token, 10% unchanged."""
  originals, written = check_selection(*bert_masked_10k)
  masked, kept = written == MASK_ID, written == originals
  replaced = ~masked & ~kept
  shares = [float(x.mean()) for x in (masked, replaced, kept)]
  # ~190,000 selected positions: each share within 1 point (about 10 standard deviations).
  np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.01)
  # Random tokens are never special, and every ordinary id of the vocabulary turns up.
  assert set(written[replaced].tolist()) == set(range(5, 1000))
  print(f'[MASK] / random / unchanged shares {shares}')


@pytest.mark.parametrize('special', [objective.SpecialIds(),
                                     objective.SpecialIds(pad=0, cls=101, sep=102, mask=103,
                                                          unk=100)])
def test_random_tokens_are_uniform_over_the_non_special_ids(special):
  draws = np.asarray(masking.random_tokens(jax.random.PRNGKey(0), (1_000_000,), 120, special))
  counts = np.bincount(draws, minlength=120)
  allowed = np.setdiff1d(np.arange(120), list(special.ids()))
  assert counts[list(special.ids())].sum() == 0 and (counts[allowed] > 0).all()
  # Pearson's chi-square against uniform over the allowed ids: mean = dof, sd = sqrt(2 dof).
  expected = len(draws) / len(allowed)
  chi2 = (((counts[allowed] - expected) ** 2) / expected).sum()
  dof = len(allowed) - 1
  assert chi2 < dof + 5 * np.sqrt(2 * dof), chi2


def test_special_ids_come_from_the_vocabulary():
  # A BERT WordPiece vocabulary: [CLS]=101, [SEP]=102, [MASK]=103.
  bert = objective.SpecialIds(pad=0, cls=101, sep=102, mask=103)
  ids = jnp.array([[101, 7, 8, 9, 102, 2, 3, 4, 102] + [0] * 23] * 64)
  m = masking.mask_inputs(jax.random.PRNGKey(0), ids, 0.5, bert)
  chosen = np.take_along_axis(np.asarray(ids), np.asarray(m.positions), 1)[np.asarray(m.weights) > 0]
  assert not np.isin(chosen, [0, 101, 102]).any() and np.isin([2, 3, 4], chosen).all()
  assert (np.asarray(m.input_ids) == 103).any()


def test_sequence_with_few_candidates_selects_only_candidates():
  ids = jnp.array([[CLS_ID, 7, SEP_ID] + [PAD_ID] * 29])
  m = masking.mask_inputs(jax.random.PRNGKey(0), ids, 0.15)
  assert float(m.weights.sum()) == 1.0
  assert int(m.positions[0, 0]) == 1


def test_correct_sample_is_labelled_original():
  ids = jnp.array([[CLS_ID, 10, 11, 12, 13, SEP_ID, PAD_ID, PAD_ID]])
  masked = objective.Masked(input_ids=ids, positions=jnp.array([[1, 2, 3]]),
                            weights=jnp.array([[1.0, 1.0, 0.0]]), targets=jnp.array([[10, 11, 12]]))
  sampled = jnp.array([[10, 99, 98]])  # slot 0 samples the original, slot 2 is unused
  fake, labels = masking.replace_and_label(ids, masked, sampled)
  np.testing.assert_array_equal(fake, [[CLS_ID, 10, 99, 12, 13, SEP_ID, PAD_ID, PAD_ID]])
  np.testing.assert_array_equal(labels, [[0, 0, 1, 0, 0, 0, 0, 0]])


def chi_square_z(counts, probs):
  """How many standard deviations Pearson's chi-square of `counts` lies above its mean under
  `probs` (entries with probability 0 must have no count: any count there is infinitely far)."""
  counts, probs = np.asarray(counts, np.float64), np.asarray(probs, np.float64)
  if np.any(counts[probs == 0]):
    return np.inf
  seen = probs > 0
  expected = probs[seen] * counts.sum()
  chi2, df = np.sum((counts[seen] - expected) ** 2 / expected), seen.sum() - 1
  return (chi2 - df) / np.sqrt(2 * df)


@pytest.mark.parametrize('sampler', masking.SAMPLERS)
def test_sampling_follows_softmax_with_temperature(sampler):
  """Both samplers draw softmax(logits / T) over a skewed 64-entry vocabulary with an entry of
  probability 0 (a -inf logit), [B, P] slots at a time, one key per sequence."""
  logits = jnp.asarray(np.random.default_rng(0).normal(0, 2, 64), jnp.float32).at[5].set(-jnp.inf)
  draw = jax.jit(lambda keys, logits, t: masking.sample_replacements(keys, logits, t, sampler),
                 static_argnums=2)
  for temperature in (1.0, 0.5):
    keys = jax.random.split(jax.random.PRNGKey(1), 2_000)
    draws = np.asarray(draw(keys, jnp.broadcast_to(logits, (2_000, 50, 64)), temperature))
    counts = np.bincount(draws.ravel(), minlength=64)
    # The expected shares in NumPy's float64: JAX without x64 would truncate the cast.
    scaled = np.asarray(logits, np.float64) / temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    assert counts[5] == 0
    assert abs(chi_square_z(counts, probs)) < 5, (sampler, temperature)
    # The check has the power to see a sampler that is one entry off.
    assert chi_square_z(counts, np.roll(probs, 1)) > 100


def test_inverse_cdf_draws_the_tokens_of_one_cumulative_sum_in_float64():
  """The two-level lookup (blocks, then a token in the block) against one cumulative softmax over
  the whole vocabulary in NumPy's float64, with the same uniforms: the same token in every slot
  but those a float32 rounding puts across a boundary; never one of probability 0. 1,000 entries
  (not a multiple of the 32-entry block: the last block is padded), with whole blocks and the
  vocabulary's last entries at -inf."""
  rng = np.random.default_rng(0)
  logits = rng.normal(0, 3, (64, 19, 1000)).astype(np.float32)
  logits[:, :, 64:128] = -np.inf  # blocks 2 and 3 of 32 entries
  logits[:, :, 990:] = -np.inf
  logits[:, :, 7] = -np.inf
  keys = jax.random.split(jax.random.PRNGKey(4), 64)
  draws = np.asarray(jax.jit(lambda k, l: masking.sample_replacements(k, l, 1.5, 'inverse_cdf'))(
      keys, jnp.asarray(logits)))
  uniforms = np.asarray(jax.vmap(lambda k: jax.random.uniform(k, (19,)))(keys), np.float64)
  scaled = np.asarray(jnp.asarray(logits) / 1.5, np.float64)
  probs = np.exp(scaled - scaled.max(-1, keepdims=True))
  cdf = np.cumsum(probs, -1)
  expected = (cdf <= (uniforms * cdf[..., -1])[..., None]).sum(-1)
  assert np.all(probs[np.arange(64)[:, None], np.arange(19)[None], draws] > 0)
  assert np.mean(draws == expected) > 0.999, np.mean(draws == expected)
  # The lookup's guard for a target rounded up to the total: the last entry of any weight.
  assert masking.last_positive(jnp.asarray([[0., 1., 0.], [1., 0., 0.], [1., 1., 1.]])).tolist() \
      == [1, 0, 2]


@pytest.fixture(scope='module')
def tiny_model():
  config = load_config('tiny')
  config.model.vocab_size = 200
  model = model_lib.Electra(config.model)
  params = jax.jit(lambda rng: model_lib.init_params(model, rng, 32))(jax.random.PRNGKey(0))
  ids = packed_like_sequences(np.random.default_rng(1), 8, 32, vocab=200)
  batch = {'input_ids': jnp.asarray(ids), 'segment_ids': jnp.zeros_like(jnp.asarray(ids))}
  return config, model, params, batch


def test_the_sampler_changes_the_draws_not_the_generator(tiny_model):
  """config.sampler='inverse_cdf' through the ELECTRA loss: the generator's loss (computed
  before sampling) is the same, the samples are other draws of it, and as often replaced."""
  config, model, params, batch = tiny_model
  stats = {}
  for sampler in masking.SAMPLERS:
    run = config.copy_and_resolve_references()
    run.sampler = sampler
    _, stats[sampler] = jax.jit(lambda p: objective.loss(model.apply, p, batch,
                                                         jax.random.PRNGKey(3), run))(params)
  categorical, inverse_cdf = stats['categorical'], stats['inverse_cdf']
  assert float(categorical['mlm_loss']) == float(inverse_cdf['mlm_loss'])
  assert float(categorical['disc_loss']) != float(inverse_cdf['disc_loss'])
  # An untrained generator over 200 tokens replaces nearly every selected token either way.
  assert float(inverse_cdf['replaced_count']) == pytest.approx(
      float(categorical['replaced_count']), rel=0.1)


def test_rtd_gradient_never_reaches_the_generator(tiny_model):
  config, model, params, batch = tiny_model

  def losses(p):
    _, stats = objective.loss(model.apply, p, batch, jax.random.PRNGKey(3), config)
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
  loss, stats = jax.jit(lambda p: objective.loss(
      model.apply, p, batch, jax.random.PRNGKey(4), config, auc=True))(params)
  np.testing.assert_allclose(loss, stats['mlm_loss'] + 50.0 * stats['disc_loss'], rtol=1e-6)
  metrics = objective.summarize(jax.device_get(stats), 1)
  for name in ('mlm_accuracy', 'sampled_accuracy', 'disc_accuracy', 'disc_precision',
               'disc_recall', 'disc_auc', 'replaced_fraction'):
    assert 0.0 <= metrics[name] <= 1.0, name
  # Only selected positions can be replaced: at most the selected share of tokens.
  assert 0.0 < metrics['replaced_fraction'] <= 0.16


def float64_cross_entropy(logits, masked):
  """Mean negative log-likelihood of the targets over the selected positions, in float64."""
  logits = np.asarray(logits, np.float64)
  top = logits.max(-1, keepdims=True)
  log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
  nll = -np.take_along_axis(log_probs, np.asarray(masked.targets)[..., None], -1)[..., 0]
  weights = np.asarray(masked.weights)
  return (nll * weights).sum() / weights.sum()


def test_mlm_loss_matches_float64_cross_entropy(tiny_model):
  config, model, params, batch = tiny_model
  rng = jax.random.PRNGKey(5)
  _, stats = objective.loss(model.apply, params, batch, rng, config, train=False)
  masked = objective.draw(rng, batch['input_ids'], config)[0].masked
  logits = model.apply({'params': params}, masked.input_ids, batch['segment_ids'],
                       masked.positions, method='generate')
  np.testing.assert_allclose(float(stats['mlm_loss']), float64_cross_entropy(logits, masked),
                             rtol=1e-5)


@pytest.fixture(scope='module')
def tiny_mlm(tiny_model):
  config, _, _, batch = tiny_model
  config = ml_collections.ConfigDict(config.to_dict())
  config.objective = 'mlm'
  model = objective.get(config).model(config.model)
  params = jax.jit(lambda rng: model_lib.init_params(model, rng, 32))(jax.random.PRNGKey(0))
  return config, model, params, batch


def test_mlm_objective_is_cross_entropy_at_the_bert_masked_positions(tiny_mlm):
  config, model, params, batch = tiny_mlm
  assert set(params) == {'embeddings', 'discriminator', 'mlm_head'}  # no generator
  rng = jax.random.PRNGKey(6)
  loss, stats = jax.jit(lambda p: objective.loss(model.apply, p, batch, rng, config,
                                                 train=False))(params)
  prepared = objective.draw(rng, batch['input_ids'], config)[0]
  masked = prepared.masked
  assert prepared.sample_keys is None and float(prepared.mlm_count) == masked.weights.sum()
  assert (np.asarray(masked.input_ids) == MASK_ID).any()
  # The loss is the network's cross-entropy on the masked input, at the selected positions.
  logits = model.apply({'params': params}, masked.input_ids, batch['segment_ids'],
                       masked.positions)
  assert logits.shape == masked.positions.shape + (config.model.vocab_size,)
  np.testing.assert_allclose(float(loss), float64_cross_entropy(logits, masked), rtol=1e-5)
  # Metrics: the MLM ones under their usual names, and nothing of the discriminator.
  metrics = objective.summarize(jax.device_get(stats), 1)
  assert set(metrics) == {'loss', 'mlm_loss', 'mlm_accuracy'}
  assert metrics['loss'] == metrics['mlm_loss'] == pytest.approx(float(loss))
  weights = np.asarray(masked.weights)
  hits = (np.argmax(np.asarray(logits), -1) == np.asarray(masked.targets)) * weights
  assert metrics['mlm_accuracy'] == pytest.approx(hits.sum() / weights.sum())
  # With dropout on, the loss trains every part of the network.
  grads = jax.jit(jax.grad(lambda p: objective.loss(model.apply, p, batch, rng, config)[0]))(
      params)
  for part, tree in grads.items():
    assert all(np.abs(g).sum() > 0 for g in jax.tree.leaves(tree) if g.ndim > 1), part


def test_batch_auc_matches_pairwise_definition():
  rng = np.random.default_rng(0)
  labels = (rng.random((8, 64)) < 0.1).astype(np.float32)
  weights = (rng.random((8, 64)) < 0.9).astype(np.float32)
  scores = rng.normal(0.5 * labels, 1.0).astype(np.float32)
  auc = float(electra.batch_auc(jnp.asarray(scores), jnp.asarray(labels), jnp.asarray(weights)))
  valid = weights > 0
  pos, neg = scores[valid & (labels > 0)], scores[valid & (labels == 0)]
  exact = (pos[:, None] > neg[None]).mean()
  np.testing.assert_allclose(auc, exact, rtol=1e-6)
  # Tiny but consistent differences still rank perfectly (a binned AUC would say 0.5 here).
  tiny = jnp.asarray(-1.75 + 1e-4 * labels)
  assert float(electra.batch_auc(tiny, jnp.asarray(labels), jnp.ones_like(tiny))) == 1.0


def test_batch_auc_counts_ties_as_one_half():
  rng = np.random.default_rng(1)
  labels = (rng.random((8, 64)) < 0.15).astype(np.float32)
  weights = (rng.random((8, 64)) < 0.9).astype(np.float32)
  # Scores on five levels: most pairs tie.
  scores = np.round(rng.normal(0.5 * labels, 1.0)).clip(-2, 2).astype(np.float32)
  auc = float(electra.batch_auc(jnp.asarray(scores), jnp.asarray(labels), jnp.asarray(weights)))
  valid = weights > 0
  pos, neg = scores[valid & (labels > 0)], scores[valid & (labels == 0)]
  exact = ((pos[:, None] > neg[None]) + 0.5 * (pos[:, None] == neg[None])).mean()
  np.testing.assert_allclose(auc, exact, rtol=1e-6)
  # One score for every token: 0.5 wherever the replaced tokens sit (here last in each row).
  late = np.zeros((8, 64), np.float32)
  late[:, 48:] = 1.0
  same = jnp.full((8, 64), 0.25)
  assert float(electra.batch_auc(same, jnp.asarray(late), jnp.ones_like(same))) == 0.5
