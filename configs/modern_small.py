"""ELECTRA-Small's budget on the modern encoder (architecture='modern'; configs/modern_base.py
says what that is): 12 layers of 256, a generator as wide and half as deep, at 512 tokens.

python -m electra_jax.main --config=configs/modern_small.py --workdir=runs/modern_small \
    --config.data.train_files='corpus/*.txt'
"""

from electra_jax.common.config import default_config


def get_config():
  c = default_config()  # ELECTRA-Small's optimisation: learning rate 5e-4, batch 128
  c.dtype = 'bfloat16'
  c.max_seq_length = 512
  c.embedding_sharing = 'gdes'
  c.model.update(architecture='modern', embedding_size=256, hidden_size=256, num_layers=12,
                 num_heads=4, intermediate_size=384, generator_hidden_size=1.0,
                 generator_layers=0.5, max_position_embeddings=8192, dropout_rate=0.0,
                 attention_dropout_rate=0.0)
  return c
