"""Fine-tuning on one GLUE task with ELECTRA's recipe (Clark et al. 2020, Appendix).

python -m electra_jax.finetune --config=configs/finetune/glue.py --config.task=MRPC \
    --config.init_from=runs/small --config.data_dir=glue_data --workdir=runs/small-mrpc

Fields at 0 (or 'auto') take the recipe's value for the task and the model size, which is
inferred from the model's width: learning rate 3e-4 small, 1e-4 base, 5e-5 large; layer-wise
decay 0.8 small/base, 0.9 large; 3 epochs, 10 for RTE and STS-B. DIR/config.json records the
resolved numbers.
"""

import ml_collections

from electra_jax.common.config import default_config


def get_config():
  c = ml_collections.ConfigDict()
  c.task = ''                  # CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE or WNLI
  # A pretraining run's workdir (its latest checkpoint), a Hugging Face ELECTRA directory
  # (ElectraForPreTraining), or '' for random initialisation from `model` and `vocab` below.
  c.init_from = ''
  # With init_from a pretraining run: the checkpoint of this step (one the run kept), so that
  # any point of a run can be fine-tuned; 0 = the latest.
  c.init_step = 0
  # Parts of the pretrained encoder to draw afresh from each seed instead, comma-separated:
  # 'embeddings' (all below the first layer) and 'layer_N' (0 = the bottom layer). '' = none.
  # For measuring what a task takes from pretraining, or re-drawing the top layers.
  c.reinit = ''
  # A .npy [vocab_size, embedding_size] table whose nonzero rows replace the word table's (drawn
  # or pretrained), e.g. benchmarks/count_vectors.py's: what word-level knowledge alone is worth.
  c.word_table = ''
  c.seeds = '0'                # comma-separated seeds; each is reported, and the median
  c.size = 'auto'              # 'small', 'base' or 'large' recipe; 'auto' = from hidden_size

  # Data: a local GLUE folder (<data_dir>/<TASK>/{train,dev,test}.tsv), else TFDS glue/<task>.
  c.data_dir = ''
  c.tfds_name = 'glue'         # TFDS dataset; glue/<config> must be prepared in tfds_data_dir
  c.tfds_data_dir = ''         # '' = TFDS's default data_dir
  c.max_seq_length = 128       # [CLS] A [SEP] B [SEP], truncated longest-first
  # Each training batch is cut to its own longest example, rounded up to this multiple: padding
  # gets no attention, so the outputs are the full length's and the step costs what the batch
  # needs (SST-2 at 128: 1.7x faster). One compiled step per distinct length, at most
  # max_seq_length / length_multiple. 0 = every batch at the training set's longest example.
  c.length_multiple = 16
  c.max_train_examples = 0     # > 0: train on this many examples drawn at random (seed 0)
  c.swap_pairs = True          # MRPC, STS-B: also train on each pair as (B, A), as the original
  c.predict_test = True        # write GLUE submission files for the test split(s)

  # The recipe.
  c.learning_rate = 0.0        # peak; 0 = 3e-4 small, 1e-4 base, 5e-5 large
  c.layer_decay = 0.0          # lr x decay^(layers from the top); 0 = 0.8 (0.9 large); 1 = off
  c.num_epochs = 0.0           # 0 = 3 (10 for RTE and STS-B)
  c.batch_size = 32
  c.eval_batch_size = 128
  c.warmup_proportion = 0.1    # linear warmup over this share of the steps, x linear decay
  c.weight_decay = 0.01        # decoupled; not on LayerNorm parameters or biases
  c.head_dropout = 0.1         # on the pooled vector before the head
  # What the head reads: 'cls' (the recipe: the [CLS] vector) or 'mean' (the top layer's mean
  # over the real tokens, as benchmarks/linear_probe.py's 'mean' feature).
  c.pooling = 'cls'
  # The head on it: 'electra' (the recipe: one dense layer, as the original) or 'transformers'
  # (ElectraForSequenceClassification's dense, GELU, dense), which `electra_jax.export` writes
  # as that class, for use and publishing in transformers (docs/finetuning.md).
  c.head = 'electra'
  # The encoder's dropout (hidden and attention) while fine-tuning; -1 = the start's own, i.e.
  # the rates its pretraining ran with (or its Hugging Face config's). Set 0.1 to fine-tune a
  # network pretrained without dropout the way the recipe fine-tunes one pretrained with it.
  c.dropout = -1.0
  c.adam_b1 = 0.9
  c.adam_b2 = 0.999
  c.adam_eps = 1e-6
  c.adam_bias_correction = False  # as the original's optimizer
  c.max_grad_norm = 1.0
  c.dtype = 'float32'          # computation dtype; parameters stay float32
  # Attention kernel where attention dropout is off (evaluation, or a rate of 0): 'auto' is
  # cuDNN flash attention on a GPU in bfloat16, else einsum; 'xla', 'cudnn', 'einsum' force one.
  c.attention = 'auto'
  c.log_every = 100
  # Each seed's training state is saved (Orbax, DIR/checkpoints/seed_<seed>/) every save_every
  # steps and at its end, so the same command run again continues a killed run where its last
  # save left it, and does not train a finished seed again (its scores are recomputed from its
  # final state). 0 = only at the end of each seed.
  # A seed's checkpoint that cannot be read stops the run with one error naming it.
  c.save_every = 500
  # A step whose loss, gradients or new parameters are not finite is never applied; then, as in
  # pretraining (electra_jax/common/config.py), 'stop' ends the run at the next log with one error
  # naming the step, and 'skip' goes on, stopping after max_consecutive_skips in a row.
  c.on_nonfinite = 'stop'
  c.max_consecutive_skips = 10
  # Compiled programs kept on disk, as pretraining's: '' = $JAX_COMPILATION_CACHE_DIR where set,
  # else DIR/compilation_cache (a rerun or resume there reads them back); a path or gs:// URI
  # that several runs share (every start of a task at one decay compiles the same programs);
  # 'none' = off.
  c.compilation_cache_dir = ''

  # Random initialisation only (init_from=''): the model and its vocabulary. With init_from
  # set, both come from there and these are ignored.
  c.model = default_config().model
  c.vocab = ''                 # vocab.model or vocab.txt (also overrides an HF dir's vocabulary)
  return c
