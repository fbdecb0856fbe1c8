"""ELECTRA-Large as in the paper: 24 layers, 25% masking, generator 1/4 of the width.

python -m electra_jax.main --config=configs/large.py --workdir=gs://BUCKET/large \
    --config.data.prepared_dir=data/wiki_books      # see docs/data.md and docs/tpu.md
"""

from electra_jax.common.config import default_config


def get_config():
  c = default_config()
  c.dtype = 'bfloat16'
  c.batch_size = 2048
  c.max_seq_length = 512
  c.num_train_steps = 400_000
  c.learning_rate = 2e-4
  c.mask_prob = 0.25
  c.model.update(embedding_size=1024, hidden_size=1024, num_layers=24, num_heads=16,
                 intermediate_size=4096, generator_hidden_size=0.25)
  return c
