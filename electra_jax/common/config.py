"""Run configuration: every field, its default and what it means; reading config files and flags.

The files in configs/ start from `default_config()` and change what their model size needs, so
this file is the config reference. Any field can be overridden on the command line as
`--config.<field>=<value>` (e.g. `--config.model.hidden_size=512`). The checks that a config's
values fit together are in training/validation.py.
"""

import difflib
import importlib.util
import json
import os

import ml_collections
from ml_collections import config_dict

from electra_jax.common import storage
from electra_jax.common.errors import UsageError


def default_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0                   # seeds parameters, data order, masks and samples
  # Random bits: 'threefry2x32' (the same run on any device count), 'rbg' or 'unsafe_rbg' (TPUs).
  c.rng_impl = 'threefry2x32'
  c.batch_size = 128           # global batch (sequences per step, summed over all devices)
  c.max_seq_length = 128       # tokens per example, [CLS]/[SEP] included
  c.num_train_steps = 1_000_000
  c.dtype = 'float32'          # computation dtype: 'float32' or 'bfloat16' (parameters stay float32)
  c.grad_accum_steps = 1       # memory: each batch as this many micro-batches (gradients summed)
  c.remat = False              # memory: recompute each layer's activations in the backward pass
  # Kernel without attention dropout: 'auto' (TPU: 'pallas', GPU: 'cudnn'), 'xla', 'einsum'.
  c.attention = 'auto'

  # 'electra', 'mlm' (BERT's baseline) or an ablation: 'electra_15', 'replace_mlm', 'all_tokens_mlm'
  c.objective = 'electra'
  c.mask_prob = 0.15           # share of tokens to predict (0.25 for large)
  c.masking = 'token'          # what is selected: 'token' (the paper's), 'whole_word' or 'span'
  c.temperature = 1.0          # replacements are sampled from softmax(logits / temperature)
  c.temperature_start = 0.0    # > 0: sample at this at step 0, moving linearly to `temperature`
  c.sampler = 'categorical'    # or 'inverse_cdf': the same distribution, faster on a CPU
  c.gen_weight = 1.0           # loss = gen_weight * MLM + disc_weight * RTD
  c.disc_weight = 50.0         # ELECTRA and electra_15 (the MLM ablations weigh their MLM 1.0)
  c.copy_weight = 1.0          # all_tokens_mlm: weight of the copy probability's own loss
  c.embedding_sharing = 'shared'  # 'shared' (the paper's), 'none', 'all' or 'gdes' (DeBERTa-v3's)
  c.two_stage_steps = 0        # > 0: two-stage training, the generator alone for this many steps
  c.generator_kind = 'mlm'     # 'mlm' (the paper's generator) or 'unigram' (no generator network)
  # Frozen generator: an MLM run's workdir or a HF Electra/BertForMaskedLM dir; '' = trained jointly
  c.generator_init = ''

  c.learning_rate = 5e-4       # AdamW as the original: peak of warmup x linear decay from step 0
  c.warmup_steps = 10_000
  c.weight_decay = 0.01        # decoupled; not applied to LayerNorm parameters or biases
  c.embedding_weight_decay = config_dict.placeholder(float)  # embeddings' rate; None: weight_decay
  c.adam_b1 = 0.9
  c.adam_b2 = 0.999
  c.adam_eps = 1e-6
  c.adam_bias_correction = False  # False reproduces the original's Adam exactly
  c.max_grad_norm = 1.0        # global-norm gradient clipping

  c.log_every = 100            # logging, evaluation and checkpoints count in steps
  c.eval_every = 1000          # 0 disables evaluation
  c.eval_steps = 10            # batches of data.eval_files per evaluation
  c.save_every = 5000
  c.keep_checkpoints = 3       # the most recent N checkpoints are kept
  c.checkpoint_fallback = False  # True: move a damaged latest checkpoint aside and resume before it
  c.compilation_cache_dir = ''  # '' = $JAX_COMPILATION_CACHE_DIR or <workdir>/compilation_cache
  c.stall_check_after = 1000   # from this step, warn if the discriminator's AUC is < 0.55; 0 = off

  c.on_nonfinite = 'stop'      # a NaN/Inf step is never applied; 'stop' the run or 'skip' the batch
  c.max_consecutive_skips = 10

  c.model = ml_collections.ConfigDict()
  c.model.vocab_size = 30522   # must equal the vocabulary's size (trained or given)
  c.model.embedding_size = 128  # E: width of the shared embedding block
  c.model.hidden_size = 256    # H: discriminator width
  c.model.num_layers = 12      # the discriminator's (and by default the generator's) depth
  c.model.num_heads = 4
  c.model.intermediate_size = 1024
  c.model.generator_hidden_size = 0.25  # fraction of hidden_size (or a width if > 1); ELECTRA only
  c.model.generator_layers = 1.0  # fraction of num_layers (or a count if > 1); 1.0 in the paper
  c.model.max_position_embeddings = 512
  c.model.type_vocab_size = 2
  c.model.dropout_rate = 0.1
  c.model.attention_dropout_rate = 0.1

  c.data = ml_collections.ConfigDict()
  c.data.train_files = ''      # comma-separated paths or globs of UTF-8 text files
  c.data.eval_files = ''       # same, for evaluation ('' = no evaluation)
  # Instead of train_files: 'tfds:NAME[/CONFIG][:SPLIT[:FEATURE]]' or file globs; '@WEIGHT' mixes.
  c.data.sources = ''
  c.data.eval_sources = ''     # same, for evaluation, instead of eval_files
  c.data.tfds_data_dir = ''    # TFDS data_dir (local or gs://); '' = TFDS's default
  c.data.text_field = 'text'   # the field of each .jsonl record that holds the document
  c.data.text_format = 'auto'  # 'lines', 'gutenberg', 'wikiextractor', 'wikitext'; 'auto' per file
  c.data.packing = 'auto'      # 'original' (what does not fit is dropped), 'fill' or 'auto'
  c.data.prepared_dir = ''     # the output of `python -m electra_jax.prepare`; '' = into local_dir
  c.data.local_dir = ''        # local disk for prepared data; '' = <workdir>/data (gs://: a cache)
  c.data.prepare_workers = 0   # processes that prepare data; 0 = one per CPU core
  c.data.prefetch_batches = 2  # batches made ahead in a background thread (0 = none)
  c.data.vocab_model = ''      # a sentencepiece .model or WordPiece vocab.txt; '' = train one
  c.data.vocab_sample_sentences = 1_000_000  # lines sampled to train the vocabulary
  c.data.vocab_lowercase = False  # train an uncased vocabulary (ELECTRA's and BERT's are uncased)
  return c


# The repository's configs/, beside the package when it runs from a checkout (pip install -e).
PACKAGED_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'configs')


def missing_config_file(filename: str, packaged: str = PACKAGED_CONFIGS) -> str:
  """Why `filename` was not found, and where the packaged configs are, for the error line."""
  where = (f' in {os.getcwd()} (the current directory, where a relative path starts)'
           if not os.path.isabs(filename) else '')
  if not os.path.isdir(packaged):
    return (f"config file '{filename}' does not exist{where}; pass the path of a config file, "
            "e.g. the repository's configs/tiny.py")
  relative = filename.removeprefix('configs' + os.sep) if not os.path.isabs(filename) else ''
  candidates = [os.path.join(packaged, name) for name in (relative, os.path.basename(filename))
                if name]
  found = next((c for c in candidates if os.path.isfile(c)), None)
  fix = (f'pass --config={found}' if found else
         f"e.g. --config={os.path.join(packaged, 'tiny.py')}")
  return (f"config file '{filename}' does not exist{where}; the packaged configs are in "
          f'{packaged}: {fix}')


def load_config_file(path: str) -> ml_collections.ConfigDict:
  """Runs a config file's get_config() (the part of PATH before any ':' is the file)."""
  filename = path.split(':')[0]
  if not os.path.isfile(filename):
    raise UsageError(missing_config_file(filename))
  spec = importlib.util.spec_from_file_location('electra_jax_run_config', filename)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


# Fields a config no longer has, and where the setting went: a command scripted with one fails
# naming its new place.
RETIRED_FIELDS = {
    'word_table': "the transfer study's command python -m research.transfer_study.word_table "
                  '--table=PATH (the same flags otherwise)',
}


def check_overrides(argv, config_path: str):
  """Raises UsageError for a `--config.a.b=...` argument naming a field the config lacks.

  ml_collections reports this as a bare AttributeError deep in flag parsing; this names the
  argument and the closest existing field.
  """
  config = load_config_file(config_path)
  for arg in argv:
    if not arg.startswith('--config.'):
      continue
    path = arg[len('--config.'):].split('=')[0].split('.')
    node = config
    for depth, key in enumerate(path):
      if not isinstance(node, ml_collections.ConfigDict) or key not in node:
        if depth == 0 and key in RETIRED_FIELDS:
          raise UsageError(f"config.{key} is no longer a field of {config_path}; it moved to "
                           f'{RETIRED_FIELDS[key]}')
        known = list(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
        close = difflib.get_close_matches(key, known, n=1)
        where = '.'.join(['config'] + path[:depth])
        hint = f"did you mean '{where}.{close[0]}'? " if close else ''
        raise UsageError(f"unknown config field '{arg.split('=')[0][2:]}' in {config_path}; "
                         f"{hint}fields of {where}: {', '.join(sorted(known))}")
      node = node[key]


def saved_objective(saved: dict) -> str:
  """The objective of a saved config.json; runs from before the field existed are ELECTRA's."""
  return saved.get('objective', 'electra')


def check_workdir_config(config: ml_collections.ConfigDict, workdir: str):
  """Refuses a workdir whose saved run has a different model, before anything is written there."""
  path = os.path.join(workdir, 'config.json')
  if not storage.exists(path):
    return
  saved = json.loads(storage.read_text(path))
  if saved_objective(saved) != config.objective:
    raise UsageError(f'{workdir} holds a run of objective {saved_objective(saved)!r}, not '
                     f'{config.objective!r}; use a new --workdir or '
                     f'--config.objective={saved_objective(saved)}')
  # Switches that change what a checkpoint's numbers mean, with the value of runs that predate
  # them.
  for field, default in (('rng_impl', 'threefry2x32'), ('embedding_sharing', 'shared'),
                         ('two_stage_steps', 0), ('generator_kind', 'mlm'),
                         ('generator_init', '')):
    was, now = saved.get(field, default), config.get(field, default)
    if was != now:
      raise UsageError(f'{workdir} holds a run with {field} {was!r}, not {now!r}; use a new '
                       f'--workdir or --config.{field}={was}')
  # Model fields added since, with the value that runs saved before them had.
  saved_model = {'generator_layers': 1.0, **saved.get('model', {})}
  changed = {k: (saved_model.get(k), v) for k, v in config.model.to_dict().items()
             if saved_model.get(k) != v}
  if changed:
    detail = ', '.join(f'{k}: saved {old!r}, now {new!r}' for k, (old, new) in changed.items())
    raise UsageError(f'{workdir} holds a run of a different model ({detail}); use a new '
                     '--workdir or the config that run was started with')


def flat_fields(tree: dict, prefix: str = '') -> dict:
  """{'data.batch': 8, ...}: a nested config's leaves by dotted name."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(flat_fields(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def keep_config_before_changes(config: ml_collections.ConfigDict, workdir: str,
                               step: int) -> list[str]:
  """When a run resumes at `step` with settings other than its saved config.json's (a learning
  rate, more steps, which also stretch the schedule), keeps that file as config.until-<step>.json
  before config.json is rewritten, so the workdir still says how its first steps were trained.

  Returns the changes, one 'field: old -> new' each. A file already kept for this step stays: it
  describes the steps that were checkpointed, while a config.json written by an attempt that
  saved no checkpoint since describes none.
  """
  path = os.path.join(workdir, 'config.json')
  if not storage.exists(path):
    return []
  # A field added since the run was saved counts as its default there: only a value the run
  # did not have is a change.
  saved = {**flat_fields(json.loads(default_config().to_json())),
           **flat_fields(json.loads(storage.read_text(path)))}
  now = flat_fields(json.loads(config.to_json()))
  changes = [f'{k}: {saved.get(k)!r} -> {now.get(k)!r}' for k in sorted(saved.keys() | now.keys())
             if saved.get(k) != now.get(k)]
  kept = os.path.join(workdir, f'config.until-{step}.json')
  if changes and not storage.exists(kept):
    storage.write_text(kept, storage.read_text(path))
  return changes


def save_config(config: ml_collections.ConfigDict, workdir: str):
  """Writes the resolved config as <workdir>/config.json (atomically)."""
  storage.write_text(os.path.join(workdir, 'config.json'), config.to_json(indent=2))
