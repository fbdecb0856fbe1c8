"""The peer: the same ELECTRA training step built from Hugging Face transformers in PyTorch.

python benchmarks/hf_peer.py --config=configs/small.py --batch_size=16 --max_seq_length=128 \
    --steps=20 --modes=eager,compile

This is the step a PyTorch user would write with transformers' ELECTRA classes (the recipe of
the best-known reproduction, richarddwang/electra_pytorch), at the sizes of an electra_jax
config:

  1. mask: the electra_jax rule (N slots per sequence, ~15% of the tokens, 85% become [MASK]);
  2. generator: `ElectraForMaskedLM` on the masked ids. It returns logits at every position;
     the selected ones are gathered afterwards. Projecting every position onto the vocabulary is
     the transformers cost, and is part of what is measured;
  3. sample replacements with Gumbel-max under no_grad;
  4. discriminator: `ElectraForPreTraining` on the ids with the samples written in;
  5. loss = MLM cross-entropy + 50 * binary cross-entropy over the non-padding tokens;
  6. backward, clip the global norm at 1, AdamW (no decay on LayerNorm and biases), schedule.

Generator and discriminator share the embedding block (the same `ElectraEmbeddings` module) and
the generator's output matrix is the shared word-embedding table, as in ELECTRA.

Each mode (eager, or the loss under `torch.compile`) prints one JSON line with the fields of
`electra_jax.benchmark.result_record`; a mode that fails prints its error instead of timings.
"""

import argparse
import itertools
import json
import os
from pathlib import Path
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F
import transformers

from electra_jax import benchmark, objective
from electra_jax.training import flops
from electra_jax.common.config import load_config_file
from electra_jax.model.networks import generator_width

REPO = Path(__file__).resolve().parents[1]
SPECIAL = objective.SpecialIds()


def electra_configs(model_config) -> tuple[transformers.ElectraConfig, transformers.ElectraConfig]:
  """transformers configs (generator, discriminator) for an electra_jax `model` config section."""
  m = model_config
  shared = dict(vocab_size=m.vocab_size, embedding_size=m.embedding_size,
                max_position_embeddings=m.max_position_embeddings,
                type_vocab_size=m.type_vocab_size, num_hidden_layers=m.num_layers,
                hidden_act='gelu', layer_norm_eps=1e-12, hidden_dropout_prob=m.dropout_rate,
                attention_probs_dropout_prob=m.attention_dropout_rate, pad_token_id=SPECIAL.pad)
  width = generator_width(m)
  generator = transformers.ElectraConfig(hidden_size=width, num_attention_heads=max(1, width // 64),
                                         intermediate_size=4 * width, **shared)
  discriminator = transformers.ElectraConfig(hidden_size=m.hidden_size,
                                             num_attention_heads=m.num_heads,
                                             intermediate_size=m.intermediate_size, **shared)
  return generator, discriminator


def build_models(config, device):
  """Generator and discriminator with one shared embedding block and a tied output matrix."""
  gen_config, disc_config = electra_configs(config.model)
  generator = transformers.ElectraForMaskedLM(gen_config)
  discriminator = transformers.ElectraForPreTraining(disc_config)
  generator.electra.embeddings = discriminator.electra.embeddings
  generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
  return generator.to(device).train(), discriminator.to(device).train()


def make_optimizer(config, generator, discriminator):
  """AdamW over the parameters of both networks, each once; the electra_jax schedule."""
  unique = {id(p): (name, p) for name, p in itertools.chain(generator.named_parameters(),
                                                             discriminator.named_parameters())}
  no_decay = lambda name: 'LayerNorm' in name or name.endswith('bias')
  groups = [
      {'params': [p for n, p in unique.values() if not no_decay(n)],
       'weight_decay': config.weight_decay},
      {'params': [p for n, p in unique.values() if no_decay(n)], 'weight_decay': 0.0},
  ]
  optimizer = torch.optim.AdamW(groups, lr=config.learning_rate,
                                betas=(config.adam_b1, config.adam_b2), eps=config.adam_eps)
  total, warmup = config.num_train_steps, config.warmup_steps
  schedule = torch.optim.lr_scheduler.LambdaLR(
      optimizer, lambda s: (1 - min(s, total) / total) * (min(1.0, s / warmup) if warmup else 1.0))
  params = [p for _, p in unique.values()]
  return optimizer, schedule, params


def mask_tokens(input_ids, mask_prob: float):
  """(masked ids, positions [B, N], weights [B, N] bool, targets [B, N]): electra_jax's rule."""
  batch, length = input_ids.shape
  slots = objective.num_slots(length, mask_prob)
  candidate = ((input_ids != SPECIAL.pad) & (input_ids != SPECIAL.cls)
               & (input_ids != SPECIAL.sep) & (input_ids != SPECIAL.mask))
  scores = torch.where(candidate, 1.0 - torch.rand(input_ids.shape, device=input_ids.device), -1.0)
  top_scores, positions = scores.topk(slots, dim=-1)
  num_tokens = (input_ids != SPECIAL.pad).sum(-1)
  to_predict = torch.clamp(torch.round(num_tokens * mask_prob), 1, slots)
  weights = (torch.arange(slots, device=input_ids.device)[None] < to_predict[:, None]) & (
      top_scores > 0)
  targets = input_ids.gather(1, positions)
  use_mask = (torch.rand(positions.shape, device=input_ids.device) < 0.85) & weights
  masked = input_ids.scatter(1, positions, torch.where(use_mask, SPECIAL.mask, targets))
  return masked, positions, weights, targets


def make_loss(config):
  """loss(generator, discriminator, input_ids, segment_ids): gen_weight * MLM + disc_weight * RTD.

  Masked means are weighted sums rather than boolean indexing, so the shapes stay static and
  torch.compile captures the whole function in one graph.
  """
  mask_prob, temperature = config.mask_prob, config.temperature
  gen_weight, disc_weight = config.gen_weight, config.disc_weight

  def loss_fn(generator, discriminator, input_ids, segment_ids):
    attention_mask = (input_ids != SPECIAL.pad).long()
    masked, positions, weights, targets = mask_tokens(input_ids, mask_prob)
    logits = generator(input_ids=masked, attention_mask=attention_mask,
                       token_type_ids=segment_ids).logits      # [B, L, V]: every position
    logits = logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1])).float()
    weights = weights.float()
    per_slot = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction='none')
    mlm_loss = (per_slot * weights.flatten()).sum() / weights.sum().clamp(min=1.0)

    with torch.no_grad():  # Gumbel-max sampling from softmax(logits / temperature)
      uniform = torch.rand_like(logits).clamp_(1e-9, 1.0)
      sampled = (logits / temperature - torch.log(-torch.log(uniform))).argmax(-1)
    written = torch.where(weights > 0, sampled, targets)
    fake_ids = input_ids.scatter(1, positions, written)
    labels = (fake_ids != input_ids).float()
    disc_logits = discriminator(input_ids=fake_ids, attention_mask=attention_mask,
                                token_type_ids=segment_ids).logits.float()
    active = attention_mask.float()
    per_token = F.binary_cross_entropy_with_logits(disc_logits, labels, reduction='none')
    disc_loss = (per_token * active).sum() / active.sum().clamp(min=1.0)
    return gen_weight * mlm_loss + disc_weight * disc_loss

  return loss_fn


def device_peak(device: torch.device, dtype: torch.dtype, matmul_size: int):
  """(peak FLOP/s, source): the data sheet for a GPU, a measured matmul on a CPU."""
  if device.type == 'cuda':
    kind = torch.cuda.get_device_name(device)
    peak = flops.table_peak_flops(kind)
    return peak, ('data sheet: dense bfloat16' if peak else f'unknown device kind {kind!r}')
  x = torch.ones(matmul_size, matmul_size, dtype=dtype)
  x @ x
  best = float('inf')
  for _ in range(5):
    start = time.perf_counter()
    x @ x
    best = min(best, time.perf_counter() - start)
  name = str(dtype).replace('torch.', '')
  return (2 * matmul_size**3 / best,
          f'measured: best {name} {matmul_size}x{matmul_size} matmul in this process')


def run_mode(mode: str, config, batches, device, args) -> dict:
  """Builds fresh models and times `args.steps` steps in `mode` ('eager' or 'compile')."""
  torch.manual_seed(config.seed)
  generator, discriminator = build_models(config, device)
  optimizer, schedule, params = make_optimizer(config, generator, discriminator)
  loss_fn = make_loss(config)
  if mode == 'compile':
    loss_fn = torch.compile(loss_fn)
  autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                            enabled=config.dtype == 'bfloat16')
  sync = torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)

  def step(index):
    input_ids, segment_ids = batches[index % len(batches)]
    with autocast:
      loss = loss_fn(generator, discriminator, input_ids, segment_ids)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    schedule.step()
    return loss

  start = time.perf_counter()
  step(0)
  sync()
  first_step_seconds = time.perf_counter() - start
  for index in range(1, 1 + args.warmup):
    step(index)
  step_seconds = []
  for index in range(1 + args.warmup, 1 + args.warmup + args.steps):
    start = time.perf_counter()
    loss = step(index)
    sync()
    step_seconds.append(time.perf_counter() - start)
  loss = float(loss.detach())
  if not np.isfinite(loss):
    raise FloatingPointError(f'the peer\'s loss is {loss}')
  peak, source = device_peak(device, torch.float32 if config.dtype == 'float32' else torch.bfloat16,
                             args.peak_matmul_size)
  return benchmark.result_record(
      framework=framework_name(mode), config=config, device_kind=device_kind(device),
      device_count=1, step_seconds=step_seconds, peak_flops=peak, peak_source=source,
      peak_memory_bytes=torch.cuda.max_memory_allocated(device) if device.type == 'cuda' else None,
      compile_s=first_step_seconds, threads=torch.get_num_threads(),
      attention=discriminator.config._attn_implementation,  # pylint: disable=protected-access
      final_loss=loss)


def framework_name(mode: str) -> str:
  return f'transformers {transformers.__version__} {mode} (torch {torch.__version__})'


def device_kind(device: torch.device) -> str:
  return torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'


def load_config(args):
  config = load_config_file(args.config)
  for name in ('batch_size', 'max_seq_length', 'dtype'):
    if getattr(args, name) is not None:
      config[name] = getattr(args, name)
  if args.attention_dropout_rate is not None:
    config.model.attention_dropout_rate = args.attention_dropout_rate
  return config


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', default=str(REPO / 'configs' / 'small.py'))
  parser.add_argument('--batch_size', type=int)
  parser.add_argument('--max_seq_length', type=int)
  parser.add_argument('--dtype', choices=('float32', 'bfloat16'),
                      help='bfloat16 runs under autocast; default: the config\'s')
  parser.add_argument('--attention_dropout_rate', type=float,
                      help='overrides the config\'s model.attention_dropout_rate')
  parser.add_argument('--steps', type=int, default=20)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--modes', default='eager,compile', help='comma-separated: eager, compile')
  parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
  parser.add_argument('--threads', type=int, default=len(os.sched_getaffinity(0)),
                      help='CPU threads (default: every core this process may use)')
  parser.add_argument('--peak_matmul_size', type=int, default=2048)
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  torch.set_num_threads(args.threads)
  config = load_config(args)
  device = torch.device(args.device)
  rng = np.random.default_rng(config.seed)
  batches = []
  for _ in range(benchmark.NUM_BATCHES):
    batch = benchmark.synthetic_batch(rng, config.batch_size, config.max_seq_length,
                                      config.model.vocab_size)
    batches.append(tuple(torch.from_numpy(batch[k]).long().to(device)
                         for k in ('input_ids', 'segment_ids')))
  for mode in args.modes.split(','):
    try:
      record = run_mode(mode, config, batches, device, args)
    except Exception as e:  # pylint: disable=broad-except  (a mode that fails is a result too)
      record = {'framework': framework_name(mode), 'device_kind': device_kind(device),
                'batch_size': config.batch_size, 'max_seq_length': config.max_seq_length,
                'error': f'{type(e).__name__}: {e}'[:2000],
                'traceback_tail': traceback.format_exc()[-1500:]}
    print(json.dumps(record), flush=True)


if __name__ == '__main__':
  main()
