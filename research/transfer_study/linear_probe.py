"""What a pretrained encoder holds before fine-tuning touches it: linear probes on frozen features.

python -m research.transfer_study.linear_probe --run=DIR [--run=DIR2 ...] --out=probe.json \
    [--task=SST-2 --data_dir=../shared/data/glue --examples=8000 --steps=all]

For every kept checkpoint of each pretraining run (or --steps), or the one encoder of a Hugging
Face ELECTRA directory (our export, or a published discriminator), and for the same network at
random initialisation, the discriminator encodes --examples training sentences of the task and
its dev set, frozen, in evaluation mode. A logistic regression on each kind of feature
([CLS] of the top layer, the mean of the top layer over the real tokens, the mean of the
embedding block's output) is fitted on the training features, its L2 strength chosen on a
fifth of them held out, and scored on dev. Fine-tuning scores mix what the encoder knows with
how easily it is moved; a probe measures the first alone, so probes across checkpoints show
whether pretraining is still adding anything a classifier can use, FLOPs for FLOPs
(electra_jax/training/flops.py counts each run's step). Prints a table and writes every score to --out.
"""

import argparse
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from electra_jax.training import checkpoint
from electra_jax.training import flops
from electra_jax.model import networks as pretrain_model
from electra_jax.finetune.glue import features, data as glue_data, tasks
from electra_jax.finetune import init
from electra_jax.finetune.glue import model as glue_model
from electra_jax.hf import exporting
from research.transfer_study import REPO

FEATURES = ('cls', 'mean', 'embeddings_mean')
STRENGTHS = (1e-4, 1e-3, 1e-2, 1e-1)  # L2 penalties tried, per feature kind
ITERATIONS = 200  # L-BFGS steps: the loss is flat to float32 long before, on these sizes
RANDOM_SEED = 0  # the random-init network: the pretraining model's initialiser from this seed


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.linear_probe',
                                   description=__doc__.split('\n\n')[0])
  parser.add_argument('--run', action='append', required=True,
                      help='a pretraining workdir or a Hugging Face ELECTRA directory (repeat '
                      'for several); all probed alike')
  parser.add_argument('--out', required=True, help='JSON file for every score')
  parser.add_argument('--task', default='SST-2', help='a single-sentence or pair GLUE task')
  parser.add_argument('--data_dir', default=os.path.join(os.path.dirname(REPO), 'shared',
                                                         'data', 'glue'))
  parser.add_argument('--examples', type=int, default=8000,
                      help='training examples the probes are fitted on (a fixed draw)')
  parser.add_argument('--max_seq_length', type=int, default=128)
  parser.add_argument('--steps', default='all',
                      help="checkpoint steps to probe, comma-separated, or 'all' kept ones")
  return parser.parse_args(argv)


def encoder_features(params, model_config, inputs, batch_size=256) -> dict[str, np.ndarray]:
  """FEATURES of every example ([N, H] or [N, E] float32) from the frozen encoder of `params`
  (a Classifier's parameters: its head is run but its output unused)."""
  classifier = glue_model.Classifier(model_config, num_outputs=1)
  wanted = ('embeddings', 'discriminator')

  @jax.jit
  def batch_features(ids, segments):
    _, state = classifier.apply({'params': params}, ids, segments, deterministic=True,
                                capture_intermediates=lambda m, _: m.name in wanted,
                                mutable=['intermediates'])
    embedded, hidden = (state['intermediates'][k]['__call__'][0] for k in wanted)
    mean = lambda x: glue_model.pool(x, ids, 'mean')
    return {'cls': hidden[:, 0], 'mean': mean(hidden), 'embeddings_mean': mean(embedded)}

  out = {k: [] for k in FEATURES}
  n = len(inputs['input_ids'])
  for start in range(0, n, batch_size):
    ids = inputs['input_ids'][start:start + batch_size]
    segments = inputs['segment_ids'][start:start + batch_size]
    pad = batch_size - len(ids)  # one compiled shape
    got = batch_features(np.pad(ids, ((0, pad), (0, 0))), np.pad(segments, ((0, pad), (0, 0))))
    for k in FEATURES:
      out[k].append(np.asarray(got[k])[:len(ids)])
  return {k: np.concatenate(v) for k, v in out.items()}


@jax.jit
def fit_logistic(x, y, strength):
  """Binary logistic regression: mean log-loss + strength * |w|^2 (bias free), by L-BFGS."""
  params = {'w': jnp.zeros(x.shape[1]), 'b': jnp.zeros(())}
  def loss(p):
    logits = x @ p['w'] + p['b']
    return optax.sigmoid_binary_cross_entropy(logits, y).mean() + strength * (p['w'] ** 2).sum()
  solver = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(loss)
  def step(carry, _):
    p, state = carry
    value, grad = value_and_grad(p, state=state)
    updates, state = solver.update(grad, state, p, value=value, grad=grad, value_fn=loss)
    return (optax.apply_updates(p, updates), state), None
  (params, _), _ = jax.lax.scan(step, (params, solver.init(params)), None, length=ITERATIONS)
  return params


def probe_accuracy(train_x, train_y, dev_x, dev_y) -> tuple[float, float]:
  """(dev accuracy, chosen strength): standardised features, strength chosen on a held-out 20%."""
  mean, std = train_x.mean(0), train_x.std(0) + 1e-6
  train_x, dev_x = (train_x - mean) / std, (dev_x - mean) / std
  train_y = np.asarray(train_y, np.float32)
  cut = len(train_x) * 4 // 5
  def accuracy(p, x, y):
    return float((((x @ p['w'] + p['b']) > 0) == (y > 0.5)).mean())
  chosen = max(STRENGTHS, key=lambda s: accuracy(
      fit_logistic(train_x[:cut], train_y[:cut], s), train_x[cut:], train_y[cut:]))
  return accuracy(fit_logistic(train_x, train_y, chosen), dev_x, dev_y), chosen


def probe(params, model_config, train_inputs, train_y, dev_inputs, dev_y) -> dict:
  train = encoder_features(params, model_config, train_inputs)
  dev = encoder_features(params, model_config, dev_inputs)
  scores = {}
  for k in FEATURES:
    accuracy, strength = probe_accuracy(train[k], train_y, dev[k], dev_y)
    scores[k] = {'accuracy': accuracy, 'l2': strength}
  return scores


def probe_points(path: str, steps: str) -> tuple[Any, Any, str, list[tuple]]:
  """(model config, vocabulary, objective, [(step, FLOPs, encoder params)]) to probe at `path`.

  A pretraining workdir gives its kept checkpoints (or `steps`, comma-separated), each with the
  FLOPs spent to reach it; a Hugging Face ELECTRA directory (an export, or a published
  discriminator) gives its one encoder as step 'hf', its FLOPs unknown. Both start with step 0,
  the same network at random initialisation (encoder params None).
  """
  if not init.is_run(path):
    start = init.from_hf(path)
    return start.model, start.vocab, 'hf', [(0, 0, None), ('hf', None, start.params)]
  config = exporting.load_run_config(path)
  manager = checkpoint.make_manager(path, config.keep_checkpoints)
  kept = sorted(manager.all_steps())
  manager.close()
  chosen = kept if steps == 'all' else [int(s) for s in steps.split(',')]
  step_flops = flops.train_step_flops(config)
  vocab = exporting.load_run(path, kept[-1]).vocab
  points = [(0, 0, None)]
  for step in chosen:
    params = pretrain_model.discriminator_view(exporting.load_run(path, step).params)
    points.append((step, step * step_flops, {k: params[k] for k in init.ENCODER}))
  return config.model, vocab, config.objective, points


def probe_examples(task_name: str, data_dir: str, examples: int):
  """(a fixed draw of `examples` training examples, the dev set) of a binary GLUE task."""
  task = tasks.get_task(task_name)
  if len(task.labels) != 2:
    raise SystemExit(f'{task_name}: the probes are binary classifiers; pick SST-2, MRPC, QQP, '
                     'QNLI or RTE')
  data = glue_data.load(task, data_dir, '', '', with_test=False)
  return features.subset(data.train, examples), next(iter(data.dev.values()))


def main(argv=None):
  args = parse_args(argv)
  train_examples, dev_examples = probe_examples(args.task, args.data_dir, args.examples)
  results = {'task': args.task, 'examples': args.examples, 'runs': {}}
  for path in args.run:
    model, vocab, objective, points = probe_points(path, args.steps)
    encode = lambda examples: features.trim_padding(
        features.encode(examples, vocab, args.max_seq_length))
    train_inputs, dev_inputs = encode(train_examples), encode(dev_examples)
    rows = {}
    for step, step_flops, encoder in points:
      # Fine-tuning's random-init start, with the pretrained encoder in place where there is one.
      start = init.Start(model, vocab, encoder, 'random initialisation')
      params = init.initial_params(glue_model.Classifier(model, num_outputs=1), start,
                                   RANDOM_SEED, args.max_seq_length)
      scores = probe(params, model, train_inputs, train_examples.labels,
                     dev_inputs, dev_examples.labels)
      rows[step] = {'flops': step_flops, **scores}
      spent = 'FLOPs unknown' if step_flops is None else f'{step_flops:.2e} FLOPs'
      print(f'{path} step {step:>6} ({spent}): ' +
            ', '.join(f'{k} {v["accuracy"]:.3f}' for k, v in scores.items()), flush=True)
    results['runs'][path] = {'objective': objective, 'steps': rows}
  with open(args.out, 'w') as f:
    json.dump(results, f, indent=1)


if __name__ == '__main__':
  main()
