"""ELECTRA-Base as in the paper: generator 1/3 of the discriminator's width, 766k steps at 512.

python -m electra_jax.main --config=configs/base.py --workdir=gs://BUCKET/base \
    --config.data.prepared_dir=data/wiki_books      # see docs/data.md and docs/tpu.md
"""

from electra_jax.common.config import default_config


def get_config():
  c = default_config()
  c.dtype = 'bfloat16'
  c.batch_size = 256
  c.max_seq_length = 512
  c.num_train_steps = 766_000
  c.learning_rate = 2e-4
  c.model.update(embedding_size=768, hidden_size=768, num_layers=12, num_heads=12,
                 intermediate_size=3072, generator_hidden_size=1 / 3)
  return c
