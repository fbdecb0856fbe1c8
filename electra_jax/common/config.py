"""Run configuration: every field, its default and what it means; reading config files and flags.

The files in configs/ start from `default_config()` and change what their model size needs, so
this file is the config reference. Any field can be overridden on the command line as
`--config.<field>=<value>` (e.g. `--config.model.hidden_size=512`). The checks that a config's
values fit together are the checks at the end of this module.
"""

import difflib
import importlib.util
import json
import os
from typing import Any, NamedTuple

import ml_collections
from ml_collections import config_dict

from electra_jax.common import storage
from electra_jax.common.errors import UsageError


class Field(NamedTuple):
  """One config field: its default, what it means, and the values it may take."""
  default: Any
  meaning: str
  # An interval as the error message reads it ('[0, 1)', '(0, inf)'), or the choices; '': any.
  allowed: str | tuple[str, ...] = ''


COUNT, SIZE, RATE, SHARE = '[1, inf)', '(0, inf)', '[0, inf)', '[0, 1)'

# Every field of the pretraining config, by dotted name. configs/*.py start from these and
# change what their model size needs; `--config.<field>=<value>` overrides any of them.
FIELDS = {
    'seed': Field(0, 'seeds parameters, data order, masks and samples'),
    'rng_impl': Field('threefry2x32', "random bits: 'threefry2x32' (the same run on any device "
                      "count), 'rbg' or 'unsafe_rbg' (TPUs)", ('threefry2x32', 'rbg', 'unsafe_rbg')),
    'batch_size': Field(128, 'global batch (sequences per step, summed over all devices)', COUNT),
    'max_seq_length': Field(128, 'tokens per example, [CLS]/[SEP] included', COUNT),
    'num_train_steps': Field(1_000_000, 'steps to train', COUNT),
    'dtype': Field('float32', 'computation dtype (parameters stay float32)',
                   ('float32', 'bfloat16')),
    'grad_accum_steps': Field(1, 'memory: each batch as this many micro-batches (gradients '
                              'summed)', COUNT),
    'remat': Field(False, "memory: recompute each layer's activations in the backward pass"),
    'attention': Field('auto', "kernel without attention dropout: 'auto' (TPU: 'pallas', GPU: "
                       "'cudnn'), 'xla', 'einsum'", ('auto', 'xla', 'cudnn', 'pallas', 'einsum')),

    'objective': Field('electra', "'electra', 'mlm' (BERT's baseline) or an ablation: "
                       "'electra_15', 'replace_mlm', 'all_tokens_mlm', 'electric'",
                       ('electra', 'mlm', 'electra_15', 'replace_mlm', 'all_tokens_mlm',
                        'electric')),
    'mask_prob': Field(0.15, 'share of tokens to predict (0.25 for large)', '(0, 1)'),
    'masking': Field('token', "what is selected: 'token' (the paper's), 'whole_word' or 'span'",
                     ('token', 'whole_word', 'span')),
    # How the generator is made and trained, and what each mode needs beside it.
    'generator_kind': Field(
        'joint', "'joint' (the paper's: trained with the discriminator), 'two_stage' (alone "
        "first, for two_stage_steps), 'frozen' (a pretrained masked LM, generator_init) or "
        "'unigram' (no network: the data's unigram distribution)",
        ('joint', 'two_stage', 'frozen', 'unigram')),
    'two_stage_steps': Field(0, "two_stage: the generator's steps alone, before the "
                             'discriminator starts from its weights', RATE),
    'generator_init': Field('', 'frozen: an MLM or ELECTRA run\'s workdir, or a Hugging Face '
                            'ElectraForMaskedLM or BertForMaskedLM directory; its shape and '
                            'vocabulary are the run\'s generator\'s'),
    'temperature': Field(1.0, 'replacements are sampled from softmax(logits / temperature)',
                         SIZE),
    'temperature_start': Field(0.0, '> 0: sample at this at step 0, moving linearly to '
                               '`temperature` (Fast-ELECTRA\'s annealing)', RATE),
    'sampler': Field('categorical', "or 'inverse_cdf': the same distribution, faster on a CPU",
                     ('categorical', 'inverse_cdf')),
    'gen_weight': Field(1.0, 'loss = gen_weight * MLM + disc_weight * RTD', RATE),
    'disc_weight': Field(50.0, 'ELECTRA and electra_15 (the MLM ablations weigh their MLM 1.0)',
                         RATE),
    'copy_weight': Field(1.0, "all_tokens_mlm: weight of the copy probability's own loss"),
    'embedding_sharing': Field(
        'shared', "joint: 'shared' (the paper's), 'none', 'all' or 'gdes' (DeBERTa-v3's); the "
        "other modes own their generator's weights ('none')", ('shared', 'gdes', 'none', 'all')),

    'learning_rate': Field(5e-4, 'AdamW as the original: peak of warmup x linear decay from '
                           'step 0', SIZE),
    'warmup_steps': Field(10_000, 'steps of linear warmup', RATE),
    'weight_decay': Field(0.01, 'decoupled; not applied to LayerNorm parameters or biases', RATE),
    'embedding_weight_decay': Field(None, "the embeddings' rate; None: weight_decay", RATE),
    'adam_b1': Field(0.9, "Adam's first-moment decay", SHARE),
    'adam_b2': Field(0.999, "Adam's second-moment decay", SHARE),
    'adam_eps': Field(1e-6, "Adam's epsilon", RATE),
    'adam_bias_correction': Field(False, "False reproduces the original's Adam exactly"),
    'max_grad_norm': Field(1.0, 'global-norm gradient clipping', SIZE),

    'log_every': Field(100, 'logging, evaluation and checkpoints count in steps', COUNT),
    'eval_every': Field(1000, '0 disables evaluation', RATE),
    'eval_steps': Field(10, 'batches of data.eval_files per evaluation', COUNT),
    'save_every': Field(5000, 'steps between checkpoints', COUNT),
    'keep_checkpoints': Field(3, 'the most recent N checkpoints are kept', COUNT),
    'checkpoint_fallback': Field(False, 'True: move a damaged latest checkpoint aside and resume '
                                 'before it'),
    'compilation_cache_dir': Field('', "'' = $JAX_COMPILATION_CACHE_DIR or "
                                   '<workdir>/compilation_cache'),
    'stall_check_after': Field(1000, "from this step, warn if the discriminator's AUC is < "
                               '0.55; 0 = off', RATE),
    'on_nonfinite': Field('stop', "a NaN/Inf step is never applied; 'stop' the run or 'skip' "
                          'the batch', ('stop', 'skip')),
    'max_consecutive_skips': Field(10, "'skip': stop after this many non-finite steps in a row",
                                   COUNT),

    'model.vocab_size': Field(30522, "must equal the vocabulary's size (trained or given)",
                              COUNT),
    'model.embedding_size': Field(128, 'E: width of the shared embedding block', COUNT),
    'model.hidden_size': Field(256, 'H: discriminator width', COUNT),
    'model.num_layers': Field(12, "the discriminator's (and by default the generator's) depth",
                              COUNT),
    'model.num_heads': Field(4, 'attention heads of the discriminator', COUNT),
    'model.intermediate_size': Field(1024, "the discriminator's FFN width", COUNT),
    'model.generator_hidden_size': Field(0.25, 'fraction of hidden_size (or a width if > 1)',
                                         SIZE),
    'model.generator_layers': Field(1.0, 'fraction of num_layers (or a count if > 1); 1.0 in the '
                                    'paper', SIZE),
    'model.max_position_embeddings': Field(512, 'longest sequence the position table holds',
                                           COUNT),
    'model.type_vocab_size': Field(2, 'segment (token type) ids', COUNT),
    'model.dropout_rate': Field(0.1, 'hidden dropout', SHARE),
    'model.attention_dropout_rate': Field(0.1, 'attention-probability dropout', SHARE),
    'model.architecture': Field('bert', "'bert': the paper's post-LayerNorm BERT; 'modern': "
                                "ModernBERT's pre-norm, bias-free RoPE/GeGLU encoder",
                                ('bert', 'modern')),
    'model.local_window': Field(128, "'modern': keys a local layer sees, local_window // 2 either "
                                'side', COUNT),
    'model.global_every': Field(3, "'modern': layers 0, n, 2n, ... attend globally, the others "
                                'locally', COUNT),
    'model.rope_theta': Field(160_000.0, "'modern': RoPE base of the global layers", SIZE),
    'model.local_rope_theta': Field(10_000.0, "'modern': RoPE base of the local layers", SIZE),

    'data.train_files': Field('', 'comma-separated paths or globs of UTF-8 text files'),
    'data.eval_files': Field('', "same, for evaluation ('' = no evaluation)"),
    'data.sources': Field('', "instead of train_files: 'tfds:NAME[/CONFIG][:SPLIT[:FEATURE]]', "
                          "'hf:NAME_OR_PATH[/CONFIG][:SPLIT]' or file globs; '@WEIGHT' mixes"),
    'data.eval_sources': Field('', 'same, for evaluation, instead of eval_files'),
    'data.tfds_data_dir': Field('', "TFDS data_dir (local or gs://); '' = TFDS's default"),
    'data.text_field': Field('text', 'the field of each JSON lines record, parquet row or hf: row '
                             'that holds the document'),
    'data.text_format': Field('auto', "'lines', 'gutenberg', 'wikiextractor', 'wikitext'; 'auto' "
                              'per file'),
    'data.packing': Field('auto', "'original' (what does not fit is dropped), 'fill', "
                          "'documents' (with document_attention) or 'auto'"),
    'data.document_attention': Field(False, "each token attends only to its own document's "
                                     "tokens; packs with 'documents' (whole documents, no pairs)"),
    'data.prepared_dir': Field('', "the output of `python -m electra_jax.prepare`; '' = into "
                               'local_dir'),
    'data.local_dir': Field('', "local disk for prepared data; '' = <workdir>/data (gs://: a "
                            'cache)'),
    'data.prepare_workers': Field(0, 'processes that prepare data; 0 = one per CPU core', RATE),
    'data.prefetch_batches': Field(2, 'batches made ahead in a background thread (0 = none)',
                                   RATE),
    'data.vocab_model': Field('', "a sentencepiece .model, WordPiece vocab.txt or tokenizer.json "
                              "(or a directory holding one); '' = train one"),
    'data.vocab_type': Field('sentencepiece', "what a vocabulary is trained as: 'sentencepiece' "
                             "(unigram), 'bpe' (byte-level, RoBERTa's) or 'wordpiece' (BERT's)",
                             ('sentencepiece', 'bpe', 'wordpiece')),
    'data.vocab_sample_sentences': Field(1_000_000, 'lines sampled to train the vocabulary',
                                         COUNT),
    'data.vocab_lowercase': Field(False, "train an uncased vocabulary (ELECTRA's and BERT's are "
                                  'uncased)'),
}


def default_config() -> ml_collections.ConfigDict:
  """FIELDS as a config: every field at its default."""
  tree = {}
  for name, field in FIELDS.items():
    *parents, leaf = name.split('.')
    node = tree
    for parent in parents:
      node = node.setdefault(parent, {})
    # A None default is a float left unset (embedding_weight_decay): typed, so flags can set it.
    node[leaf] = config_dict.placeholder(float) if field.default is None else field.default
  return ml_collections.ConfigDict(tree)


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
  """Raises UsageError, naming the closest field, for a `--config.a.b=...` the config lacks
  (ml_collections raises a bare AttributeError deep in flag parsing)."""
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


def within(value: float, interval: str) -> bool:
  """Whether `value` lies in `interval` ('[a, b]', '(a, b)' or mixed; 'inf' for no bound)."""
  low, high = (float(end) for end in interval[1:-1].split(','))
  above = value >= low if interval[0] == '[' else value > low
  below = value <= high if interval[-1] == ']' else value < high
  return above and below  # NaN compares False: refused


def check_allowed(config, allowed: dict[str, str | tuple]):
  """Raises UsageError for the first field of `allowed` (dotted name -> an interval or choices,
  as FIELDS writes them) whose value in `config` lies outside it. A value left unset (None), and
  a field this config has not (fine-tuning's configs differ by task family), are skipped."""
  for name, what in allowed.items():
    try:
      value = config[name]
    except KeyError:
      continue
    if not what or value is None:
      continue
    if isinstance(what, tuple):
      if value not in what:
        raise UsageError(f"config.{name}={value!r}: use one of {', '.join(what)}")
    elif not within(float(value), what):
      raise UsageError(f'config.{name}={value}: use a value in {what}')


def allowed(*names: str) -> dict[str, str | tuple]:
  """What FIELDS allows of each of `names` (all fields without names)."""
  return {name: FIELDS[name].allowed for name in names or FIELDS}


def resolve(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A copy of `config` in today's spelling: generator_kind 'mlm' is 'joint', and a run that
  names only what a mode needs (generator_init, two_stage_steps, as runs did before the mode
  existed) is in that mode. A two-stage or frozen generator owns its weights, so its
  embedding_sharing is 'none'."""
  config = config.copy_and_resolve_references()
  if config.generator_kind == 'mlm':
    config.generator_kind = 'joint'
  if config.generator_kind == 'joint' and config.generator_init:
    config.generator_kind = 'frozen'
  if config.generator_kind == 'joint' and config.two_stage_steps:
    config.generator_kind = 'two_stage'
  if config.generator_kind in ('two_stage', 'frozen'):
    if config.embedding_sharing not in ('shared', 'none'):
      raise UsageError(
          f'config.embedding_sharing={config.embedding_sharing!r} ties generator weights to the '
          f"discriminator's, and a {config.generator_kind} generator owns all of its own; leave "
          'embedding_sharing unset')
    config.embedding_sharing = 'none'
  return config


def upgrade(saved: dict) -> ml_collections.ConfigDict:
  """A config.json written by any version as today's config: fields it lacks take their
  defaults (the value runs had before the field existed), then `resolve`."""
  config = default_config()
  known = flat_fields(config.to_dict())
  config.update_from_flattened_dict({name: value for name, value in flat_fields(saved).items()
                                     if name in known})  # a retired field is dropped
  return resolve(config)


def read_saved(directory: str) -> ml_collections.ConfigDict | None:
  """The upgraded config.json of the run in `directory`, or None where it has none."""
  path = os.path.join(directory, 'config.json')
  return upgrade(read_json_object(path)) if storage.exists(path) else None


def read_json_object(path: str) -> dict:
  """The JSON object in the file at `path`; anything else is one UsageError naming the file."""
  try:
    value = json.loads(storage.read_text(path))
  except (OSError, ValueError) as e:
    raise UsageError(f"cannot read '{path}' ({e}); it must be a JSON object") from None
  if not isinstance(value, dict):
    raise UsageError(f"'{path}' is not a JSON object")
  return value


# Switches that change what a checkpoint's numbers mean.
RUN_IDENTITY = ('objective', 'rng_impl', 'embedding_sharing', 'generator_kind', 'two_stage_steps',
                'generator_init')


EXTENDABLE = ('rope_theta', 'local_rope_theta', 'max_position_embeddings')


def check_workdir_config(config: ml_collections.ConfigDict, workdir: str):
  """Refuses a workdir whose saved run has a different model, before anything is written there."""
  saved = read_saved(workdir)
  if saved is None:
    return
  for field in RUN_IDENTITY:
    if saved[field] != config[field]:
      raise UsageError(f'{workdir} holds a run with {field} {saved[field]!r}, not '
                       f'{config[field]!r}; use a new --workdir or --config.{field}={saved[field]}')
  # A modern run's RoPE bases and declared length shape no tensor: context extension changes them.
  extendable = EXTENDABLE if config.model.architecture == 'modern' else ()
  changed = {k: (saved.model[k], v) for k, v in config.model.items()
             if saved.model[k] != v and k not in extendable}
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
  """Keeps config.json as config.until-<step>.json when a run resumes at `step` with other
  settings, so the workdir still says how its first steps were trained; returns the changes
  ('field: old -> new'). A file already kept for this step stays: it describes the steps that
  were checkpointed, a later attempt's config.json none."""
  path = os.path.join(workdir, 'config.json')
  if not storage.exists(path):
    return []
  # A field added since the run was saved counts as its default there: only a value the run
  # did not have is a change.
  saved = flat_fields(read_saved(workdir).to_dict())
  now = flat_fields(config.to_dict())
  changes = [f'{k}: {saved[k]!r} -> {now[k]!r}' for k in sorted(now)
             if k in saved and saved[k] != now[k]]
  kept = os.path.join(workdir, f'config.until-{step}.json')
  if changes and not storage.exists(kept):
    storage.write_text(kept, storage.read_text(path))
  return changes


def save_config(config: ml_collections.ConfigDict, workdir: str):
  """Writes the resolved config as <workdir>/config.json (atomically)."""
  storage.write_text(os.path.join(workdir, 'config.json'), config.to_json(indent=2))


# How fields go together: each mistake is refused with one UsageError naming the field, its
# value and a fix, before anything runs.

def generator_width(config: Any) -> int:
  """Hidden width of the generator: a fraction of the discriminator's (an int is taken as is)."""
  size = config.generator_hidden_size
  return int(size) if size > 1 else int(round(config.hidden_size * size))


def generator_depth(config: Any) -> int:
  """Layers of the generator: a fraction of the discriminator's (> 1: the count), at least 1."""
  depth = config.generator_layers
  return int(depth) if depth > 1 else max(1, int(round(config.num_layers * depth)))


# The objectives with a generator network that a generator mode other than 'joint' can replace.
GENERATOR_OBJECTIVES = {'joint': tuple(FIELDS['objective'].allowed),
                        'two_stage': ('electra',), 'frozen': ('electra', 'electra_15'),
                        'unigram': ('electra',)}


def check_modern(m: ml_collections.ConfigDict):
  """The modern design has no embedding projection: the word table, the generator and the
  discriminator are one width; RoPE rotates pairs of a head's dimensions."""
  width = generator_width(m)
  if m.embedding_size != m.hidden_size or width != m.hidden_size:
    raise UsageError(
        f"config.model.architecture='modern' has no embedding projection, so embedding_size "
        f'({m.embedding_size}) and the generator ({width} wide) must be hidden_size '
        f'({m.hidden_size}) wide; set --config.model.embedding_size={m.hidden_size} '
        '--config.model.generator_hidden_size=1.0 and size the generator by '
        'model.generator_layers')
  if (m.hidden_size // m.num_heads) % 2:
    raise UsageError(f'config.model: heads of {m.hidden_size // m.num_heads} dimensions are odd, '
                     "and 'modern''s RoPE rotates pairs of them; choose num_heads so that "
                     'hidden_size / num_heads is even')


def generator_heads_and_ffn(m) -> tuple[int, int]:
  """The generator's heads and FFN width: the original's 64-wide heads and 4x FFN for
  'bert'; for 'modern' (as wide as the discriminator) the discriminator's."""
  if m.architecture == 'modern':
    return m.num_heads, m.intermediate_size
  width = generator_width(m)
  return max(1, width // 64), 4 * width


def check_generator_is_discriminator_sized(m: ml_collections.ConfigDict, why: str):
  """For settings where the generator's weights are the discriminator's (`why` says which):
  their encoders must have one shape (generator_heads_and_ffn says the generator's)."""
  generator = (generator_width(m), *generator_heads_and_ffn(m), generator_depth(m))
  discriminator = (m.hidden_size, m.num_heads, m.intermediate_size, m.num_layers)
  if generator != discriminator:
    raise UsageError(
        f'{why}, so the two must have one shape; the generator would have (width, heads, FFN, '
        f'layers) {generator}, the discriminator {discriminator}. Set '
        '--config.model.generator_hidden_size=1.0 and generator_layers=1.0, on a discriminator '
        'with 64-wide heads and an FFN 4x its width (hidden_size = 64 * num_heads = '
        'intermediate_size / 4)')


def check_generator(config: ml_collections.ConfigDict):
  """The generator mode (config.generator_kind) fits the objective and has what it needs."""
  kind = config.generator_kind
  if config.objective not in GENERATOR_OBJECTIVES[kind]:
    raise UsageError(f"config.generator_kind='{kind}' applies to objective "
                     f"{' or '.join(GENERATOR_OBJECTIVES[kind])}, not {config.objective!r}; pass "
                     '--config.objective=electra')
  if config.embedding_sharing != 'shared' and config.objective not in ('electra', 'electra_15'):
    raise UsageError(f'config.embedding_sharing={config.embedding_sharing!r} applies to '
                     f"objectives electra and electra_15, not {config.objective!r}; leave it "
                     "'shared'")
  if kind != 'unigram' and config.embedding_sharing == 'all':
    check_generator_is_discriminator_sized(
        config.model, "config.embedding_sharing='all' ties every generator weight to the "
        "discriminator's")
  if kind == 'unigram' and config.embedding_sharing != 'shared':
    raise UsageError("config.generator_kind='unigram' has no generator network to share with; "
                     f'leave embedding_sharing unset, not {config.embedding_sharing!r}')
  steps = config.two_stage_steps
  if (kind == 'two_stage') != (steps > 0):
    raise UsageError(f"config.two_stage_steps={steps} with generator_kind='{kind}': set both "
                     "generator_kind='two_stage' and two_stage_steps > 0, or neither")
  if kind == 'two_stage':
    check_generator_is_discriminator_sized(
        config.model, f'config.two_stage_steps={steps} initialises the discriminator with the '
        "generator's weights")
    if steps >= config.num_train_steps:
      raise UsageError(f'config.two_stage_steps={steps} must be below '
                       f'num_train_steps={config.num_train_steps}, so that both stages run')
  directory = config.generator_init
  if (kind == 'frozen') != bool(directory):
    raise UsageError(f"config.generator_init='{directory}' with generator_kind='{kind}': a "
                     "frozen generator (generator_kind='frozen') is read from generator_init, "
                     'the one needs the other')
  if kind == 'frozen':
    what = f"config.generator_init='{directory}' (a frozen generator)"
    if storage.is_uri(directory):
      raise UsageError(f'{what} is not a local path; copy it to local disk (gcloud storage cp '
                       '-r) and name that directory')
    if not os.path.isdir(directory):
      raise UsageError(f'{what} does not exist or is not a directory; pass the workdir of an '
                       'mlm or electra run, or a Hugging Face ElectraForMaskedLM or '
                       'BertForMaskedLM directory')
  if config.temperature_start > 0 and (config.objective == 'mlm' or kind == 'unigram'):
    raise UsageError(f'config.temperature_start={config.temperature_start} schedules the '
                     'temperature at which a generator network samples, and this run has none '
                     f"(objective {config.objective!r}, generator_kind {kind!r}); leave "
                     'temperature_start at 0')


def validate(config: ml_collections.ConfigDict, num_devices: int):
  """`config` (resolved, resolve) is one that can run on `num_devices` devices."""
  check_allowed(config, allowed())  # first: the checks below divide by them
  m = config.model
  check_generator(config)
  if m.hidden_size % m.num_heads:
    raise UsageError(f'config.model.hidden_size={m.hidden_size} is not divisible by '
                     f'num_heads={m.num_heads}')
  if config.max_seq_length > m.max_position_embeddings:
    raise UsageError(f'config.max_seq_length={config.max_seq_length} exceeds '
                     f'model.max_position_embeddings={m.max_position_embeddings}' + (
                         "; the 'bert' network's position table ends there: raise it, or use "
                         '--config.model.architecture=modern (RoPE)' if m.architecture == 'bert'
                         else ', the longest sequence the exported model declares; raise it'))
  if m.architecture == 'modern':
    check_modern(m)
  if config.batch_size % num_devices:
    raise UsageError(f'config.batch_size={config.batch_size} is not divisible by the '
                     f'{num_devices} devices; use a multiple of {num_devices}')
  if (config.batch_size // num_devices) % config.grad_accum_steps:
    raise UsageError(f'config.grad_accum_steps={config.grad_accum_steps} must divide the '
                     f'per-device batch ({config.batch_size} / {num_devices} devices)')
  data = config.data
  if not (data.train_files or data.sources or data.prepared_dir):
    raise UsageError('config.data.train_files is empty: pass --config.data.train_files=PATH_OR_GLOB'
                     ' (or --config.data.sources=..., or --config.data.prepared_dir=DIR)')
  if sum(map(bool, (data.train_files, data.sources, data.prepared_dir))) > 1:
    raise UsageError('set only one of config.data.train_files, data.sources and '
                     'data.prepared_dir: they all name the training data')
  if (data.document_attention and data.packing not in ('auto', 'documents')) or (
      data.packing == 'documents' and not data.document_attention):
    raise UsageError(f"config.data.packing={data.packing!r} with document_attention="
                     f"{data.document_attention}: packing 'documents' (or 'auto') keeps the "
                     'document ids that document_attention reads; set both or neither')
  if data.vocab_model and data.vocab_type != 'sentencepiece':
    raise UsageError(f'config.data.vocab_type={data.vocab_type!r} trains a vocabulary, and '
                     f"data.vocab_model='{data.vocab_model}' names one to use; drop one of them")
