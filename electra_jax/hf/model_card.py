"""README.md of an exported directory: the model card the Hugging Face Hub shows, from the run.

The Hub reads the YAML block at the top (library, tags, the pipeline the widget runs) and shows
the rest. Everything in the card is read from the run: its config, the exported step, the FLOPs
of that many steps (core/flops.py) and its last held-out evaluation up to that step. What the
run cannot know (the text's language and license) is left for the publisher to add, and file
paths are cut to their names, so that a card published as written shows no local directories.
"""

import json
import os

import ml_collections

from electra_jax.core import flops, storage
from electra_jax.hf import model_config

# Each exported network's title, the transformers class it loads with, what it computes, and
# the Hub pipeline its widget runs (None: the Hub has none for replaced-token detection).
NETWORKS = {
    'discriminator': ('An ELECTRA discriminator', 'ElectraForPreTraining',
                      'scores every token as original or replaced', None),
    'generator': ('An ELECTRA generator', 'ElectraForMaskedLM', 'predicts masked tokens',
                  'fill-mask'),
    'mlm': ('A masked language model', 'ElectraForMaskedLM', 'predicts masked tokens',
            'fill-mask'),
}
OBJECTIVES = {
    'electra': 'ELECTRA: a generator (masked LM) and a discriminator (replaced-token detection) '
               'trained together on MLM + {w:g} · RTD',
    'electra_15': "ELECTRA 15% (the paper's ablation): the discriminator's loss on the masked "
                  'positions only, MLM + {w:g} · RTD',
    'mlm': 'BERT-style masked language modelling (15% of tokens; 80% [MASK], 10% random, 10% kept)',
    'replace_mlm': "Replace MLM (the paper's ablation): MLM on generator-replaced inputs",
    'all_tokens_mlm': "All-Tokens MLM (the paper's ablation): MLM predicting every token",
    'electric': 'Electric: an energy-based cloze model trained by noise-contrastive estimation',
}
EVAL_KEYS = {'eval_disc_auc': 'discriminator ROC AUC', 'eval_disc_accuracy': 'discriminator accuracy',
             'eval_mlm_accuracy': 'masked-token accuracy', 'eval_loss': 'loss'}


def last_evaluation(workdir: str, step: int) -> dict:
  """The run's last held-out evaluation at or before `step` (metrics.jsonl), or {}."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not storage.exists(path):
    return {}
  evaluations = [m for m in map(json.loads, storage.read_text(path).splitlines())
                 if m.get('step', step + 1) <= step and any(k in m for k in EVAL_KEYS)]
  return evaluations[-1] if evaluations else {}


def training_text(data: ml_collections.ConfigDict) -> str:
  """The training text as the config names it, each path cut to its file name."""
  if data.train_files:
    names = [os.path.basename(p.strip().rstrip('/')) for p in data.train_files.split(',')]
    return ', '.join(f'`{name}`' for name in names if name)
  if data.get('sources'):
    return f'a mixture of {len(data.sources.split(","))} source(s) (`data.sources`)'
  return 'a prepared corpus (`data.prepared_dir`)'


def model_card(network: str, config: ml_collections.ConfigDict, step: int,
               evaluation: dict) -> str:
  """The README.md of the exported `network` of a run at `step`."""
  title, class_name, computes, pipeline = NETWORKS[network]
  hf = model_config.to_hf(config.model, network)  # this network's sizes, as exported
  tokens = step * config.batch_size * config.max_seq_length
  heads = hf['num_attention_heads']
  decay = f'{config.weight_decay:g}'
  if config.get('embedding_weight_decay') is not None:
    decay += f' (embeddings {config.embedding_weight_decay:g})'
  tags = dict.fromkeys(['electra', 'electra_jax', config.objective])
  front = ['---', 'library_name: transformers', 'tags:', *(f'- {tag}' for tag in tags),
           *([f'pipeline_tag: {pipeline}'] if pipeline else []), '---']
  rows = [
      ('objective', OBJECTIVES[config.objective].format(w=config.disc_weight)),
      ('this network', f'the {network}: {computes}'),
      ('encoder', f"{hf['num_hidden_layers']} layers, hidden size {hf['hidden_size']}, "
                  f"{heads} head{'s' * (heads != 1)}, feed-forward {hf['intermediate_size']}, "
                  f"embeddings {hf['embedding_size']}"),
      ('vocabulary', f"{hf['vocab_size']:,} pieces"),
      ('steps', f'{step:,} of {config.num_train_steps:,}, batch {config.batch_size} × '
                f'{config.max_seq_length} tokens ({tokens:,} tokens seen)'),
      ('pretraining compute', f'{step * flops.train_step_flops(config):.3g} FLOPs '
                              '(model FLOPs of the training steps, electra_jax/core/flops.py)'),
      ('optimizer', f'AdamW, peak learning rate {config.learning_rate:g}, '
                    f'{config.warmup_steps:,} warmup steps, weight decay {decay}'),
      ('training text', training_text(config.data)),
  ]
  if evaluation:
    held_out = ', '.join(f'{label} {evaluation[key]:.4f}' for key, label in EVAL_KEYS.items()
                         if key in evaluation)
    rows.append((f'held-out, step {evaluation["step"]:,}', held_out))
  table = ['| | |', '|---|---|'] + [f'| {name} | {value} |' for name, value in rows]
  use = ['```python', f'from transformers import AutoTokenizer, {class_name}', '',
         'tokenizer = AutoTokenizer.from_pretrained("PATH_OR_REPO")',
         f'model = {class_name}.from_pretrained("PATH_OR_REPO")', '```']
  body = [
      f'# {title}, pretrained with electra_jax', '',
      f'Step {step:,} of an electra_jax pretraining run, exported as `{class_name}`. '
      'For a task, load it with `AutoModelForSequenceClassification` (or another task class) '
      'and fine-tune.', '', *use, '', '## Pretraining', '', *table, '',
      'The language and license of the training text are not recorded by electra_jax: add '
      'them here, and `language:` and `license:` to the block at the top, before publishing.']
  return '\n'.join(front + [''] + body) + '\n'
