"""The transfer study's CPU-budget recipe: tiny's network, a weaker and hotter generator.

python -m electra_jax.main --config=configs/mini.py --workdir=runs/mini \
    --config.data.sources='../shared/data/pretraining-text/gutenberg/*.txt,../shared/data/pretraining-text/enwiki/*.txt'

For asking, on two CPU cores, whether pretraining learns something fine-tuning can use; too small
for results of its own. Why each value departs from ELECTRA-Small, with its measurement:
research/transfer_study/README.md, "Why configs/mini.py is what it is".
"""

from electra_jax.common.config import default_config


def get_config():
  c = default_config()
  c.batch_size = 16            # 16 x 128 for 15,000 steps: 30.7M tokens, 9.9e13 FLOPs
  c.max_seq_length = 128
  c.num_train_steps = 15000
  c.learning_rate = 1e-3  # 2e-3 collapses the 2-layer discriminator; 5e-4 never leaves the plateau
  c.warmup_steps = 500
  c.temperature = 1.5          # at the paper's 1.0 this small discriminator stalls at AUC ~0.54
  c.log_every = 100
  c.eval_every = 500
  c.eval_steps = 20
  c.save_every = 1500
  c.keep_checkpoints = 4
  c.weight_decay = 0.5         # keeps the layers at their initial scale (the paper: 0.01)
  c.embedding_weight_decay = 0.01  # the paper's: MRPC's gain lives in the grown embeddings
  # tiny's network, with a generator 16 wide (an eighth of the discriminator, the paper a quarter).
  c.model.update(vocab_size=4096, embedding_size=64, hidden_size=128, num_layers=2, num_heads=2,
                 intermediate_size=512, generator_hidden_size=16)
  return c
