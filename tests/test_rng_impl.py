"""config.rng_impl: threefry (the default) unchanged bit for bit; rbg trains, on any device count."""

import json

import jax
import numpy as np
import pytest

from conftest import load_config
from electra_jax.common import config as config_lib
from electra_jax.training import train
from electra_jax.common.errors import UsageError
from test_objective import packed_like_sequences
from test_train import run_steps


def hand_sized(rng_impl=None):
  config = load_config('tiny')
  config.model.vocab_size, config.max_seq_length, config.batch_size = 300, 32, 8
  config.model.num_layers = 1
  config.warmup_steps = 0
  if rng_impl:
    config.rng_impl = rng_impl
  return config


def batches(count=2):
  rng = np.random.default_rng(0)
  return [{'input_ids': ids, 'segment_ids': np.zeros_like(ids)}
          for ids in (packed_like_sequences(rng, 8, 32, vocab=300).astype(np.int32)
                      for _ in range(count))]


def test_default_keys_are_the_old_raw_keys_bit_for_bit():
  """threefry: the state's key and every step's key are what PRNGKey and fold_in made before
  the field existed, so default runs (and their checkpoints) are unchanged."""
  config = hand_sized()
  assert config.rng_impl == 'threefry2x32'
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  expected = jax.random.split(jax.random.PRNGKey(config.seed))
  assert np.array_equal(jax.random.key_data(jax.random.split(train.base_key(config))), expected)
  for step in (0, 7, 1 << 30):
    assert np.array_equal(train.step_key(config, train_rng, step),
                          jax.random.fold_in(train_rng, step))
  del init_rng
  # A config saved before the field existed means threefry.
  saved = config.to_dict()
  del saved['rng_impl']
  assert config_lib.upgrade(saved).rng_impl == 'threefry2x32'


@pytest.mark.slow  # three compiled steps: ~1 min of CPU each way
@pytest.mark.parametrize('rng_impl', ['rbg', 'unsafe_rbg'])
def test_rbg_trains_and_does_not_depend_on_the_device_count_on_cpu(rng_impl):
  """rbg runs the whole step on CPU, draws another stream than threefry, and, as jax.random
  documents for rbg without --xla_tpu_spmd_rng_bit_generator_unsafe, each device generates the
  whole array and keeps its part: 4 devices reproduce 1 (to float rounding, as threefry does)."""
  config = hand_sized(rng_impl)
  data = batches()
  losses_1, params_1 = run_steps(jax.devices()[:1], config, data)
  losses_4, params_4 = run_steps(jax.devices()[:4], config, data)
  assert np.all(np.isfinite(losses_1))
  np.testing.assert_allclose(losses_4, losses_1, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(params_4), jax.tree.leaves(params_1)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  state_key_words = 4  # rbg keys are 4 uint32 words (threefry's 2)
  assert train.base_key(config).shape == () and jax.random.key_data(
      train.base_key(config)).shape == (state_key_words,)
  threefry_losses, _ = run_steps(jax.devices()[:1], hand_sized(), data)
  assert not np.allclose(threefry_losses, losses_1)  # another stream of masks and samples


def test_unknown_rng_impl_and_a_switch_on_resume_are_refused(tmp_path):
  config = hand_sized('philox')
  config.data.train_files = 'x.txt'
  with pytest.raises(UsageError, match='rng_impl'):
    config_lib.validate(config, 1)
  saved = hand_sized()
  (tmp_path / 'config.json').write_text(json.dumps(saved.to_dict()))
  with pytest.raises(UsageError, match="rng_impl 'threefry2x32', not 'rbg'"):
    config_lib.check_workdir_config(hand_sized('rbg'), str(tmp_path))
  config_lib.check_workdir_config(hand_sized(), str(tmp_path))  # the same impl resumes


def test_rbg_on_several_tpu_chips_is_told_how_to_draw_only_each_chips_share():
  warn = lambda config, platform='tpu', chips=4, args='': train.rbg_sharding_warning(
      config, platform, chips, args)
  threefry, rbg, unsafe = hand_sized(), hand_sized('rbg'), hand_sized('unsafe_rbg')
  assert warn(threefry) is None
  assert warn(rbg, platform='cpu') is None and warn(rbg, platform='gpu') is None
  assert warn(rbg, chips=1) is None
  told = warn(rbg, chips=16)
  assert told.startswith('rng_impl=rbg on 16 TPU chips') and '16 times the bits it uses' in told
  assert f"LIBTPU_INIT_ARGS='{train.RBG_PARTITION_FLAG}'" in told
  assert 'rng_impl=unsafe_rbg on 4 TPU chips' in warn(unsafe)
  for partitioned in (train.RBG_PARTITION_FLAG, '--xla_tpu_spmd_rng_bit_generator_unsafe=1',
                      '--foo=1 --xla_tpu_spmd_rng_bit_generator_unsafe',
                      '--xla_tpu_spmd_rng_bit_generator_unsafe=false '
                      '--xla_tpu_spmd_rng_bit_generator_unsafe=true'):
    assert warn(rbg, args=partitioned) is None, partitioned
  for not_partitioned in ('--xla_tpu_spmd_rng_bit_generator_unsafe=false',
                          '--xla_tpu_spmd_rng_bit_generator_unsafe=true '
                          '--xla_tpu_spmd_rng_bit_generator_unsafe=0'):
    assert 'times the bits it uses' in warn(rbg, args=not_partitioned), not_partitioned
  rbg.remat = True
  remat = warn(rbg, args=train.RBG_PARTITION_FLAG)
  assert remat.startswith(f'rng_impl=rbg with {train.RBG_PARTITION_FLAG} and remat')
  assert 'times the bits' in warn(rbg)  # without the flag, the first thing to tell
