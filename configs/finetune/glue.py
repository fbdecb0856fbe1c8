"""Fine-tuning on one GLUE task with ELECTRA's recipe (Clark et al. 2020, Appendix).

python -m electra_jax.finetune --config=configs/finetune/glue.py --config.task=MRPC \
    --config.init_from=runs/small --config.data_dir=glue_data --workdir=runs/small-mrpc

Fields at 0 (or 'auto') take the recipe's value for the task and the model size, which is
inferred from the model's width: learning rate 3e-4 small, 1e-4 base, 5e-5 large; layer-wise
decay 0.8 small/base, 0.9 large; 3 epochs, 10 for RTE and STS-B. DIR/config.json records the
resolved numbers. Every field in detail: docs/finetuning.md.
"""

import ml_collections

from electra_jax.common.config import default_config


def get_config():
  c = ml_collections.ConfigDict()
  c.task = ''                  # CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE or WNLI
  # A pretraining workdir, a Hugging Face ELECTRA directory, or '' = random init (`model` below).
  c.init_from = ''
  c.init_step = 0              # with a pretraining workdir: the checkpoint of this step; 0 = latest
  # Encoder parts drawn afresh for each seed, e.g. 'embeddings,layer_1' (layer_0: bottom); '' = none
  c.reinit = ''
  c.seeds = '0'                # comma-separated seeds; each is reported, and the median
  c.size = 'auto'              # 'small', 'base' or 'large' recipe; 'auto' = from hidden_size

  c.data_dir = ''              # a local GLUE folder (<TASK>/train.tsv, ...); '' = TFDS glue/<task>
  c.tfds_name = 'glue'         # TFDS dataset; glue/<config> must be prepared in tfds_data_dir
  c.tfds_data_dir = ''         # '' = TFDS's default data_dir
  c.max_seq_length = 128       # [CLS] A [SEP] B [SEP], truncated longest-first
  c.length_multiple = 16       # each batch cut to its longest example, rounded up to this; 0 = off
  c.max_train_examples = 0     # > 0: train on this many examples drawn at random (seed 0)
  c.swap_pairs = True          # MRPC, STS-B: also train on each pair as (B, A), as the original
  c.predict_test = True        # write GLUE submission files for the test split(s)

  c.learning_rate = 0.0        # peak; 0 = 3e-4 small, 1e-4 base, 5e-5 large
  c.layer_decay = 0.0          # lr x decay^(layers from the top); 0 = 0.8 (0.9 large); 1 = off
  c.num_epochs = 0.0           # 0 = 3 (10 for RTE and STS-B)
  c.batch_size = 32
  c.eval_batch_size = 128
  c.warmup_proportion = 0.1    # linear warmup over this share of the steps, x linear decay
  c.weight_decay = 0.01        # decoupled; not on LayerNorm parameters or biases
  c.head_dropout = 0.1         # on the pooled vector before the head
  c.pooling = 'cls'            # what the head reads: 'cls' (the recipe) or the top layer's 'mean'
  # 'electra' (one dense layer, the recipe) or 'transformers' (ElectraForSequenceClassification's).
  c.head = 'electra'
  c.dropout = -1.0             # the encoder's dropout; -1 = the rate the start was pretrained with
  c.adam_b1 = 0.9
  c.adam_b2 = 0.999
  c.adam_eps = 1e-6
  c.adam_bias_correction = False  # as the original's optimizer
  c.max_grad_norm = 1.0
  c.dtype = 'float32'          # computation dtype; parameters stay float32
  c.attention = 'auto'         # kernel without attention dropout: 'auto', 'xla', 'cudnn', 'einsum'
  c.log_every = 100
  c.save_every = 500           # each seed's state is saved, so a rerun resumes; 0 = at its end only
  c.on_nonfinite = 'stop'      # a non-finite step is never applied: 'stop' the run, or 'skip' it
  c.max_consecutive_skips = 10
  c.compilation_cache_dir = ''  # '' = $JAX_COMPILATION_CACHE_DIR or DIR/compilation_cache; 'none'

  c.model = default_config().model  # random init only (init_from=''): the network
  c.vocab = ''                 # vocab.model or vocab.txt (also overrides an HF dir's vocabulary)
  return c
