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
  # How random bits are made (masks, samples, dropout, initialisation): 'threefry2x32' (JAX's
  # default), 'rbg' or 'unsafe_rbg'. Threefry is a counter-based hash in ordinary integer ops:
  # with sharded arrays every device computes exactly its share of the same bits, so a run's
  # numbers do not depend on the device count or the backend (tests/test_train.py: 4 devices
  # against 1). But it is many integer ops per 32 random bits. 'rbg' draws bits
  # with XLA's RngBitGenerator, which TPUs compute in hardware (MaxText uses it for dropout).
  # Trade-offs (jax.random's module doc has the table): rbg's bits are another stream, and differ
  # between CPU, GPU and TPU; under vmap over keys (the per-sequence sampling keys) the whole
  # batch is drawn from the first key. By default rbg stays identical across shardings (on CPU
  # 4 devices reproduce 1: tests/test_rng_impl.py) because each device generates the whole
  # global array and keeps its slice: work that grows with the device count (small compiled
  # for a v4-8: 4x the words, temporaries 0.78 GB per chip under threefry, 1.53 GB under rbg).
  # LIBTPU_INIT_ARGS=--xla_tpu_spmd_rng_bit_generator_unsafe=true makes TPUs generate only their
  # shard (1.05 GB), and then results depend on the device count; XLA_FLAGS does not know that
  # flag and stops the process. A run warns when it would pay for the whole batch
  # (training/rng.py). Even partitioned, XLA's cost model puts rbg behind threefry
  # (15.6 against 12.8 GB of HBM traffic per step): RngBitGenerator's words go through memory,
  # threefry's are made where they are used; whether a TPU runs rbg faster is not measured
  # (docs/performance.md). 'unsafe_rbg' also derives split/fold_in keys cheaply,
  # with weaker guarantees that the streams are independent. On a CPU rbg is only ~20% cheaper
  # (docs/performance.md). A run resumes only under the rng_impl it was saved with (the key's shape
  # differs: 2 words for threefry, 4 for rbg), which check_workdir_config enforces.
  c.rng_impl = 'threefry2x32'
  c.batch_size = 128           # global batch (sequences per step, summed over all devices)
  c.max_seq_length = 128       # tokens per example, [CLS]/[SEP] included
  c.num_train_steps = 1_000_000
  c.dtype = 'float32'          # computation dtype: 'float32' or 'bfloat16' (parameters stay float32)
  # Memory knobs: they change what is kept in memory, not the result.
  c.grad_accum_steps = 1       # split each batch into this many micro-batches (summed gradients)
  c.remat = False              # recompute each layer's activations in the backward pass
  # Attention kernel where attention dropout is off (eval; or model.attention_dropout_rate=0):
  # 'auto' (cuDNN flash attention on a GPU in bfloat16, else einsum), 'xla', 'cudnn', 'einsum'.
  # Every choice computes the same function; with attention dropout on, the einsum path runs.
  c.attention = 'auto'

  # What is trained: 'electra' (generator + discriminator, the paper's method) or 'mlm' (BERT's
  # masked LM at the discriminator's size, no generator: the baseline), or one of the paper's
  # ablations (Table 5): 'electra_15' (RTD loss at the masked positions only), 'replace_mlm'
  # (generator samples instead of [MASK], MLM at those positions), 'all_tokens_mlm' (Replace MLM
  # predicting every token, with a copy mechanism). See electra_jax/objective.
  c.objective = 'electra'
  c.mask_prob = 0.15           # share of tokens to predict (0.25 for large)
  # Every objective with a generator (all but 'mlm').
  c.temperature = 1.0          # replacements are sampled from softmax(logits / temperature)
  # > 0: a schedule that starts easy. The train step samples at this temperature at step 0 and
  # moves linearly to `temperature` at num_train_steps (hotter samples are easier to tell apart,
  # which keeps a small discriminator learning while its generator is still weak). Evaluation
  # samples at `temperature`, the task the run ends on, so its curve measures one fixed task.
  c.temperature_start = 0.0
  # How they are drawn: 'categorical' (jax.random.categorical: Gumbel noise on every vocabulary
  # entry, then an argmax) or 'inverse_cdf' (one uniform per slot looked up in the cumulative
  # softmax: the same distribution from ~1/V of the random numbers, other draws; on a CPU a 7%
  # faster ELECTRA-Small step, and 1.9 times the tokens/s for mini's tiny network with 32,768
  # pieces, whose step the Gumbel noise dominates; docs/performance.md). See
  # objective/masking.sample_replacements.
  c.sampler = 'categorical'
  c.gen_weight = 1.0           # loss = gen_weight * MLM + disc_weight * RTD
  c.disc_weight = 50.0         # ELECTRA and electra_15 (the MLM ablations weigh their MLM 1.0)
  c.copy_weight = 1.0          # all_tokens_mlm: weight of the copy probability's own loss
  # What the generator shares with the discriminator (ELECTRA, ELECTRA 15%): 'shared' (one
  # embedding block, trained by both losses: the paper's), 'none' (an embedding block each),
  # 'all' (every encoder weight too; a generator of the discriminator's size), or 'gdes'
  # (DeBERTa-v3's gradient-disentangled sharing: the discriminator reads stop_gradient(table) +
  # its own residual table, zero at init). See model.Electra.
  c.embedding_sharing = 'shared'
  # > 0: the paper's two-stage training (section 3.2): the generator alone for this many steps,
  # then the discriminator, initialised from the generator's weights, alone with the generator
  # frozen. Needs embedding_sharing='none' and a generator of the discriminator's size
  # (training/two_stage.py).
  c.two_stage_steps = 0
  # Where ELECTRA's replacements come from: 'mlm' (a small masked LM trained with the
  # discriminator: the paper's generator) or 'unigram' (tokens drawn from the data's unigram
  # distribution, no generator network: the paper's weakest generator, section 3.2 / Figure 3).
  # See objective/unigram.py.
  c.generator_kind = 'mlm'

  # Optimizer (AdamW as the original ran it).
  c.learning_rate = 5e-4       # peak of warmup x linear decay (decay starts at step 0)
  c.warmup_steps = 10_000
  c.weight_decay = 0.01        # decoupled; not applied to LayerNorm parameters or biases
  # Another decoupled rate for the embedding weights (word, position and token-type tables and
  # the embedding projections); None: weight_decay. Pretraining grows these most (mini: word
  # table RMS 0.02 -> 0.09), and weights far above their initial scale fine-tune slower
  # (docs/transfer_study.md, the weight-decay sections).
  c.embedding_weight_decay = config_dict.placeholder(float)
  c.adam_b1 = 0.9
  c.adam_b2 = 0.999
  c.adam_eps = 1e-6
  c.adam_bias_correction = False  # False reproduces the original's Adam exactly
  c.max_grad_norm = 1.0        # global-norm gradient clipping

  # Logging, evaluation, checkpoints (in steps; 0 disables eval).
  c.log_every = 100
  c.eval_every = 1000
  c.eval_steps = 10            # batches of data.eval_files per evaluation
  c.save_every = 5000
  c.keep_checkpoints = 3       # the most recent N checkpoints are kept
  # A latest checkpoint that cannot be read (a truncated or corrupted file: a full disk, a bad
  # copy) stops the run with one error naming it, rather than quietly training again steps
  # that were already done and hiding the damage. True: move it to <workdir>/damaged_checkpoints/
  # (kept, not deleted) and resume from the newest checkpoint that reads, exactly as if the run
  # had been killed right after that one was written.
  c.checkpoint_fallback = False
  # Where XLA's compiled steps are kept, so that a run started again with the same settings
  # (resumed after a preemption or a crash) reads them back instead of compiling: `base`
  # compiles in 308 s for a v4-8. More steps or another learning rate is another program.
  # '' = $JAX_COMPILATION_CACHE_DIR where set, else <workdir>/compilation_cache (it goes where
  # the run goes); a path or gs:// URI; 'none' = off.
  # On a pod slice it belongs on shared storage: process 0 writes, every process reads
  # (training/compile_cache.py).
  c.compilation_cache_dir = ''
  # From this step on (and once warmup is over), an evaluation whose discriminator AUC is under
  # 0.55 logs a warning naming the cause and the fix (training/health.py): a discriminator at
  # chance has stopped learning while its loss curve still looks fine. 0 turns it off.
  c.stall_check_after = 1000

  # A step whose loss, gradients or updated parameters hold a NaN or Inf is never applied
  # (electra_jax/training/nonfinite.py). Then 'stop': at the next log or save the run ends with one error
  # naming that step and the last good checkpoint, and saves nothing after it (hours of
  # training on garbage cost more than a look at the cause). 'skip': training goes on with the
  # next batch, `skipped_steps` is logged, and the run stops once max_consecutive_skips steps
  # in a row were skipped (then the cause is no single bad batch but a broken run).
  c.on_nonfinite = 'stop'
  c.max_consecutive_skips = 10

  c.model = ml_collections.ConfigDict()
  c.model.vocab_size = 30522   # must equal the vocabulary's size (trained or given)
  c.model.embedding_size = 128  # E: width of the shared embedding block
  c.model.hidden_size = 256    # H: discriminator width
  c.model.num_layers = 12      # the discriminator's (and by default the generator's) depth
  c.model.num_heads = 4
  c.model.intermediate_size = 1024
  # Generator width as a fraction of hidden_size (or an absolute width if > 1); its heads are
  # max(1, width // 64) and its FFN 4 x width. ELECTRA only: an 'mlm' run has no generator.
  c.model.generator_hidden_size = 0.25
  # Generator depth as a fraction of num_layers (or a count if > 1): the original's
  # generator_layers. ELECTRA and the MLM ablations; 1.0 in every paper model.
  c.model.generator_layers = 1.0
  c.model.max_position_embeddings = 512
  c.model.type_vocab_size = 2
  c.model.dropout_rate = 0.1
  c.model.attention_dropout_rate = 0.1

  c.data = ml_collections.ConfigDict()
  c.data.train_files = ''      # comma-separated paths or globs of UTF-8 text files
  c.data.eval_files = ''       # same, for evaluation ('' = no evaluation)
  # Instead of train_files: comma-separated sources, each `tfds:NAME[/CONFIG][:SPLIT[:FEATURE]]`
  # (split 'train' and feature 'text' by default) or a path/glob of .txt, .txt.gz, .jsonl or
  # .jsonl.gz files; `@WEIGHT` after every source makes them a weighted mixture (e.g.
  # 'tfds:wikipedia/20230601.en@0.7,books/*.txt@0.3'); without weights they are concatenated.
  c.data.sources = ''
  c.data.eval_sources = ''     # same, for evaluation, instead of eval_files
  c.data.tfds_data_dir = ''    # TFDS data_dir (local or gs://); '' = TFDS's default
  c.data.text_field = 'text'   # the field of each .jsonl record that holds the document
  # How text files (not .jsonl) are read: 'lines' (one sentence or paragraph per line, blank
  # line between documents, as the original's input), 'gutenberg' (a Project Gutenberg book:
  # its body between the START and END lines), 'wikiextractor' (<doc ...> articles),
  # 'wikitext' (WikiText raw: ' = Title = ' articles), or 'auto': detected per file from its
  # first bytes, 'lines' when nothing else matches (each file's format is logged).
  c.data.text_format = 'auto'
  # How documents become examples: 'original' (as build_pretraining_dataset.py: what does not
  # fit is dropped, a document's last example is padded), 'fill' (nothing dropped: the rest
  # starts the next example, a document's last example is completed with the next
  # document), or 'auto': 'fill' for gutenberg, wikiextractor and wikitext files, else
  # 'original'.
  c.data.packing = 'auto'
  # A directory written by `python -m electra_jax.prepare` (train/, optional eval/, vocab);
  # '' = prepare the sources into data.local_dir on first use.
  c.data.prepared_dir = ''
  # The local directory this host prepares data.sources / train_files into and, for a workdir
  # at a URI (gs://), keeps a copy of the run's vocabulary in: memory-mapped examples and the
  # file sentencepiece loads must be on local disk. '' = <workdir>/data for a local workdir,
  # and ~/.cache/electra_jax/<hash of the workdir> for a URI one.
  c.data.local_dir = ''
  c.data.prepare_workers = 0   # processes that prepare data; 0 = one per CPU core
  c.data.prefetch_batches = 2  # batches made ahead in a background thread (0 = none)
  c.data.vocab_model = ''      # a sentencepiece .model or WordPiece vocab.txt; '' = train one
  c.data.vocab_sample_sentences = 1_000_000  # lines sampled to train the vocabulary
  # Train the vocabulary on case-folded text: its normalizer lowercases, so pretraining,
  # fine-tuning and the exported tokenizer all read "The" as "the". ELECTRA's and BERT's English
  # vocabularies are uncased; GLUE's SST-2 comes lowercased. Only a vocabulary trained here.
  c.data.vocab_lowercase = False
  return c


def load_config_file(path: str) -> ml_collections.ConfigDict:
  """Runs a config file's get_config() (the part of PATH before any ':' is the file)."""
  filename = path.split(':')[0]
  if not os.path.isfile(filename):
    raise UsageError(f"config file '{filename}' does not exist; pass e.g. --config=configs/tiny.py")
  spec = importlib.util.spec_from_file_location('electra_jax_run_config', filename)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


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
                         ('two_stage_steps', 0), ('generator_kind', 'mlm')):
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
