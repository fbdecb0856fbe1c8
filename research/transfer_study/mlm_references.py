"""Two references for a masked LM trained on a prepared corpus: a count model and transformers.

python -m research.transfer_study.mlm_references counts --data=DIR [--train_batches=3000]
python -m research.transfer_study.mlm_references torch --data=DIR [--steps=2000 --total_steps=6365]

DIR is a prepared corpus (`python -m electra_jax.prepare`, or a transfer study's DIR/data) with
train/, eval/ and vocab.model, at length 128 and batch 32 as configs/mini.py reads it.

counts: how much of each token its two neighbours give away. From the training batches it
  counts every (previous, token, next) triple; on the held-out batches it predicts a token as
  the most frequent middle of its (previous, next) pair, else of its previous token, and prints
  that accuracy with the previous-token-only and most-frequent-token ones and the unigram
  entropy. A network whose MLM accuracy is far under the count model's has not yet learned to
  read its neighbours.
torch: transformers' ElectraForMaskedLM at configs/mini.py's discriminator size, trained in
  PyTorch on the same batches in the same order (inputs.local_batch, seed 0), BERT's masking
  (15%; 80% [MASK], 10% random, 10% kept) drawn with numpy, torch's AdamW with the recipe's
  schedule (lr 1e-3, 500 warmup steps, linear decay to 0 at --total_steps, weight decay 0.01
  off LayerNorm and biases, clip 1.0). Prints held-out MLM accuracy and loss every 500 steps, to
  set against `--config.objective=mlm`'s. Needs torch and transformers (the test extra).
"""

import argparse
import json
import os
import time

import numpy as np

from electra_jax.data import store, vocab as vocab_lib
from electra_jax.training import inputs

BATCH, LENGTH = 32, 128
FIRST_ORDINARY_ID = 5  # [PAD] [UNK] [CLS] [SEP] [MASK] come first in a vocabulary we trained


def open_split(data: str, split: str):
  vocab = vocab_lib.load_vocab(os.path.join(data, 'vocab.model'))
  examples = store.open_store(os.path.join(data, split), vocab_sha256=vocab.fingerprint(),
                              max_seq_length=LENGTH)
  return vocab, examples


def batches(examples, count: int, seed: int):
  return [inputs.local_batch(examples, BATCH, seed, step, 0, 1) for step in range(count)]


def triples(ids: np.ndarray):
  """(previous, token, next) of every ordinary token with both neighbours in its row."""
  previous, token, following = (ids[:, :-2].ravel(), ids[:, 1:-1].ravel(), ids[:, 2:].ravel())
  keep = token >= FIRST_ORDINARY_ID
  return tuple(x[keep].astype(np.int64) for x in (previous, token, following))


def most_frequent_middle(context: np.ndarray, middle: np.ndarray, size: int):
  """For each distinct context id, the middle id seen most often with it (sorted contexts)."""
  pairs, counts = np.unique(context * size + middle, return_counts=True)
  contexts, middles = pairs // size, pairs % size
  order = np.lexsort((-counts, contexts))
  contexts, middles = contexts[order], middles[order]
  first = np.r_[True, contexts[1:] != contexts[:-1]]
  return contexts[first], middles[first]


def lookup(keys, values, queries, fallback):
  at = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
  found = keys[at] == queries
  return np.where(found, values[at], fallback), found


def count_model(args):
  vocab, train = open_split(args.data, 'train')
  _, held_out = open_split(args.data, 'eval')
  size = vocab.size
  train_ids = np.concatenate([b['input_ids'] for b in batches(train, args.train_batches, 0)])
  eval_ids = np.concatenate([b['input_ids'] for b in batches(held_out, args.eval_batches, 1)])
  previous, token, following = triples(train_ids)
  unigram = np.bincount(token, minlength=size).astype(np.float64)
  most_frequent = int(unigram.argmax())
  by_previous = most_frequent_middle(previous, token, size)
  by_pair = most_frequent_middle(previous * size + following, token, size)
  e_previous, e_token, e_following = triples(eval_ids)
  previous_guess, _ = lookup(*by_previous, e_previous, most_frequent)
  pair_guess, seen = lookup(*by_pair, e_previous * size + e_following, previous_guess)
  p = unigram / unigram.sum()
  result = {
      'train_tokens': int(train_ids.size), 'held_out_positions': int(e_token.size),
      'accuracy_most_frequent': float(np.mean(e_token == most_frequent)),
      'accuracy_previous': float(np.mean(previous_guess == e_token)),
      'accuracy_neighbours': float(np.mean(pair_guess == e_token)),
      'neighbour_pairs_seen': float(np.mean(seen)),
      'unigram_entropy_nats': float(-(p[p > 0] * np.log(p[p > 0])).sum()),
      'held_out_unigram_loss_nats': float(-np.log(np.maximum(p[e_token], 1e-12)).mean()),
  }
  print(json.dumps(result, indent=1))


def torch_mlm(args):
  import torch
  import transformers
  torch.set_num_threads(args.threads)
  torch.manual_seed(0)
  vocab, train = open_split(args.data, 'train')
  _, held_out = open_split(args.data, 'eval')
  config = transformers.ElectraConfig(
      vocab_size=vocab.size, embedding_size=64, hidden_size=128, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=512, max_position_embeddings=512,
      type_vocab_size=2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  model = transformers.ElectraForMaskedLM(config)

  def bert_mask(ids, rng):
    ids = ids.astype(np.int64)
    labels = np.full_like(ids, -100)
    for row, labels_row in zip(ids, labels):
      candidates = np.flatnonzero(row >= FIRST_ORDINARY_ID)
      count = max(1, min(19, int(round(np.sum(row != 0) * 0.15))))
      chosen = rng.choice(candidates, size=min(count, len(candidates)), replace=False)
      labels_row[chosen] = row[chosen]
      draw = rng.random(len(chosen))
      randomised = chosen[(draw >= 0.8) & (draw < 0.9)]
      row[randomised] = rng.integers(FIRST_ORDINARY_ID, vocab.size, size=len(randomised))
      row[chosen[draw < 0.8]] = vocab.mask_id
    return ids, labels

  def forward(batch, ids, labels):
    return model(input_ids=torch.tensor(ids),
                 attention_mask=torch.tensor(batch['input_ids'] != 0).long(),
                 token_type_ids=torch.tensor(batch['segment_ids']).long(),
                 labels=torch.tensor(labels))

  decayed = [p for n, p in model.named_parameters()
             if not ('LayerNorm' in n or n.endswith('bias'))]
  undecayed = [p for n, p in model.named_parameters() if 'LayerNorm' in n or n.endswith('bias')]
  optimizer = torch.optim.AdamW([{'params': decayed, 'weight_decay': 0.01},
                                 {'params': undecayed, 'weight_decay': 0.0}],
                                lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
  total = args.total_steps
  schedule = torch.optim.lr_scheduler.LambdaLR(
      optimizer, lambda s: min(1.0, s / 500) * (1 - min(s, total) / total))
  eval_rng = np.random.default_rng(123)
  held_out_batches = [(b, *bert_mask(b['input_ids'], eval_rng))
                      for b in batches(held_out, args.eval_batches, 1)]

  def evaluate():
    model.eval()
    correct = selected = 0
    loss = 0.0
    with torch.no_grad():
      for batch, ids, labels in held_out_batches:
        out = forward(batch, ids, labels)
        chosen = labels != -100
        correct += int(np.sum(out.logits.argmax(-1).numpy()[chosen] == labels[chosen]))
        selected += int(chosen.sum())
        loss += out.loss.item()
    model.train()
    return correct / selected, loss / len(held_out_batches)

  rng, start = np.random.default_rng(0), time.time()
  for step in range(args.steps + 1):
    if step % 500 == 0:
      accuracy, loss = evaluate()
      print(json.dumps({'step': step, 'eval_mlm_accuracy': round(accuracy, 4),
                        'eval_mlm_loss': round(loss, 4), 'seconds': round(time.time() - start)}),
            flush=True)
    if step == args.steps:
      break
    batch = inputs.local_batch(train, BATCH, 0, step, 0, 1)
    forward(batch, *bert_mask(batch['input_ids'], rng)).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()


def main():
  parser = argparse.ArgumentParser(prog='python -m research.transfer_study.mlm_references',
                                   description=__doc__.splitlines()[0])
  parser.add_argument('reference', choices=('counts', 'torch'))
  parser.add_argument('--data', required=True,
                      help='a prepared corpus (train/, eval/, vocab.model)')
  parser.add_argument('--train_batches', type=int, default=3000, help='counts: batches counted')
  parser.add_argument('--eval_batches', type=int, default=20, help='held-out batches scored')
  parser.add_argument('--steps', type=int, default=2000, help='torch: steps to train')
  parser.add_argument('--total_steps', type=int, default=6365,
                      help="torch: where the schedule reaches 0 (the study's MLM run's steps)")
  parser.add_argument('--threads', type=int, default=1, help='torch: CPU threads')
  args = parser.parse_args()
  (count_model if args.reference == 'counts' else torch_mlm)(args)


if __name__ == '__main__':
  main()
