"""Checks that a pretraining config's values fit together, before anything runs.

Each mistake is refused with one UsageError naming the field, its value and a fix; numeric
fields outside the interval where they mean something go through common/bounds.py.
"""

import os

import ml_collections

from electra_jax import objective
from electra_jax.common import bounds, storage
from electra_jax.model import networks as model_lib
from electra_jax.common.errors import UsageError
from electra_jax.model.layers import ATTENTION_IMPLEMENTATIONS
from electra_jax.model.networks import EMBEDDING_SHARING
from electra_jax.objective import masking
from electra_jax.training import nonfinite

RNG_IMPLEMENTATIONS = ('threefry2x32', 'rbg', 'unsafe_rbg')
GENERATOR_KINDS = ('mlm', 'unigram')


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


def check_temperatures(config: ml_collections.ConfigDict):
  """The sampling temperature and its schedule (config.temperature_start) are usable."""
  if not config.temperature > 0:
    raise UsageError(f'config.temperature={config.temperature}: replacements are sampled from '
                     'softmax(logits / temperature), so it must be > 0 (the paper samples at 1.0)')
  start = config.get('temperature_start', 0.0)
  if start < 0:
    raise UsageError(f'config.temperature_start={start}: use 0 (no schedule: every step samples '
                     'at config.temperature) or a temperature > 0 to start from')
  if start > 0 and (config.objective == 'mlm' or config.get('generator_kind', 'mlm') == 'unigram'):
    raise UsageError(f'config.temperature_start={start} schedules the temperature at which a '
                     'generator network samples, and this run has none (objective '
                     f"{config.objective!r}, generator_kind {config.get('generator_kind', 'mlm')!r}"
                     '); leave temperature_start at 0')


# Why a frozen generator (config.generator_init) needs embedding_sharing='none', by mode.
TIED_TO_THE_GENERATOR = {
    'shared': 'both networks read one embedding block',
    'gdes': "the discriminator's word table is the generator's plus a delta",
    'all': 'the two networks share their encoder and embeddings',
}


def check_generator_init(config: ml_collections.ConfigDict):
  """A frozen generator needs an ELECTRA run whose generator owns all its weights."""
  directory = config.get('generator_init', '')
  if not directory:
    return
  what = f"config.generator_init='{directory}' (a frozen generator)"
  if config.objective not in ('electra', 'electra_15'):
    raise UsageError(f'{what} replaces the generator of objectives electra and electra_15, not '
                     f'{config.objective!r}; pass --config.objective=electra')
  sharing = config.get('embedding_sharing', 'shared')
  if sharing != 'none':
    raise UsageError(
        f"{what} needs --config.embedding_sharing=none, not {sharing!r}: under {sharing!r} "
        f'{TIED_TO_THE_GENERATOR[sharing]}, so the discriminator would train weights of the '
        'generator, and that takes a generator trained with it')
  if config.get('two_stage_steps', 0):
    raise UsageError(f'{what} is never trained, and config.two_stage_steps='
                     f'{config.two_stage_steps} trains the generator first; drop one of them')
  if config.get('generator_kind', 'mlm') != 'mlm':
    raise UsageError(f"{what} is a generator network, and config.generator_kind="
                     f"{config.generator_kind!r} has none; leave generator_kind 'mlm'")
  if storage.is_uri(directory):
    raise UsageError(f'{what} is not a local path; copy it to local disk (gcloud storage cp -r) '
                     'and name that directory')
  if not os.path.isdir(directory):
    raise UsageError(f'{what} does not exist or is not a directory; pass the workdir of an mlm '
                     'or electra run, or a Hugging Face ElectraForMaskedLM or BertForMaskedLM '
                     'directory')


def validate(config: ml_collections.ConfigDict, num_devices: int):
  bounds.check(config, bounds.PRETRAINING_COUNTS)  # first: the checks below divide by them
  m = config.model
  if config.objective not in objective.OBJECTIVES:
    raise UsageError(f'config.objective={config.objective!r}: use one of '
                     f"{', '.join(objective.OBJECTIVES)}")
  sharing = config.get('embedding_sharing', 'shared')
  if sharing not in EMBEDDING_SHARING:
    raise UsageError(f'config.embedding_sharing={sharing!r}: use one of '
                     f"{', '.join(EMBEDDING_SHARING)}")
  if sharing != 'shared' and config.objective not in ('electra', 'electra_15'):
    raise UsageError(f'config.embedding_sharing={sharing!r} applies to objectives electra and '
                     f"electra_15, not {config.objective!r}; leave it 'shared'")
  check_generator_init(config)
  if sharing == 'all':
    check_generator_is_discriminator_sized(
        m, "config.embedding_sharing='all' ties every generator weight to the discriminator's")
  kind = config.get('generator_kind', 'mlm')
  if kind not in GENERATOR_KINDS:
    raise UsageError(f'config.generator_kind={kind!r}: use one of {", ".join(GENERATOR_KINDS)}')
  if kind == 'unigram' and (config.objective != 'electra' or sharing != 'shared'
                            or config.get('two_stage_steps', 0)):
    raise UsageError(
        "config.generator_kind='unigram' replaces ELECTRA's generator network by the data's "
        'unigram distribution: it needs --config.objective=electra (not '
        f'{config.objective!r}), embedding_sharing=shared (not {sharing!r}) and no '
        'two_stage_steps, which all set up a generator network')
  two_stage_steps = config.get('two_stage_steps', 0)
  if two_stage_steps:
    if config.objective != 'electra' or sharing != 'none':
      raise UsageError(
          f'config.two_stage_steps={two_stage_steps} trains the generator, then a discriminator '
          'initialised from it, each with weights of its own: it needs --config.objective=electra '
          f'(not {config.objective!r}) and --config.embedding_sharing=none (not {sharing!r})')
    check_generator_is_discriminator_sized(
        m, f'config.two_stage_steps={two_stage_steps} initialises the discriminator with the '
        "generator's weights")
    if not 0 < two_stage_steps < config.num_train_steps:
      raise UsageError(f'config.two_stage_steps={two_stage_steps} must be between 0 and '
                       f'num_train_steps={config.num_train_steps}, so that both stages run')
  check_temperatures(config)
  if config.get('masking', 'token') not in masking.SELECTIONS:
    raise UsageError(f'config.masking={config.masking!r}: use one of '
                     f"{', '.join(masking.SELECTIONS)}")
  if config.dtype not in ('float32', 'bfloat16'):
    raise UsageError(f"config.dtype={config.dtype!r}: use 'float32' or 'bfloat16'")
  if config.get('sampler', 'categorical') not in masking.SAMPLERS:
    raise UsageError(f'config.sampler={config.sampler!r}: use one of {", ".join(masking.SAMPLERS)}')
  if config.get('rng_impl', 'threefry2x32') not in RNG_IMPLEMENTATIONS:
    raise UsageError(f'config.rng_impl={config.rng_impl!r}: use one of '
                     f"{', '.join(RNG_IMPLEMENTATIONS)}")
  if config.attention not in ATTENTION_IMPLEMENTATIONS:
    raise UsageError(f'config.attention={config.attention!r}: use one of '
                     f"{', '.join(ATTENTION_IMPLEMENTATIONS)}")
  if m.hidden_size % m.num_heads:
    raise UsageError(f'config.model.hidden_size={m.hidden_size} is not divisible by '
                     f'num_heads={m.num_heads}')
  if config.max_seq_length > m.max_position_embeddings:
    raise UsageError(f'config.max_seq_length={config.max_seq_length} exceeds '
                     f'model.max_position_embeddings={m.max_position_embeddings}')
  if config.batch_size % num_devices:
    raise UsageError(f'config.batch_size={config.batch_size} is not divisible by the '
                     f'{num_devices} devices; use a multiple of {num_devices}')
  if config.grad_accum_steps < 1 or (config.batch_size // num_devices) % config.grad_accum_steps:
    raise UsageError(f'config.grad_accum_steps={config.grad_accum_steps} must divide the '
                     f'per-device batch ({config.batch_size} / {num_devices} devices)')
  data = config.data
  if not (data.train_files or data.sources or data.prepared_dir):
    raise UsageError('config.data.train_files is empty: pass --config.data.train_files=PATH_OR_GLOB'
                     ' (or --config.data.sources=..., or --config.data.prepared_dir=DIR)')
  if sum(map(bool, (data.train_files, data.sources, data.prepared_dir))) > 1:
    raise UsageError('set only one of config.data.train_files, data.sources and '
                     'data.prepared_dir: they all name the training data')
  bounds.check(config, {**bounds.OPTIMIZER, **bounds.PRETRAINING})
  nonfinite.validate(config)
