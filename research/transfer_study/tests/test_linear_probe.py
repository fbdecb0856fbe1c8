"""linear_probe.py: its logistic regression against scikit-learn's, and its frozen
features against the encoder's own outputs; end to end on a run in tests/test_main.py."""

import jax
import numpy as np
import pytest

from research.transfer_study import linear_probe

# A network small enough to encode in a moment (tests/test_finetune.py fine-tunes the same one).
TINY = dict(embedding_size=16, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
            max_position_embeddings=64)


@pytest.mark.parametrize('strength', [1e-3, 1e-1])
def test_fit_logistic_is_scikit_learns_regularised_logistic_regression(strength):
  linear_model = pytest.importorskip('sklearn.linear_model')
  rng = np.random.default_rng(0)
  x = rng.standard_normal((400, 12)).astype(np.float32)
  y = (x @ rng.standard_normal(12) + 0.8 * rng.standard_normal(400) > 0.3).astype(np.float32)
  ours = linear_probe.fit_logistic(x, y, strength)
  # Theirs minimises |w|^2 / 2 + C * sum(log-loss), ours mean(log-loss) + strength * |w|^2.
  theirs = linear_model.LogisticRegression(C=1 / (2 * strength * len(x)), tol=1e-10,
                                           max_iter=10_000).fit(x, y)
  np.testing.assert_allclose(ours['w'], theirs.coef_[0], rtol=2e-3, atol=2e-4)
  np.testing.assert_allclose(ours['b'], theirs.intercept_[0], rtol=2e-3, atol=2e-4)


def test_probe_accuracy_finds_a_linear_signal_and_no_more():
  rng = np.random.default_rng(1)
  x = rng.standard_normal((1000, 8)).astype(np.float32)
  y = (x[:, 0] - x[:, 3] > 0).astype(np.int32)
  accuracy, _ = linear_probe.probe_accuracy(x[:800], y[:800], x[800:], y[800:])
  assert accuracy > 0.95
  noise, _ = linear_probe.probe_accuracy(x[:800], rng.integers(0, 2, 800), x[800:], y[800:])
  assert 0.35 < noise < 0.65


def test_features_ignore_padding_and_the_batch_they_are_computed_in():
  # pylint: disable=g-import-not-at-top
  import ml_collections
  from electra_jax.common.config import default_config
  from electra_jax.finetune import init as finetune_init
  from electra_jax.finetune.glue import model as glue_model
  model = ml_collections.ConfigDict({**default_config().model.to_dict(), **TINY})
  classifier = glue_model.Classifier(model, num_outputs=1)
  params = jax.device_get(finetune_init.init_params(classifier, jax.random.PRNGKey(3), 32))
  rng = np.random.default_rng(2)
  lengths = [3, 16, 9]
  ids = np.zeros((3, 32), np.int32)
  for row, n in enumerate(lengths):
    ids[row, :n] = rng.integers(5, model.vocab_size, n)
  segments = np.zeros_like(ids)
  padded = linear_probe.encoder_features(params, model, {'input_ids': ids,
                                                          'segment_ids': segments})
  for row, n in enumerate(lengths):  # each example alone, without padding, in a batch of one
    alone = linear_probe.encoder_features(
        params, model, {'input_ids': ids[row:row + 1, :n], 'segment_ids': segments[row:row + 1, :n]},
        batch_size=1)
    for kind in linear_probe.FEATURES:
      np.testing.assert_allclose(padded[kind][row], alone[kind][0], rtol=1e-5, atol=1e-5)
  # The mean of the top layer is not its first ([CLS]) vector: the kinds differ.
  assert not np.allclose(padded['cls'], padded['mean'], atol=1e-3)
