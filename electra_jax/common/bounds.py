"""Numeric config fields checked against the interval where they mean something.

A rate of 1.5 or a negative weight decay raises no error anywhere downstream: the run trains on
something other than what was meant (a dropout rate of 1 zeroes its input, Adam with b2 = 1
never updates its second moment, a mask rate above 1 asks for more positions than a sequence
has). So each such field is refused before anything runs, naming its value and its interval.
An interval is written as it reads in the message: '[0, 1)', '(0, inf)'.
"""

from electra_jax.common.errors import UsageError

# Both trainers' optimizer fields (pretraining's and fine-tuning's configs spell them alike).
OPTIMIZER = {'weight_decay': '[0, inf)', 'adam_b1': '[0, 1)', 'adam_b2': '[0, 1)',
             'adam_eps': '[0, inf)', 'max_grad_norm': '(0, inf)'}
# Pretraining's others.
PRETRAINING = {'learning_rate': '(0, inf)', 'warmup_steps': '[0, inf)', 'mask_prob': '(0, 1)',
               'embedding_weight_decay': '[0, inf)', 'gen_weight': '[0, inf)',
               'disc_weight': '[0, inf)', 'stall_check_after': '[0, inf)',
               'model.dropout_rate': '[0, 1)', 'model.attention_dropout_rate': '[0, 1)'}
# Pretraining's counts and sizes: a 0 or a negative number of steps trains nothing and exits as
# if done; a 0 width fails deep in the model, or divides by zero.
PRETRAINING_COUNTS = {
    **{name: '[1, inf)' for name in (
        'num_train_steps', 'batch_size', 'max_seq_length', 'grad_accum_steps', 'log_every',
        'save_every', 'eval_steps', 'keep_checkpoints', 'max_consecutive_skips',
        'data.vocab_sample_sentences', 'model.vocab_size', 'model.embedding_size',
        'model.hidden_size', 'model.num_layers', 'model.num_heads', 'model.intermediate_size',
        'model.max_position_embeddings', 'model.type_vocab_size')},
    # 0 means something here: no evaluation, one worker per core, no prefetching.
    **{name: '[0, inf)' for name in ('eval_every', 'data.prepare_workers',
                                     'data.prefetch_batches')},
    'model.generator_hidden_size': '(0, inf)', 'model.generator_layers': '(0, inf)',
}
# Fine-tuning's others, as resolved (a 0 taking the recipe's value); head_dropout is GLUE's only.
FINE_TUNING = {'learning_rate': '(0, inf)', 'num_epochs': '(0, inf)', 'layer_decay': '(0, 1]',
               'warmup_proportion': '[0, 1]', 'head_dropout': '[0, 1)',
               # Counts and sizes, SQuAD's and chunking's too (batch sizes: against the devices).
               **{name: '[1, inf)' for name in (
                   'max_seq_length', 'log_every', 'max_consecutive_skips', 'max_query_length',
                   'doc_stride', 'beam_size', 'n_best_size', 'max_answer_length')},
               **{name: '[0, inf)' for name in (  # 0: at the end only, or no limit
                   'save_every', 'max_train_examples', 'train_articles', 'dev_articles',
                   'max_train_sentences')}}


def within(value: float, interval: str) -> bool:
  """Whether `value` lies in `interval` ('[a, b]', '(a, b)' or mixed; 'inf' for no bound)."""
  low, high = (float(end) for end in interval[1:-1].split(','))
  above = value >= low if interval[0] == '[' else value > low
  below = value <= high if interval[-1] == ']' else value < high
  return above and below  # NaN compares False: refused


def check(config, intervals: dict[str, str]):
  """Raises UsageError for the first field of `intervals` (dotted names under `config`) whose
  value lies outside its interval. A field the config lacks or holds as None (unset) is skipped:
  one task family's config has fields another's has not (GLUE's head dropout), and older runs
  lack newer ones."""
  for name, interval in intervals.items():
    *parents, leaf = name.split('.')
    node = config
    for part in parents:
      node = node.get(part, {})
    if leaf in node and node[leaf] is not None and not within(float(node[leaf]), interval):
      raise UsageError(f'config.{name}={node[leaf]}: use a value in {interval}')
