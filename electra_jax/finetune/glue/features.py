"""GLUE examples -> fixed-length model inputs: `[CLS] A [SEP] B [SEP]` with segment ids 0 and 1.

As BERT and ELECTRA did it: a pair is truncated longest-first (from the end of the longer text,
the second on a tie), a single text at its end; padding is id 0.
"""

import numpy as np

from electra_jax.finetune.glue.data import Examples


def truncated_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
  """Lengths after removing tokens from the longer text until both fit in `budget`."""
  while len_a + len_b > budget:
    if len_a > len_b:
      len_a -= 1
    else:
      len_b -= 1
  return len_a, len_b


def encode(examples: Examples, vocab, max_seq_length: int) -> dict[str, np.ndarray]:
  """input_ids and segment_ids [N, max_seq_length] (int32) of the examples."""
  ids_a = vocab.encode(examples.text_a)
  ids_b = vocab.encode(examples.text_b) if examples.text_b is not None else None
  input_ids = np.zeros((len(ids_a), max_seq_length), np.int32)
  segment_ids = np.zeros_like(input_ids)
  for row, a in enumerate(ids_a):
    if ids_b is None:
      tokens = [vocab.cls_id, *a[:max_seq_length - 2], vocab.sep_id]
      first = len(tokens)
    else:
      b = ids_b[row]
      len_a, len_b = truncated_lengths(len(a), len(b), max_seq_length - 3)
      tokens = [vocab.cls_id, *a[:len_a], vocab.sep_id, *b[:len_b], vocab.sep_id]
      first = len_a + 2
    input_ids[row, :len(tokens)] = tokens
    segment_ids[row, first:len(tokens)] = 1
  return {'input_ids': input_ids, 'segment_ids': segment_ids}


def token_counts(input_ids: np.ndarray) -> np.ndarray:
  """[N] each row's length up to its last non-padding token (padding, id 0, is at the end)."""
  positions = np.arange(1, input_ids.shape[1] + 1)
  return np.max(np.where(input_ids != 0, positions, 0), axis=1)


def trim_padding(inputs: dict[str, np.ndarray], multiple: int = 8) -> dict[str, np.ndarray]:
  """The [N, L] inputs without the trailing all-padding columns (rounded up to `multiple`). The
  outputs stay those of the full length: attention's -10000 on padding gives exactly 0."""
  longest = max(int(token_counts(inputs['input_ids']).max(initial=0)), 1)
  length = -(-longest // multiple) * multiple  # rounded up to the multiple
  return {name: values[:, :length] for name, values in inputs.items()}


def with_swapped_pairs(examples: Examples) -> Examples:
  """The examples followed by each pair again as (B, A), with the same label."""
  labels = examples.labels
  return Examples(examples.text_a + examples.text_b, examples.text_b + examples.text_a,
                  None if labels is None else np.concatenate([labels, labels]),
                  examples.index + examples.index)


def subset(examples: Examples, count: int, seed: int = 0) -> Examples:
  """`count` examples drawn at random (fixed by `seed`), in their original order."""
  if count <= 0 or count >= len(examples):
    return examples
  keep = np.sort(np.random.default_rng(seed).choice(len(examples), count, replace=False))
  pick = lambda items: [items[i] for i in keep]
  return Examples(pick(examples.text_a),
                  None if examples.text_b is None else pick(examples.text_b),
                  None if examples.labels is None else examples.labels[keep],
                  pick(examples.index))
