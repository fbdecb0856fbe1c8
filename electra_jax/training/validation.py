"""Checks that a pretraining config's values fit together, before anything runs.

Each field's own range or choices are common/config.py's FIELDS; what is checked here is how
fields go together. Each mistake is refused with one UsageError naming the field, its value and
a fix.
"""

import os

import ml_collections

from electra_jax.common import config as config_lib, storage
from electra_jax.common.errors import UsageError
from electra_jax.model import networks as model_lib

# The objectives with a generator network that a generator mode other than 'joint' can replace.
GENERATOR_OBJECTIVES = {'joint': tuple(config_lib.FIELDS['objective'].allowed),
                        'two_stage': ('electra',), 'frozen': ('electra', 'electra_15'),
                        'unigram': ('electra',)}


def check_generator_is_discriminator_sized(m: ml_collections.ConfigDict, why: str):
  """For settings where the generator's weights are the discriminator's (`why` says which):
  their encoders must have one shape. The generator's is generator_width wide with 64-wide heads
  and a 4x FFN (model.generator_encoder), so the discriminator must be shaped that way too."""
  width = model_lib.generator_width(m)
  generator = (width, max(1, width // 64), 4 * width, model_lib.generator_depth(m))
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
  """`config` (resolved, config_lib.resolve) is one that can run on `num_devices` devices."""
  config_lib.check_allowed(config, config_lib.allowed())  # first: the checks below divide by them
  m = config.model
  check_generator(config)
  if m.hidden_size % m.num_heads:
    raise UsageError(f'config.model.hidden_size={m.hidden_size} is not divisible by '
                     f'num_heads={m.num_heads}')
  if config.max_seq_length > m.max_position_embeddings:
    raise UsageError(f'config.max_seq_length={config.max_seq_length} exceeds '
                     f'model.max_position_embeddings={m.max_position_embeddings}')
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
