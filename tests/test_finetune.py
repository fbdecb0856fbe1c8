"""GLUE fine-tuning end to end, at tiny sizes: layer-wise learning rates, starting from a
pretraining run, from a Hugging Face directory (command line) and from random init; results,
submission files, the summary command and one-line errors."""

import json
import logging
import os
import re
import subprocess
import sys

os.environ.setdefault('HF_HUB_OFFLINE', '1')

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from conftest import REPO, error_line, load_config, tree_digest
from electra_jax.training import checkpoint, report, train
from electra_jax.common import config as config_lib, run_lock
from electra_jax.training import optim as pretrain_optim
from electra_jax.common.errors import UsageError
from electra_jax.finetune import init, loop, optim, settings
from electra_jax.finetune.glue import (data as glue_data, features, model as glue_model,
                                       run as glue_run, tasks)

GLUE_CONFIG = str(REPO / 'configs' / 'finetune' / 'glue.py')
WORDS = ('the a cat dog sat ran on mat fast slow good bad film was is not very it and '
         'who what why how').split()
TINY = dict(embedding_size=16, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
            max_position_embeddings=64)


def write_vocab(path):
  pieces = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '.', '"', '?', *WORDS]
  path.write_text('\n'.join(pieces) + '\n')
  return len(pieces)


def sentences(rng, count):
  return [' '.join(rng.choice(WORDS, rng.integers(3, 12))) + '.' for _ in range(count)]


def glue_folder(root):
  """Small MRPC (BOM, quotes), SST-2 and STS-B folders in GLUE's layout."""
  rng = np.random.default_rng(0)
  mrpc = '\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
  (root / 'MRPC').mkdir(parents=True)
  for split, count in (('train', 32), ('dev', 12)):
    rows = [f'{i % 2}\t{i}\t{i + 1}\t"{a}\t{b}' for i, (a, b) in
            enumerate(zip(sentences(rng, count), sentences(rng, count)))]
    (root / 'MRPC' / f'{split}.tsv').write_text(mrpc + '\n'.join(rows) + '\n')
  (root / 'MRPC' / 'test.tsv').write_text(
      'index\t#1 ID\t#2 ID\t#1 String\t#2 String\n' + '\n'.join(
          f'{i}\t1\t2\t{a}\t{b}' for i, (a, b) in enumerate(zip(sentences(rng, 5),
                                                               sentences(rng, 5)))) + '\n')
  (root / 'SST-2').mkdir()
  for split, count in (('train', 24), ('dev', 8)):
    (root / 'SST-2' / f'{split}.tsv').write_text('sentence\tlabel\n' + '\n'.join(
        f'{s}\t{i % 2}' for i, s in enumerate(sentences(rng, count))) + '\n')
  (root / 'STS-B').mkdir()
  header = 'index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore'
  for split, count in (('train', 16), ('dev', 8)):
    rows = [f'{i}\tg\tf\t2012\t{i}\tnone\tnone\t{a}\t{b}\t{i % 6 * 0.8:.3f}' for i, (a, b) in
            enumerate(zip(sentences(rng, count), sentences(rng, count)))]
    (root / 'STS-B' / f'{split}.tsv').write_text(header + '\n' + '\n'.join(rows) + '\n')
  return root


@pytest.fixture(scope='module')
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp('finetune')
  vocab_size = write_vocab(root / 'vocab.txt')
  return root, glue_folder(root / 'glue'), vocab_size


def tiny_model(vocab_size):
  model = config_lib.default_config().model
  model.update(vocab_size=vocab_size, **TINY)
  return model


def finetune_config(**overrides):
  config = config_lib.load_config_file(GLUE_CONFIG)
  config.update(max_seq_length=32, batch_size=8, eval_batch_size=8, num_epochs=1.0, log_every=4)
  config.update(overrides)
  return config


# ---- layer-wise learning rates --------------------------------------------------------------

def test_layer_wise_learning_rates_on_the_real_parameter_tree():
  model = glue_model.Classifier(tiny_model(40), num_outputs=3)
  params = jax.device_get(jax.jit(lambda rng: init.init_params(model, rng, 16))(
      jax.random.PRNGKey(0)))
  factors = optim.layer_factors(params, num_layers=2, decay=0.8)
  flat = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(factors)}
  expect = lambda fragment: {v for k, v in flat.items() if fragment in k}
  assert expect("['classifier']") == {1.0}                       # the head: the full rate
  assert expect("['layer_1']") == {0.8}                          # top layer: decay^1
  assert expect("['layer_0']") == {0.8 ** 2}                     # each layer decay x the above
  assert expect("['embeddings']") == {0.8 ** 3}                  # the smallest
  assert expect("['embeddings_project']") == {0.8 ** 3}

  # The whole optimizer: updates with decay 0.8 are exactly the factors times those without,
  # and those follow the warmup x linear-decay schedule times Adam's direction.
  config = finetune_config(learning_rate=1e-3, warmup_proportion=0.25, weight_decay=0.0)
  grads = jax.tree.map(lambda x: np.random.default_rng(1).normal(size=x.shape).astype(np.float32),
                       params)
  total = 8
  updates = {}
  for decay in (0.8, 1.0):
    optimizer = optim.make_optimizer(_with(config, layer_decay=decay), params, 2, total)
    state, updates[decay], update = optimizer.init(params), [], jax.jit(optimizer.update)
    for _ in range(3):
      step_updates, state = update(grads, state, params)
      updates[decay].append(step_updates)
  direction = optax.chain(optax.clip_by_global_norm(1.0),
                          pretrain_optim.scale_by_adam_without_bias_correction(0.9, 0.999, 1e-6))
  direction_state, direction_update = direction.init(params), jax.jit(direction.update)
  schedule = optim.learning_rate_schedule(config, total)
  assert [float(schedule(s)) for s in range(3)] == pytest.approx([0, 1e-3 * 7 / 8 / 2, 7.5e-4])
  for step in range(3):
    adam, direction_state = direction_update(grads, direction_state, params)
    for path, factor in jax.tree_util.tree_leaves_with_path(factors):
      get = lambda tree: np.asarray(_get(tree, path))
      np.testing.assert_allclose(get(updates[1.0][step]), -float(schedule(step)) * get(adam),
                                 rtol=1e-5, atol=1e-12)
      np.testing.assert_allclose(get(updates[0.8][step]), factor * get(updates[1.0][step]),
                                 rtol=1e-6, atol=1e-12)


def _with(config, **changes):
  copy = config.copy_and_resolve_references()
  copy.update(changes)
  return copy


def _get(tree, path):
  for key in path:
    tree = tree[key.key]
  return tree


def test_initial_parameters_are_those_of_flax_init_op_by_op():
  """init_params compiles the initialisers once per model shape and length; the numbers are
  those that model.init draws op by op."""
  config = tiny_model(40)
  config.num_layers = 1  # fewer distinct operations to compile one by one
  model = glue_model.Classifier(config, num_outputs=3)
  ids = jnp.zeros((1, 8), jnp.int32)
  eager = model.init({'params': jax.random.PRNGKey(5)}, ids, ids)['params']
  compiled = init.init_params(model, jax.random.PRNGKey(5), 8)
  jax.tree.map(np.testing.assert_array_equal, compiled, eager)
  reused = init._init_program.cache_info().hits  # pylint: disable=protected-access
  init.init_params(glue_model.Classifier(config.copy_and_resolve_references(), 3),
                        jax.random.PRNGKey(1), 8)
  assert init._init_program.cache_info().hits == reused + 1  # pylint: disable=protected-access


def test_attention_choice_reaches_the_classifier():
  """config.attention picks the encoder's kernel in evaluation; the kernels agree, and an
  unknown name is refused with the choices."""
  ids = jnp.asarray(np.random.default_rng(0).integers(5, 40, (3, 16)), jnp.int32)
  ids = ids.at[0, 10:].set(0)  # padding, which every kernel must mask
  classifier = lambda attention: glue_model.Classifier(tiny_model(40), 3, attention=attention)
  params = init.init_params(classifier('einsum'), jax.random.PRNGKey(0), 16)
  logits = {name: classifier(name).apply({'params': params}, ids, jnp.zeros_like(ids))
            for name in ('einsum', 'xla', 'auto')}
  np.testing.assert_allclose(logits['xla'], logits['einsum'], atol=1e-5)
  np.testing.assert_allclose(logits['auto'], logits['einsum'], atol=1e-5)
  with pytest.raises(ValueError, match="'nope'.*'einsum'"):
    classifier('nope').apply({'params': params}, ids, jnp.zeros_like(ids))


def test_trimmed_padding_leaves_the_outputs_unchanged():
  """trim_padding drops the columns that are padding in every row (to a multiple of 8) and the
  classifier's outputs stay those of the full length."""
  ids = np.zeros((3, 32), np.int32)
  ids[0, :5], ids[1, :11], ids[2, :3] = 7, 9, 11
  segments = (ids > 0).astype(np.int32) * (np.arange(32) >= 3)
  trimmed = features.trim_padding({'input_ids': ids, 'segment_ids': segments})
  assert trimmed['input_ids'].shape == trimmed['segment_ids'].shape == (3, 16)
  np.testing.assert_array_equal(trimmed['segment_ids'], segments[:, :16])
  assert features.trim_padding({'input_ids': ids[:, :16]})['input_ids'].shape == (3, 16)
  classifier = glue_model.Classifier(tiny_model(40), 3)
  params = init.init_params(classifier, jax.random.PRNGKey(0), 32)
  outputs = lambda inputs: classifier.apply({'params': params}, inputs['input_ids'],
                                            inputs['segment_ids'])
  np.testing.assert_allclose(outputs(trimmed), outputs({'input_ids': ids, 'segment_ids': segments}),
                             rtol=1e-6, atol=1e-6)


def test_mean_pooling_reads_the_real_tokens_mean_and_the_config_reaches_it():
  """pooling='mean': the head's logits are its dense layer on the top layer's mean over the
  real tokens (float64 reference from the captured sequence output); padding, however long,
  does not move them, while 'cls' reads only position 0. The resolved config builds the
  classifier with the pooling it names, and an unknown name is one error with the choices."""
  ids = np.asarray(np.random.default_rng(1).integers(5, 40, (3, 24)), np.int32)
  ids[0, 9:], ids[1, 17:] = 0, 0
  segments = np.zeros_like(ids)
  mean_head = glue_model.Classifier(tiny_model(40), 3, pooling='mean')
  params = init.init_params(mean_head, jax.random.PRNGKey(0), 24)
  logits, state = mean_head.apply({'params': params}, ids, segments,
                                  capture_intermediates=lambda m, _: m.name == 'discriminator',
                                  mutable=['intermediates'])
  hidden = np.asarray(state['intermediates']['discriminator']['__call__'][0], np.float64)
  real = (ids != 0)[..., None]
  pooled = (hidden * real).sum(1) / real.sum(1)
  head = jax.tree.map(lambda x: np.asarray(x, np.float64), params['classifier'])
  np.testing.assert_allclose(logits, pooled @ head['kernel'] + head['bias'], rtol=1e-5, atol=1e-6)
  padded = np.pad(ids, ((0, 0), (0, 8)))
  np.testing.assert_allclose(mean_head.apply({'params': params}, padded, np.zeros_like(padded)),
                             logits, rtol=1e-5, atol=1e-6)
  cls_logits = glue_model.Classifier(tiny_model(40), 3).apply({'params': params}, ids, segments)
  np.testing.assert_allclose(cls_logits, hidden[:, 0] @ head['kernel'] + head['bias'],
                             rtol=1e-5, atol=1e-6)
  assert np.abs(cls_logits - logits).max() > 1e-3
  empty = mean_head.apply({'params': params}, np.zeros_like(ids), segments)  # a filler row
  np.testing.assert_allclose(empty, np.broadcast_to(head['bias'], empty.shape), atol=1e-6)
  with pytest.raises(ValueError, match="pooling='max'"):
    glue_model.pool(jnp.zeros((1, 4, 8)), jnp.ones((1, 4), jnp.int32), 'max')

  task = tasks.TASKS['SST-2']
  resolve = lambda **kw: glue_run.resolve(finetune_config(task='SST-2', **kw), task,
                                          tiny_model(40), 1)
  assert glue_run.classifier_of(resolve(), tiny_model(40), 2).pooling == 'cls'
  assert glue_run.classifier_of(resolve(pooling='mean'), tiny_model(40), 2).pooling == 'mean'
  with pytest.raises(UsageError, match=r"config.pooling='max': use 'cls'.*or 'mean'"):
    resolve(pooling='max')


def test_fine_tuning_numbers_outside_their_meaning_are_refused():
  """A head dropout of 1 zeroes what the classifier reads and trains to the majority class
  without an error; such values are refused. SQuAD's config has no such head; its optimizer is
  checked alike."""
  task = tasks.TASKS['SST-2']
  resolve = lambda **kw: settings.resolve(finetune_config(task='SST-2', **kw), task,
                                          tiny_model(40), 1)
  resolve(head_dropout=0.0, warmup_proportion=1.0, weight_decay=0.0)
  for field, value, interval in (('head_dropout', 1.0, r'\[0, 1\)'),
                                 ('warmup_proportion', 1.5, r'\[0, 1\]'),
                                 ('adam_b1', -0.9, r'\[0, 1\)'),
                                 ('weight_decay', -1.0, r'\[0, inf\)'),
                                 ('layer_decay', 1.5, r'\(0, 1\]')):
    with pytest.raises(UsageError, match=rf'config\.{field}={value}: use a value in {interval}'):
      resolve(**{field: value})
  squad = config_lib.load_config_file(str(REPO / 'configs' / 'finetune' / 'squad.py'))
  assert 'head_dropout' not in squad
  squad.max_seq_length = 32
  settings.resolve(squad, task, tiny_model(40), 1)
  squad.adam_b2 = 1.0
  with pytest.raises(UsageError, match=r'config\.adam_b2=1\.0: use a value in \[0, 1\)'):
    settings.resolve(squad, task, tiny_model(40), 1)


# ---- the training loop ----------------------------------------------------------------------

def test_a_score_at_or_below_the_majority_class_is_warned_of():
  """MRPC 59.1 against the 68.4 of labelling every dev pair 'equivalent' said nothing; now the
  majority class is scored on the dev labels and a median that does not beat it is warned of."""
  task = tasks.get_task('MRPC')
  labels = {'MRPC': np.array([1] * 279 + [0] * 129)}  # MRPC dev's counts
  majority = glue_run.majority_class(task, labels)
  assert majority == {'MRPC': {'accuracy': pytest.approx(0.6838, abs=1e-4),
                               'f1': pytest.approx(0.8122, abs=1e-4)}}
  below = {'MRPC': {'accuracy': 0.591, 'f1': 0.70}}
  assert glue_run.at_or_below_majority(task, below, majority, labels) == [
      "MRPC accuracy 0.5910 is at or below the majority class's 0.6838 (every example "
      "labelled '1'): the model learned nothing beyond the label counts; pretrain longer, or "
      'try another learning rate or more epochs']
  above = {'MRPC': {'accuracy': 0.72, 'f1': 0.80}}
  assert glue_run.at_or_below_majority(task, above, majority, labels) == []
  assert glue_run.majority_class(tasks.get_task('STS-B'), {'STS-B': np.ones(3)}) is None
  assert tasks.majority_label([1, 0, 0, 1]) == 0  # a tie: the lowest class
  # Predictions in the loop log how far they are, with an ETA.
  assert loop.progress('dev windows', 1280, 10833, 60.0) == \
      '1,280/10,833 dev windows (12%), eta 7m27s'


def test_batches_gathered_on_the_devices_are_those_of_batch_order():
  """Each step's rows, sliced from the order sharded over 4 devices, are order[step] exactly;
  the order is a fresh permutation of the examples every epoch."""
  rng = np.random.default_rng(0)
  inputs = {'input_ids': rng.integers(0, 1000, (10, 6)).astype(np.int32),
            'labels': rng.normal(size=10).astype(np.float32)}
  order = loop.batch_order(10, 4, 7, seed=5)
  assert order.shape == (7, 4)
  for epoch in range(2):
    assert sorted(order.ravel()[10 * epoch:10 * (epoch + 1)]) == list(range(10))
  assert not np.array_equal(order, loop.batch_order(10, 4, 7, seed=6))
  mesh = train.make_mesh()
  replicated, columns = NamedSharding(mesh, P()), NamedSharding(mesh, P(None, 'data'))
  gather = jax.jit(loop.gather_batch, in_shardings=(replicated, columns, replicated))
  on_device = jax.device_put(inputs, replicated), jax.device_put(order, columns)
  for step in range(7):
    batch = jax.device_get(gather(*on_device, np.int32(step)))
    for name, values in inputs.items():
      np.testing.assert_array_equal(batch[name], values[order[step]])


def test_each_batch_is_cut_to_its_longest_example():
  """step_lengths: the longest example of each step's batch, rounded up to the multiple and at
  most the set's width; gather_batch cuts the [N, L] arrays there and leaves the labels."""
  ids = np.zeros((4, 32), np.int32)
  ids[0, :5], ids[1, :17], ids[2, :3], ids[3, :30] = 7, 9, 11, 13
  ids[0, 2] = 0  # a padding id inside a row does not end it
  counts = features.token_counts(ids)
  np.testing.assert_array_equal(counts, [5, 17, 3, 30])
  order = np.array([[0, 2], [1, 0], [3, 2]])
  np.testing.assert_array_equal(loop.step_lengths(counts, order, 8, 32), [8, 24, 32])
  np.testing.assert_array_equal(loop.step_lengths(counts, order, 16, 24), [16, 24, 24])
  inputs = {'input_ids': ids, 'segment_ids': ids * 0 + 1, 'labels': np.arange(4)}
  batch = jax.device_get(loop.gather_batch(inputs, order, 1, 24))
  np.testing.assert_array_equal(batch['input_ids'], ids[[1, 0], :24])
  assert batch['segment_ids'].shape == (2, 24)
  np.testing.assert_array_equal(batch['labels'], [1, 0])


@pytest.mark.parametrize('multiple', [0, 2])
def test_the_loop_equals_a_host_loop_over_batch_order(files, tmp_path, multiple):
  """Training a seed (batches gathered on the devices, dropout keys folded in the step) gives
  the parameters and losses of a plain loop: host-indexed batches of batch_order, each cut to
  its step_lengths length when length_multiple is set, dropout key fold_in(rng, step), gradient
  and optimizer update, one step at a time on one device."""
  root, glue, vocab_size = files
  batch_size = 4 if multiple else 8  # small batches (4 devices), so their longest ones differ
  config = finetune_config(task='SST-2', data_dir=str(glue), vocab=str(root / 'vocab.txt'),
                           num_epochs=2.0, log_every=1, learning_rate=1e-3, layer_decay=0.8,
                           length_multiple=multiple, batch_size=batch_size)
  config.model.update(vocab_size=vocab_size, **TINY)
  start = init.load_start(config)
  train_set = glue_data.load(tasks.get_task('SST-2'), str(glue), '', '').train
  inputs = {**features.encode(train_set, start.vocab, 32), 'labels': train_set.labels}
  steps, seed = 2 * 24 // batch_size, 3  # 24 examples, 2 epochs
  lengths = [32] * steps
  if multiple:
    lengths = loop.step_lengths(features.token_counts(inputs['input_ids']),
                                    loop.batch_order(len(train_set), batch_size, steps, seed),
                                    multiple, 32)
    assert len(set(lengths)) > 1 and min(lengths) < 32  # the cut is exercised
  model = glue_model.Classifier(start.model, 2)
  optimizer = optim.make_optimizer(config, init.param_shapes(model, 32), 2, steps)
  compiled = glue_run.compile_steps(model, optimizer, False, train.make_mesh())
  logged = []
  params = loop.train_seed(config, seed, start, model, compiled,
                               jax.device_put(inputs, compiled.replicated), steps,
                               optim.learning_rate_schedule(config, steps), logged.append,
                               str(tmp_path), features.token_counts(inputs['input_ids']))
  train.check_compiled_once(compiled.step, len(set(lengths)))
  if multiple:
    with pytest.raises(RuntimeError, match=f'compiled {len(set(lengths))} times; it must '
                       'compile once'):
      train.check_compiled_once(compiled.step)

  @jax.jit
  def update(params, opt_state, batch, rng):
    loss, grads = jax.value_and_grad(glue_run.loss_fn)(params, batch, rng, model=model,
                                                       regression=False)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  expected = init.initial_params(model, start, seed, 32)
  opt_state, rng, losses = optimizer.init(expected), jax.random.fold_in(
      jax.random.PRNGKey(seed), 1), []
  for step, rows in enumerate(loop.batch_order(len(train_set), batch_size, steps, seed)):
    batch = {name: values[rows] if values.ndim == 1 else values[rows, :lengths[step]]
             for name, values in inputs.items()}
    expected, opt_state, loss = update(expected, opt_state, batch, jax.random.fold_in(rng, step))
    losses.append(float(loss))
  # Four devices sum the batch in another order than one: equal to float32 rounding (6e-8
  # measured), while two rows swapped between batches move a parameter by 1e-3 and a loss by
  # 7e-4 (relative), and a dropout key off by one step by 2e-2 and 0.5.
  assert [r['loss'] for r in logged] == pytest.approx(losses, rel=1e-5)
  for ours, theirs in zip(jax.tree.leaves(jax.device_get(params)), jax.tree.leaves(expected)):
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


# ---- from a pretraining run -----------------------------------------------------------------

@pytest.fixture(scope='module')
def pretraining_run(files):
  """A run workdir as electra_jax.main leaves it: config.json, vocab, an Orbax checkpoint."""
  root, _, vocab_size = files
  workdir = root / 'run'
  config = load_config('tiny')
  config.model.update(vocab_size=vocab_size, generator_hidden_size=16, **TINY)
  config.max_seq_length = 32
  model, optimizer = train.make_model(config), pretrain_optim.make_optimizer(config)
  state = train.create_train_state(config, model, optimizer,
                                   NamedSharding(train.make_mesh(), P()))
  manager = checkpoint.make_manager(str(workdir), 1)
  checkpoint.save(manager, 7, state)
  manager.wait_until_finished()
  manager.close()
  config_lib.save_config(config, str(workdir))
  (workdir / 'vocab.txt').write_text((root / 'vocab.txt').read_text())
  return workdir, jax.device_get(state.params)


def test_fine_tune_from_a_pretraining_run(files, pretraining_run, tmp_path, caplog):
  _, glue, _ = files
  workdir, pretrained = pretraining_run
  config = finetune_config(task='mrpc', init_from=str(workdir), data_dir=str(glue), seeds='3,1')
  start = init.load_start(config)
  assert start.description.endswith('(step 7)') and start.model.hidden_size == 32
  model = glue_model.Classifier(start.model, 2)
  params = init.initial_params(model, start, 0, 32)
  assert set(params) == {'embeddings', 'discriminator', 'classifier'}  # no generator
  for name in init.ENCODER:
    for ours, theirs in zip(jax.tree.leaves(params[name]), jax.tree.leaves(pretrained[name])):
      np.testing.assert_array_equal(ours, theirs)

  out = tmp_path / 'mrpc'
  with caplog.at_level(logging.INFO, logger='absl'):
    summary = glue_run.fine_tune(config, str(out))
  assert '32 training examples (32 used, 64 rows with the (B, A) swaps)' in caplog.text
  saved = json.loads((out / 'results.json').read_text())
  assert saved == json.loads(json.dumps(summary))
  assert saved['task'] == 'MRPC' and set(saved['seeds']) == {'3', '1'}
  assert set(saved['median']['MRPC']) == {'accuracy', 'f1'}
  # 32 pairs and their 32 swaps, one epoch of batches of 8.
  assert saved['budget']['steps'] == 8 and saved['budget']['train_pairs_with_swaps'] == 64
  resolved = json.loads((out / 'config.json').read_text())
  assert resolved['size'] == 'small' and resolved['learning_rate'] == 3e-4
  assert resolved['layer_decay'] == 0.8 and resolved['num_epochs'] == 1.0
  lines = (out / 'MRPC.tsv').read_text().splitlines()
  assert lines[0] == 'index\tprediction' and len(lines) == 6
  assert {line.split('\t')[1] for line in lines[1:]} <= {'0', '1'}
  assert (out / 'seed_1' / 'MRPC.tsv').exists() and (out / 'seed_3' / 'MRPC.tsv').exists()
  assert saved['submission_seed'] in (1, 3)
  records = [json.loads(line) for line in (out / 'metrics.jsonl').read_text().splitlines()]
  assert [r['step'] for r in records if r['seed'] == 3] == [4, 8]
  # Each step line has its progress and an ETA: seed 3's steps left and all of seed 1's.
  steps = [r.getMessage() for r in caplog.records if ' steps/s | eta ' in r.getMessage()]
  assert [line.split(' |')[0] for line in steps] == [
      'seed 3 step 4/8', 'seed 3 step 8/8', 'seed 1 step 4/8', 'seed 1 step 8/8']
  record = records[0]
  assert steps[0].endswith(f" | eta {report.format_duration(12 / record['steps_per_s'])}")
  assert steps[-1].endswith(' | eta 0m00s')
  # The majority class's scores beside the median (12 dev pairs, half of them labelled '1').
  assert saved['majority_class'] == {'MRPC': {'accuracy': 0.5, 'f1': 0.0}}
  assert (f"MRPC: median {loop.format_scores(saved['median'])}; majority class MRPC accuracy "
          '0.5000, f1 0.0000') in caplog.text

  # init_step 0 (the run's latest) is recorded as the step it was: once the run has saved a later
  # checkpoint, the same command must not resume these seeds as if they had begun from that one.
  assert config.init_step == 0 and resolved['init_step'] == 7
  later = ml_collections.ConfigDict({**resolved, 'init_step': 9})
  with pytest.raises(UsageError, match=re.escape(
      f'holds seed checkpoints fine-tuned from step 7 of {workdir}, not from step 9 (init_step 0 '
      "is the run's latest); pass --config.init_step=7 to continue that run")):
    loop.prepare_workdir(later, str(out))
  loop.prepare_workdir(ml_collections.ConfigDict({**resolved, 'seeds': '3'}), str(out))
  # A workdir from before steps were resolved recorded 0: it continues, as it did then.
  (out / 'config.json').write_text(json.dumps({**resolved, 'init_step': 0}))
  loop.prepare_workdir(later, str(out))


def test_a_checkpoint_that_does_not_fit_is_refused(files, pretraining_run):
  workdir, pretrained = pretraining_run
  start = init.Start(tiny_model(files[2]), None, {k: pretrained[k] for k in init.ENCODER}, 'X')
  wider = tiny_model(files[2])
  wider.intermediate_size = 128
  with pytest.raises(UsageError, match=r'parameters of X do not fit.*intermediate/kernel: '
                                       r'pretrained parameters \(32, 64\), '
                                       r'fine-tuning model \(32, 128\)'):
    init.initial_params(glue_model.Classifier(wider, 2), start, 0, 32)


def test_reinit_draws_the_named_parts_as_random_init_does_and_keeps_the_rest(files,
                                                                            pretraining_run):
  workdir, pretrained = pretraining_run
  config = finetune_config(task='mrpc', init_from=str(workdir), data_dir=str(files[1]))
  start = init.load_start(config)
  model = glue_model.Classifier(start.model, 2)
  random_start = init.Start(start.model, start.vocab, None, 'random')
  fresh = init.initial_params(model, random_start, 5, 32)  # random init's draw for seed 5
  mixed = init.initial_params(model, init.with_reinit(start, 'embeddings, layer_1'), 5, 32)
  drawn = {('embeddings',), ('discriminator', 'embeddings_project'),
           ('discriminator', 'layer_1'), ('classifier',)}
  for path, leaf in jax.tree_util.tree_flatten_with_path(mixed)[0]:
    keys = tuple(k.key for k in path)
    source = fresh if any(keys[:len(d)] == d for d in drawn) else pretrained
    np.testing.assert_array_equal(leaf, _get(source, path), err_msg=str(keys))
  assert start.model.embedding_size != start.model.hidden_size  # so embeddings_project exists
  assert init.with_reinit(start, 'layer_0').description.endswith('(step 7), layer_0 drawn afresh')
  assert init.with_reinit(start, '') is start
  # Every family's start (GLUE's, SQuAD's, chunking's) is load_start's, config.reinit applied.
  config.reinit = 'layer_0'
  assert init.load_start(config).reinit == ('layer_0',)
  with pytest.raises(UsageError, match=r"reinit='layer_2'.*layer_2 is not a part of this "
                                       r'2-layer encoder; use .* embeddings, layer_0, layer_1'):
    init.with_reinit(start, 'layer_2')
  with pytest.raises(UsageError, match=r"init_from is ''"):
    init.with_reinit(random_start, 'embeddings')


def test_dropout_replaces_the_starts_rates_and_reaches_the_encoder(files, pretraining_run):
  """config.dropout sets the encoder's hidden and attention dropout whatever the start ran with
  (-1 keeps them): with every rate at 0, training mode no longer depends on its dropout key."""
  workdir, pretrained = pretraining_run
  base = dict(task='mrpc', init_from=str(workdir), data_dir=str(files[1]))
  kept = init.load_start(finetune_config(**base))
  assert kept.model.dropout_rate == kept.model.attention_dropout_rate == 0.1  # pretraining's
  off = init.load_start(finetune_config(**base, dropout=0.0))
  assert off.model.dropout_rate == off.model.attention_dropout_rate == 0.0
  assert off.model.hidden_size == kept.model.hidden_size and kept.model.dropout_rate == 0.1
  ids = jnp.asarray(np.arange(2 * 16).reshape(2, 16) % files[2])
  segments = jnp.zeros_like(ids)

  def logits(start, key):
    model = glue_model.Classifier(start.model, 2, head_dropout_rate=0.0)
    params = init.initial_params(model, start, 0, 16)
    return model.apply({'params': params}, ids, segments, deterministic=False,
                       rngs={'dropout': jax.random.PRNGKey(key)})

  np.testing.assert_array_equal(logits(off, 1), logits(off, 2))
  assert np.abs(logits(kept, 1) - logits(kept, 2)).max() > 1e-4
  for bad in (1.0, -0.5, float('nan')):
    with pytest.raises(UsageError, match=rf'config.dropout={bad}: use a rate in \[0, 1\), or -1'):
      init.load_start(finetune_config(**base, dropout=bad))


def test_random_init_regression(files, tmp_path):
  root, glue, vocab_size = files
  config = finetune_config(task='STS-B', data_dir=str(glue), vocab=str(root / 'vocab.txt'),
                           num_epochs=2.0)
  with pytest.raises(UsageError, match=f'has {vocab_size} pieces but config.model.vocab_size'):
    glue_run.fine_tune(config, str(tmp_path / 'wrong'))
  assert not (tmp_path / 'wrong').exists()  # refused before it wrote, it leaves no folder
  config.model.update(vocab_size=vocab_size, **TINY)
  summary = glue_run.fine_tune(config, str(tmp_path / 'stsb'))
  assert summary['init'] == 'random initialisation' and summary['budget']['steps'] == 8
  assert set(summary['median']['STS-B']) == {'spearman', 'pearson'}
  assert summary['score_metric'] == 'STS-B spearman'
  assert summary['majority_class'] is None  # a regression has no majority class
  assert not (tmp_path / 'stsb' / 'STS-B.tsv').exists()  # this folder has no test split
  # Run again on the finished workdir: each seed resumes at its last step, trains no step, and
  # reports the same scores (it used to stop on the compiled-once guard: 0 programs). Its
  # config.json as saved before compilation_cache_dir existed: where programs are cached is no
  # change of recipe.
  saved = json.loads((tmp_path / 'stsb' / 'config.json').read_text())
  del saved['compilation_cache_dir']
  (tmp_path / 'stsb' / 'config.json').write_text(json.dumps(saved))
  again = glue_run.fine_tune(config, str(tmp_path / 'stsb'))
  assert again['seeds'] == summary['seeds'] and again['score'] == summary['score']
  # While another process fine-tunes there, a second run is refused before it writes anything.
  before = tree_digest(tmp_path / 'stsb')
  with run_lock.only_run_in(str(tmp_path / 'stsb'), 'fine-tuning run'):
    with pytest.raises(UsageError, match='stsb is in use by another fine-tuning run'):
      glue_run.fine_tune(config, str(tmp_path / 'stsb'))
  assert tree_digest(tmp_path / 'stsb') == before


def test_the_transformers_head_exports_as_electra_for_sequence_classification(files, tmp_path):
  """head='transformers' trains transformers' classification head (dense, GELU, dense on [CLS]);
  the seed exports as ElectraForSequenceClassification, which gives our logits on text pairs.
  The recipe's own head is refused by export, naming the setting that exports."""
  transformers = pytest.importorskip('transformers')
  torch = pytest.importorskip('torch')
  # pylint: disable-next=g-import-not-at-top
  from electra_jax.hf import files as files_lib, params as params_lib
  from electra_jax.finetune import export as finetuned
  root, glue, vocab_size = files
  config = finetune_config(task='MRPC', data_dir=str(glue), vocab=str(root / 'vocab.txt'),
                           head='transformers', predict_test=False)
  config.model.update(vocab_size=vocab_size, **TINY)
  out = tmp_path / 'mrpc'
  summary = glue_run.fine_tune(config, str(out))
  params, step = finetuned.seed_params(str(out), 0)
  assert step == summary['budget']['steps']
  assert params['classifier_dense']['kernel'].shape == (32, 32)
  exported = tmp_path / 'hf'
  with pytest.raises(UsageError, match="--license='MIT License': give the Hugging Face Hub's"):
    finetuned.export_seed(str(out), str(exported), seed=0, license_id='MIT License')
  assert not exported.exists()  # refused before anything was written
  assert finetuned.export_seed(str(out), str(exported), seed=0, license_id='mit') == step
  hf = transformers.ElectraForSequenceClassification.from_pretrained(str(exported)).eval()
  assert hf.config.id2label == {0: '0', 1: '1'}
  assert hf.config.problem_type == 'single_label_classification'

  ids = np.random.default_rng(0).integers(5, vocab_size, (3, 20)).astype(np.int32)
  ids[:, 0], ids[:, 9], ids[:, 19] = 2, 3, 3  # [CLS] A [SEP] B [SEP]
  ids[1, 14:], ids[1, 13] = 0, 3  # a shorter pair, padded
  segments = np.where(np.arange(20) > 9, 1, 0)[None].repeat(3, 0) * (ids != 0)
  saved = json.loads((out / 'config.json').read_text())
  resolved = ml_collections.ConfigDict(saved)
  classifier = glue_run.classifier_of(resolved, ml_collections.ConfigDict(saved['model']), 2)

  def assert_same_logits(hf, params):
    ours = classifier.apply({'params': params}, ids, segments)
    with torch.no_grad():
      theirs = hf(input_ids=torch.tensor(ids, dtype=torch.long),
                  attention_mask=torch.tensor(ids != 0, dtype=torch.long),
                  token_type_ids=torch.tensor(segments, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(theirs, np.asarray(ours), rtol=1e-5, atol=1e-5)

  assert_same_logits(hf, params)
  card = (exported / 'README.md').read_text()
  assert card.startswith('---\nlibrary_name: transformers\nlicense: mit\ntags:\n- electra\n'
                         '- electra_jax\n- mrpc\npipeline_tag: text-classification\n---\n')
  assert card.endswith("\nThe training text's language is not recorded by electra_jax: add "
                       '`language:` to the block at the top before publishing, or export with '
                       '--language.\n')
  assert '| started from | random initialisation (no pretraining) |' in card
  assert f"| dev, this seed (0) | MRPC accuracy {summary['seeds']['0']['MRPC']['accuracy']:.4f}, " \
      in card
  assert '| labels | `0`, `1` |' in card and str(tmp_path) not in card
  classify = transformers.pipeline('text-classification', model=str(exported), device='cpu')
  assert classify({'text': 'the cat sat.', 'text_pair': 'a dog ran.'})['label'] in ('0', '1')
  # Four steps leave the head's inputs near 0, where every GELU agrees: scaled up, they reach
  # its bend, where tanh's approximation moves these logits by 2.5e-4.
  scaled = {**params, 'classifier_dense': {'kernel': params['classifier_dense']['kernel'] * 10,
                                           'bias': params['classifier_dense']['bias'] + 1.0}}
  labels = finetuned.labels_of(str(out), 'sequence', resolved)
  files_lib.write_model_dir(str(tmp_path / 'scaled'),
                            finetuned.model_config_json(resolved, 'sequence', labels),
                            params_lib.to_hf(scaled, 'sequence'))
  scaled_hf = transformers.ElectraForSequenceClassification.from_pretrained(
      str(tmp_path / 'scaled')).eval()
  assert_same_logits(scaled_hf, scaled)

  config.update(head='electra', num_epochs=0.5)
  glue_run.fine_tune(config, str(tmp_path / 'recipe'))
  with pytest.raises(UsageError, match='fine-tune with --config.head=transformers to export one'):
    finetuned.export_seed(str(tmp_path / 'recipe'), str(tmp_path / 'refused'), seed=0)
  assert not (tmp_path / 'refused').exists()
  config.head = 'dense'
  with pytest.raises(UsageError, match=r"config.head='dense': use 'electra' .* or 'transformers'"):
    glue_run.fine_tune(config, str(tmp_path / 'unknown'))


# ---- command lines --------------------------------------------------------------------------

def cli(module, *args, env=None):
  env = {**(os.environ if env is None else env), 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '1'}
  return subprocess.run([sys.executable, '-m', module, *map(str, args)], env=env, cwd=REPO,
                        capture_output=True, text=True, timeout=300)


def test_hugging_face_directory_fine_tunes_from_the_command_line(files, tmp_path):
  transformers = pytest.importorskip('transformers')
  import torch  # pylint: disable=g-import-not-at-top
  root, glue, vocab_size = files
  torch.manual_seed(0)
  hf_dir = tmp_path / 'electra-discriminator'
  transformers.ElectraForPreTraining(transformers.ElectraConfig(
      vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)).save_pretrained(
          hf_dir)
  (hf_dir / 'vocab.txt').write_text((root / 'vocab.txt').read_text())
  out = tmp_path / 'sst2'
  # Without the suite's cache, and every program kept however fast it compiled: by default the
  # compiled programs go to DIR/compilation_cache, and a run elsewhere pointed there reads them.
  own_cache = {**{k: v for k, v in os.environ.items() if k != 'JAX_COMPILATION_CACHE_DIR'},
               'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0'}
  sst2 = lambda workdir, *more: cli(
      'electra_jax.finetune', f'--config={GLUE_CONFIG}', '--config.task=SST-2',
      f'--config.init_from={hf_dir}', f'--config.data_dir={glue}', f'--workdir={workdir}',
      '--config.max_seq_length=32', '--config.batch_size=8', '--config.eval_batch_size=8', *more,
      env=own_cache)
  result = sst2(out, '--config.seeds=0,1')
  assert result.returncode == 0, result.stderr[-3000:]
  cache = out / 'compilation_cache'
  assert f'0 compiled programs read from the compilation cache at {cache}' in result.stderr
  written = sorted(p.name for p in cache.iterdir())
  assert any(name.startswith('jit_train_step-') for name in written)
  again = sst2(tmp_path / 'elsewhere', '--config.seeds=0', f'--config.compilation_cache_dir={cache}')
  assert again.returncode == 0, again.stderr[-3000:]
  read = re.search(r'(\d+) compiled programs read from the compilation cache at (\S+)',
                   again.stderr)
  assert read and int(read[1]) >= 2 and read[2] == str(cache), again.stderr[-2000:]
  assert sorted(p.name for p in cache.iterdir()) == written  # read, not compiled again
  assert not (tmp_path / 'elsewhere' / 'compilation_cache').exists()
  assert (json.loads((tmp_path / 'elsewhere' / 'results.json').read_text())['seeds']['0'] ==
          json.loads((out / 'results.json').read_text())['seeds']['0'])
  # A single-sentence task has no pairs to swap, and its log says nothing of swaps.
  assert re.search(r'(\d+) training examples \(\1 used\), 9 steps', result.stderr)
  assert 'SST-2: SST-2 accuracy' in result.stdout and '(median of 2 seed(s))' in result.stdout
  summary = json.loads((out / 'results.json').read_text())
  assert summary['init'].startswith('Hugging Face') and summary['budget']['steps'] == 9
  config = finetune_config(task='SST-2', init_from=str(hf_dir), init_step=5)
  with pytest.raises(UsageError, match='init_step=5 picks a checkpoint of a pretraining run'):
    init.load_start(config)

  table = cli('electra_jax.finetune_summary', out, tmp_path / 'missing')
  assert table.returncode != 0 and 'holds no results.json' in table.stderr
  table = cli('electra_jax.finetune_summary', out)
  assert table.returncode == 0, table.stderr
  header, _, row = table.stdout.splitlines()[:3]
  assert header.split(' | ')[1:3] == ['CoLA', 'SST-2']
  assert row.startswith(f'| {hf_dir} |') and f'{100 * summary["score"]:.1f}' in row


@pytest.mark.parametrize('args, message', [
    (['--config.task=SST3'], "unknown GLUE task 'SST3'"),
    (['--config.task=MRPC', '--config.data_dir=DIR', '--config.vocab=VOCAB'],
     "has no column '#1 String'"),
    (['--config.taks=MRPC'], "unknown config field 'config.taks'"),
    (['--config.word_table=t.npy'], 'it moved to the transfer study\'s command python -m '
     'research.transfer_study.word_table --table=PATH'),
])
def test_command_line_errors_are_one_line(files, tmp_path, args, message):
  root, _, vocab_size = files
  broken = tmp_path / 'glue' / 'MRPC'
  broken.mkdir(parents=True)
  (broken / 'train.tsv').write_text('Quality\t#1 ID\t#2 ID\t#1 Text\t#2 String\n1\t1\t2\ta\tb\n')
  args = [a.replace('DIR', str(tmp_path / 'glue')).replace('VOCAB', str(root / 'vocab.txt'))
          for a in args]
  result = cli('electra_jax.finetune', f'--config={GLUE_CONFIG}', f'--workdir={tmp_path}/out',
               f'--config.model.vocab_size={vocab_size}', *args)
  assert message in error_line(result)
