"""README.md of an exported directory: the model card the Hugging Face Hub shows, from the run.

What the run cannot know (language, license) the publisher gives at export or adds later, and
paths are cut to their names, so a card published as written shows no local directories.
"""

import json
import os
import re

import ml_collections

from electra_jax.training import flops
from electra_jax.common import storage
from electra_jax.common.errors import UsageError

# The Hub's forms: ISO 639 codes (en, fr, zh-Hant), and its license identifiers (apache-2.0,
# cc-by-sa-4.0, other); a value outside them would be a card the Hub misreads.
LANGUAGE_CODE = re.compile(r'[a-z]{2,3}(-[A-Za-z0-9]{2,8})*')
LICENSE_ID = re.compile(r'[a-z0-9][a-z0-9.+-]*')

# Each exported network's title, what it computes, the Hub pipeline its widget runs (None: the
# Hub has none for replaced-token detection) and how to load it. Its class is its config.json's.
NETWORKS = {
    'discriminator': ('An ELECTRA discriminator', 'scores every token as original or replaced',
                      None, 'For a task, load it with `AutoModelForSequenceClassification` (or '
                      'another task class) and fine-tune.'),
    'generator': ('An ELECTRA generator', 'predicts masked tokens', 'fill-mask',
                  'Load it with `AutoModelForMaskedLM` to fill masks (the fill-mask pipeline); '
                  'for a task, fine-tune the discriminator exported beside it.'),
    'mlm': ('A masked language model', 'predicts masked tokens', 'fill-mask',
            'Load it with `AutoModelForMaskedLM` to fill masks, or with '
            '`AutoModelForSequenceClassification` (or another task class) to fine-tune it.'),
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
EVAL_KEYS = {'eval_disc_auc': 'discriminator ROC AUC',
             'eval_disc_accuracy': 'discriminator accuracy',
             'eval_mlm_accuracy': 'masked-token accuracy', 'eval_loss': 'loss'}


def last_evaluation(workdir: str, step: int) -> dict:
  """The run's last held-out evaluation at or before `step` (metrics.jsonl), or {}."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not storage.exists(path):
    return {}
  evaluations = [m for m in map(json.loads, storage.read_text(path).splitlines())
                 if m['step'] <= step and any(k in m for k in EVAL_KEYS)]
  return evaluations[-1] if evaluations else {}


def training_text(data: ml_collections.ConfigDict) -> str:
  """The training text as the config names it, each path cut to its file name."""
  if data.train_files:
    names = [os.path.basename(p.strip().rstrip('/')) for p in data.train_files.split(',')]
    return ', '.join(f'`{name}`' for name in names if name)
  if data.sources:
    return f'a mixture of {len(data.sources.split(","))} source(s) (`data.sources`)'
  return 'a prepared corpus (`data.prepared_dir`)'


def encoder_text(hf: dict) -> str:
  """The encoder's sizes, from its transformers config (ELECTRA's or ModernBERT's)."""
  heads = hf['num_attention_heads']
  if hf['model_type'] == 'modernbert':
    return (f"ModernBERT's design: {hf['num_hidden_layers']} pre-norm layers, hidden size "
            f"{hf['hidden_size']}, {heads} head{'s' * (heads != 1)}, GeGLU feed-forward "
            f"{hf['intermediate_size']}, RoPE, global attention every "
            f"{hf['global_attn_every_n_layers']} layers and a {hf['local_attention']}-token "
            f"window between; {hf['vocab_size']:,} vocabulary pieces")
  return (f"{hf['num_hidden_layers']} layers, hidden size {hf['hidden_size']}, "
          f"{heads} head{'s' * (heads != 1)}, feed-forward {hf['intermediate_size']}, "
          f"embeddings {hf['embedding_size']}; {hf['vocab_size']:,} vocabulary pieces")


def languages_of(language: str) -> tuple[str, ...]:
  """--language's codes (comma-separated), each checked; UsageError names a bad one."""
  codes = tuple(code.strip() for code in language.split(',') if code.strip())
  bad = [code for code in codes if not LANGUAGE_CODE.fullmatch(code)]
  if bad:
    raise UsageError(f"--language={language!r}: {', '.join(bad)} is not an ISO 639 language "
                     'code; give codes such as en, or en,fr')
  return codes


def check_license(license_id: str):
  """UsageError unless `license_id` is empty or has the form of the Hub's license ids."""
  if license_id and not LICENSE_ID.fullmatch(license_id):
    raise UsageError(f"--license={license_id!r}: give the Hugging Face Hub's license "
                     'identifier, such as apache-2.0, cc-by-sa-4.0, or other')


def missing_metadata(languages: tuple[str, ...], license_id: str) -> list[str]:
  """The card's closing lines: what the publisher has still to add, if anything."""
  missing = {name: what for name, what, given in (
      ('language', "the training text's language", languages),
      ('license', "the model's license", license_id)) if not given}
  if not missing:
    return []
  fields = ' and '.join(f'`{name}:`' for name in missing)
  flags = ' and '.join(f'--{name}' for name in missing)
  verb = 'is' if len(missing) == 1 else 'are'
  what = ' and '.join(missing.values())
  return ['', f'{what[0].upper()}{what[1:]} {verb} not recorded by electra_jax: add {fields} '
              f'to the block at the top before publishing, or export with {flags}.']


def card(tags, pipeline: str | None, title: str, intro: str, class_name: str,
         section: str, rows: list[tuple[str, str]], languages: tuple[str, ...] = (),
         license_id: str = '') -> str:
  """A model card: the YAML block, a title, how to load the model, and one table."""
  front = ['---', 'library_name: transformers',
           *(['language:', *(f'- {code}' for code in languages)] if languages else []),
           *([f'license: {license_id}'] if license_id else []), 'tags:',
           *(f'- {tag}' for tag in dict.fromkeys(tags)),
           *([f'pipeline_tag: {pipeline}'] if pipeline else []), '---']
  use = ['```python', f'from transformers import AutoTokenizer, {class_name}', '',
         'tokenizer = AutoTokenizer.from_pretrained("PATH_OR_REPO")',
         f'model = {class_name}.from_pretrained("PATH_OR_REPO")', '```']
  table = ['| | |', '|---|---|'] + [f'| {name} | {value} |' for name, value in rows]
  body = [f'# {title}', '', intro, '', *use, '', f'## {section}', '', *table,
           *missing_metadata(languages, license_id)]
  return '\n'.join(front + [''] + body) + '\n'


def model_card(network: str, config: ml_collections.ConfigDict, hf: dict, step: int,
               evaluation: dict, languages: tuple[str, ...] = (), license_id: str = '') -> str:
  """The README.md of the exported `network` of a run at `step`; `hf` is the config.json
  written beside it (ELECTRA's or ModernBERT's, as exported)."""
  title, computes, pipeline, use = NETWORKS[network]
  class_name = hf['architectures'][0]
  tokens = step * config.batch_size * config.max_seq_length
  decay = f'{config.weight_decay:g}'
  if config.embedding_weight_decay is not None:
    decay += f' (embeddings {config.embedding_weight_decay:g})'
  rows = [
      ('objective', OBJECTIVES[config.objective].format(w=config.disc_weight)),
      ('this network', f'the {network}: {computes}'),
      # this network's sizes, as exported
      ('encoder', encoder_text(hf)),
      ('steps', f'{step:,} of {config.num_train_steps:,}, batch {config.batch_size} × '
                f'{config.max_seq_length} tokens ({tokens:,} tokens seen)'),
      ('pretraining compute', f'{step * flops.train_step_flops(config):.3g} FLOPs '
                              '(model FLOPs of the training steps, electra_jax/training/flops.py)'),
      ('optimizer', f'AdamW, peak learning rate {config.learning_rate:g}, '
                    f'{config.warmup_steps:,} warmup steps, weight decay {decay}'),
      ('training text', training_text(config.data)),
  ]
  if evaluation:
    held_out = ', '.join(f'{label} {evaluation[key]:.4f}' for key, label in EVAL_KEYS.items()
                         if key in evaluation)
    rows.append((f'held-out, step {evaluation["step"]:,}', held_out))
  return card(['electra', 'electra_jax', config.objective], pipeline,
              f'{title}, pretrained with electra_jax',
              f'Step {step:,} of an electra_jax pretraining run, exported as `{class_name}`. '
              + use, class_name, 'Pretraining', rows, languages, license_id)


# A fine-tuned network's (finetune/export.py) Hub pipeline; its class is its config.json's.
FINETUNED = {'sequence': 'text-classification', 'qa': 'question-answering',
             'tagger': 'token-classification'}


def scores_text(scores: dict) -> str:
  """{'MRPC': {'accuracy': 0.71, 'f1': 0.8}} -> 'MRPC accuracy 0.7100, f1 0.8000'."""
  number = lambda value: f'{value:.4f}' if isinstance(value, float) else str(value)
  return '; '.join(f'{split} ' + ', '.join(f'{name} {number(value)}'
                                           for name, value in metrics.items())
                   for split, metrics in scores.items())


def finetuned_card(network: str, hf_config: dict, results: dict, seed: int, step: int,
                   languages: tuple[str, ...] = (), license_id: str = '') -> str:
  """The README.md of seed `seed` of a fine-tuning run (its results.json), exported."""
  class_name, pipeline = hf_config['architectures'][0], FINETUNED[network]
  budget = results['budget']
  recipe = [f"peak learning rate {results['learning_rate']:g}",
            f"layer-wise decay {results['layer_decay']:g}",
            f"{budget['epochs']:g} epoch{'s' * (budget['epochs'] != 1)}",
            *([f"{budget['train_examples']:,} training examples"]
              if 'train_examples' in budget else []),
            f"batch {budget['batch_size']}", f"length {budget['max_seq_length']}",
            f'{step:,} steps']
  start = (f"the pretrained encoder `{os.path.basename(results['init_from'].rstrip('/'))}`"
           if results['init_from'] else 'random initialisation (no pretraining)')
  rows = [('task', results['task']), ('started from', start),
          ('encoder', encoder_text(hf_config)),
          ('labels', ', '.join(f'`{label}`' for label in hf_config['id2label'].values())),
          ('recipe', ', '.join(recipe))]
  if str(seed) in results['seeds']:
    rows += [(f'dev, this seed ({seed})', scores_text(results['seeds'][str(seed)])),
             (f"dev, median of {len(results['seeds'])} seed(s)", scores_text(results['median']))]
  return card(['electra', 'electra_jax', results['task'].lower()], pipeline,
              f"ELECTRA fine-tuned on {results['task']}, with electra_jax",
              f'Seed {seed} of an electra_jax fine-tuning run, exported as `{class_name}`.',
              class_name, 'Fine-tuning', rows, languages, license_id)
