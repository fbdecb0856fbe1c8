"""The paper's ablations (Table 5) and Electric as objectives: each loss against its formula,
written out again here in numpy float64 on a hand-checkable batch. Each runs through the trainer
in tests/test_every_switch.py.

The networks are replaced by a stub returning fixed logits, so what is checked is the objective
alone: which positions count, what the discriminator-sized network reads, and the arithmetic.
"""

import jax
import jax.numpy as jnp
from electra_jax.common import config as config_lib
import numpy as np
import pytest

from electra_jax.training import flops
from electra_jax import objective
from electra_jax.objective import masking

B, L, N, V = 2, 6, 2, 10
INPUT_IDS = np.array([[2, 5, 6, 7, 3, 0],
                      [2, 8, 9, 5, 6, 3]])
POSITIONS = np.array([[1, 3], [2, 4]])
WEIGHTS = np.array([[1., 0.], [1., 1.]])  # sequence 0 uses one slot of two
# The generator's samples per slot, forced by a +40 logit (any other token: p < 1e-15). Slot
# (0, 0) replaces 5 by 9, (1, 0) samples the original 9 (so counts as original), (1, 1) replaces
# 6 by 7; the unused slot (0, 1) samples 5, which must not be written.
SAMPLES = np.array([[9, 5], [9, 7]])
FAKE_IDS = np.array([[2, 9, 6, 7, 3, 0],
                     [2, 8, 9, 5, 7, 3]])
SELECTED = [(0, 1), (1, 2), (1, 4)]  # (row, position) of every used slot
SLOTS = [(0, 0), (1, 0), (1, 1)]     # the same, as (row, slot)
CANDIDATES = 7  # tokens other than [PAD], [CLS], [SEP]: 5 6 7 and 8 9 5 6
TOLERANCE = dict(rtol=1e-6, atol=1e-6)  # float32 objective vs float64 formula


def config_for(name):
  config = config_lib.default_config()
  config.update(objective=name, temperature=1.0, sampler='categorical', gen_weight=0.7,
                disc_weight=50.0, copy_weight=0.5, mask_prob=0.15)
  return config


def fixed_batch():
  """Fixed masks, logits and sampling keys: (batch, prepared, logits by network)."""
  rng = np.random.default_rng(14)
  targets = np.take_along_axis(INPUT_IDS, POSITIONS, 1)
  masked_ids = INPUT_IDS.copy()
  for row, position in SELECTED:
    masked_ids[row, position] = masking.SpecialIds().mask
  masked = objective.Masked(jnp.asarray(masked_ids), jnp.asarray(POSITIONS),
                            jnp.asarray(WEIGHTS, jnp.float32), jnp.asarray(targets))
  prepared = objective.Prepared(masked, jax.random.split(jax.random.PRNGKey(0), B),
                                jnp.float32(WEIGHTS.sum()), jnp.float32((INPUT_IDS != 0).sum()))
  gen = rng.normal(size=(B, N, V))
  gen[np.arange(B)[:, None], np.arange(N)[None, :], SAMPLES] += 40.0
  # Electric's cloze logits at every position, forcing the same samples where it samples.
  cloze = rng.normal(size=(B, L, V)) * 2
  for (r, s), (_, p) in zip([*SLOTS, (0, 1)], [*SELECTED, (0, 3)]):
    cloze[r, p, SAMPLES[r, s]] += 40.0
  logits = {'generate': gen, 'discriminate': rng.normal(size=(B, L)) * 2,
            'predict_selected': rng.normal(size=(B, N, V)) * 2,
            'predict_all': rng.normal(size=(B, L, V)) * 2, 'copy': rng.normal(size=(B, L)) * 2,
            'cloze': cloze}
  batch = {'input_ids': jnp.asarray(INPUT_IDS), 'segment_ids': jnp.zeros((B, L), jnp.int32)}
  return batch, prepared, logits


def stub_apply(logits, seen):
  """Stands in for the model's apply: fixed float32 logits; records what each network read."""
  f32 = lambda x: jnp.asarray(x, jnp.float32)

  def apply_fn(variables, input_ids, segment_ids, *args, method=None, rngs=None):
    del variables, segment_ids, rngs
    seen[method] = np.asarray(input_ids)
    if method in ('generate', 'discriminate', 'cloze'):
      return f32(logits[method])
    positions = args[0]
    if positions.shape[1] == N:
      return f32(logits['predict_selected']), None
    np.testing.assert_array_equal(positions, np.broadcast_to(np.arange(L), (B, L)))
    return f32(logits['predict_all']), f32(logits['copy'])
  return apply_fn


def run_loss(name):
  batch, prepared, logits = fixed_batch()
  if name == 'electric':  # nothing [MASK]ed; the cloze loss's denominator counts candidates
    prepared = prepared._replace(masked=prepared.masked._replace(
        input_ids=jnp.asarray(INPUT_IDS)), mlm_count=jnp.float32(CANDIDATES))
  seen = {}
  loss, stats = objective.partial_loss(stub_apply(logits, seen), {}, batch, prepared,
                                       jax.random.PRNGKey(1), config_for(name), train=True)
  return float(loss), jax.device_get(stats), logits, seen


# ---- the formulas, independently, in float64 ------------------------------------------------

def log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def bce(logit, label):
  p = sigmoid(logit)
  return -(label * np.log(p) + (1 - label) * np.log(1 - p))


def generator_mlm(logits):
  """-mean over used slots of log softmax(generator logits)[original]."""
  return -np.mean([log_softmax(logits['generate'][r, s])[INPUT_IDS[r, p]]
                   for (r, s), (_, p) in zip(SLOTS, SELECTED)])


def test_the_stub_batch_is_what_it_claims():
  _, stats, _, seen = run_loss('electra_15')
  np.testing.assert_array_equal(seen['discriminate'], FAKE_IDS)
  assert stats['sampled_correct'] == 1 and stats['mlm_count'] == 3


def test_electra_15_counts_rtd_only_at_the_selected_positions():
  loss, stats, logits, seen = run_loss('electra_15')
  np.testing.assert_array_equal(seen['generate'][0], [2, 4, 6, 7, 3, 0])  # [MASK]ed input
  d = logits['discriminate']
  rtd = np.mean([bce(d[r, p], float(FAKE_IDS[r, p] != INPUT_IDS[r, p])) for r, p in SELECTED])
  np.testing.assert_allclose(stats['disc_loss'], rtd, **TOLERANCE)
  np.testing.assert_allclose(stats['mlm_loss'], generator_mlm(logits), **TOLERANCE)
  np.testing.assert_allclose(loss, 0.7 * generator_mlm(logits) + 50.0 * rtd, **TOLERANCE)
  # Its metrics are over the selected positions: 3 of them, 2 replaced.
  assert stats['token_count'] == 3 and stats['replaced_count'] == 2
  # ELECTRA on the same batch counts all 11 tokens, so the two losses differ.
  _, electra_stats, _, _ = run_loss('electra')
  all_tokens = np.mean([bce(d[r, p], float(FAKE_IDS[r, p] != INPUT_IDS[r, p]))
                        for r in range(B) for p in range(L) if INPUT_IDS[r, p]])
  np.testing.assert_allclose(electra_stats['disc_loss'], all_tokens, **TOLERANCE)
  assert abs(all_tokens - rtd) > 0.01


def test_replace_mlm_predicts_the_originals_from_the_samples():
  loss, stats, logits, seen = run_loss('replace_mlm')
  np.testing.assert_array_equal(seen['predict'], FAKE_IDS)  # samples, not [MASK]
  predicted = logits['predict_selected']
  disc_mlm = -np.mean([log_softmax(predicted[r, s])[INPUT_IDS[r, p]]
                       for (r, s), (_, p) in zip(SLOTS, SELECTED)])
  np.testing.assert_allclose(stats['disc_mlm_loss'], disc_mlm, **TOLERANCE)
  np.testing.assert_allclose(loss, 0.7 * generator_mlm(logits) + disc_mlm, **TOLERANCE)
  hits = sum(predicted[r, s].argmax() == INPUT_IDS[r, p] for (r, s), (_, p) in zip(SLOTS, SELECTED))
  assert stats['disc_mlm_correct'] == hits and stats['disc_mlm_count'] == 3
  assert stats['replaced_count'] == 2 and stats['token_count'] == 11


def test_all_tokens_mlm_mixes_copy_and_softmax_at_every_token():
  loss, stats, logits, seen = run_loss('all_tokens_mlm')
  np.testing.assert_array_equal(seen['predict'], FAKE_IDS)
  nll, copy, hits, copy_hits = [], [], 0, 0
  for r in range(B):
    for p in range(L):
      if INPUT_IDS[r, p] == 0:
        continue
      original, read = INPUT_IDS[r, p], FAKE_IDS[r, p]
      d = sigmoid(logits['copy'][r, p])
      softmax = np.exp(log_softmax(logits['predict_all'][r, p]))
      mixture = (1 - d) * softmax + d * np.eye(V)[read]
      nll.append(-np.log(d * (read == original) + (1 - d) * softmax[original]))
      np.testing.assert_allclose(-np.log(mixture[original]), nll[-1], rtol=1e-12)
      copy.append(bce(logits['copy'][r, p], float(read == original)))
      hits += mixture.argmax() == original
      copy_hits += (d > 0.5) == (read == original)
  assert len(nll) == 11
  np.testing.assert_allclose(stats['disc_mlm_loss'], np.mean(nll), **TOLERANCE)
  np.testing.assert_allclose(stats['copy_loss'], np.mean(copy), **TOLERANCE)
  np.testing.assert_allclose(loss, 0.7 * generator_mlm(logits) + np.mean(nll) + 0.5 * np.mean(copy),
                             **TOLERANCE)
  assert stats['disc_mlm_correct'] == hits and stats['disc_mlm_count'] == 11
  assert stats['copy_correct'] == copy_hits


def test_electric_is_a_cloze_loss_and_noise_contrastive_estimation():
  loss, stats, logits, seen = run_loss('electric')
  np.testing.assert_array_equal(seen['cloze'], INPUT_IDS)  # the text itself, never [MASK]
  np.testing.assert_array_equal(seen['discriminate'], FAKE_IDS)
  log_q = log_softmax(logits['cloze'])
  real = [(r, p) for r in range(B) for p in range(L) if INPUT_IDS[r, p]]
  candidates = [(r, p) for r, p in real if INPUT_IDS[r, p] not in (2, 3)]
  assert len(candidates) == CANDIDATES and len(real) == 11
  cloze = -np.mean([log_q[r, p, INPUT_IDS[r, p]] for r, p in candidates])
  # Every selected position is noise, (1, 2) too, where the sample equals the original.
  noise = {(r, p) for r, p in SELECTED}
  nce = np.mean([bce(logits['discriminate'][r, p] + log_q[r, p, FAKE_IDS[r, p]]
                     + np.log(0.15 / 0.85), float((r, p) in noise)) for r, p in real])
  np.testing.assert_allclose(stats['mlm_loss'], cloze, **TOLERANCE)
  np.testing.assert_allclose(stats['disc_loss'], nce, **TOLERANCE)
  np.testing.assert_allclose(loss, 0.7 * cloze + 50.0 * nce, **TOLERANCE)
  assert stats['replaced_count'] == 3 and stats['token_count'] == 11
  assert stats['sampled_correct'] == 1 and stats['mlm_count'] == 3


def test_electrics_cloze_model_never_sees_the_token_it_predicts():
  from conftest import load_config  # pylint: disable=g-import-not-at-top
  from electra_jax.model import networks as model_lib  # pylint: disable=g-import-not-at-top
  config = load_config('tiny')
  config.model.update(vocab_size=60, num_layers=1, dropout_rate=0.0, attention_dropout_rate=0.0)
  electric_model = model_lib.Electric(config.model)
  params = model_lib.init_params(electric_model, jax.random.PRNGKey(0), 12)
  ids = jnp.array([[2, 10, 11, 12, 13, 14, 15, 16, 17, 3, 0, 0]])
  cloze = lambda x: electric_model.apply({'params': params}, x, jnp.zeros_like(x), method='cloze')
  before = cloze(ids)
  for t in range(1, 9):
    after = cloze(ids.at[0, t].set(40))
    np.testing.assert_array_equal(after[0, t], before[0, t])  # its own token: no effect at all
    for neighbour in (t - 1, t + 1):  # both sides read it
      assert np.abs(after[0, neighbour] - before[0, neighbour]).max() > 1e-4, (t, neighbour)


def test_copy_likelihood_is_stable_where_d_saturates():
  from electra_jax.objective import all_tokens_mlm  # pylint: disable=g-import-not-at-top
  logits = jnp.zeros((1, 2, V))
  copy_logits = jnp.array([[60.0, -60.0]])  # D = 1 - 9e-27 and 9e-27: 1 - D rounds to 0 in f32
  ids = jnp.array([[5, 5]])
  log_p = all_tokens_mlm.copy_log_likelihood(logits, copy_logits, ids, jnp.array([[6, 6]]))
  # Not copied: log(1 - D) + log(1/V), finite, not log(0).
  np.testing.assert_allclose(log_p, [[-60.0 - np.log(V), -np.log(V)]], rtol=1e-6)


def test_every_objective_has_flops_and_the_ablations_count_their_heads():
  from conftest import load_config  # pylint: disable=g-import-not-at-top
  config = load_config('small')
  counts = {}
  for name in objective.OBJECTIVES:
    config.objective = name
    counts[name] = flops.forward_flops(config)
    assert flops.train_step_flops(config) == 3 * sum(counts[name].values())
  m, tokens = config.model, config.batch_size * config.max_seq_length
  positions = config.batch_size * masking.num_slots(config.max_seq_length, config.mask_prob)
  assert counts['electra_15'] == counts['electra']
  disc_head = 2 * tokens * m.hidden_size * (m.hidden_size + 1)
  replace = sum(counts['electra'].values()) - disc_head + 2 * positions * m.hidden_size * (
      m.embedding_size + 0) + 2 * positions * m.embedding_size * m.vocab_size
  assert sum(counts['replace_mlm'].values()) == replace
  all_tokens = (sum(counts['electra'].values()) - disc_head
                + 2 * tokens * m.embedding_size * (m.hidden_size + m.vocab_size)
                + 2 * tokens * m.hidden_size)
  assert sum(counts['all_tokens_mlm'].values()) == all_tokens
  gen_width = int(m.hidden_size * m.generator_hidden_size)  # small: 0.25 of 256
  electric = (sum(counts['electra'].values()) - counts['electra']['generator_head']
              - counts['electra']['vocabulary_projection']
              + counts['electra']['generator'] + counts['electra']['generator_attention']
              + 2 * tokens * 2 * gen_width * m.embedding_size
              + 2 * tokens * m.embedding_size * m.vocab_size)
  assert sum(counts['electric'].values()) == electric


def test_an_unknown_objective_is_one_clear_error():
  from electra_jax.common import config as config_lib  # pylint: disable=g-import-not-at-top
  from electra_jax.common.errors import UsageError  # pylint: disable=g-import-not-at-top
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  config.objective = 'electra15'
  with pytest.raises(UsageError, match="config.objective='electra15': use one of .*electra_15.*"
                                       'replace_mlm.*all_tokens_mlm'):
    config_lib.validate(config, 1)
