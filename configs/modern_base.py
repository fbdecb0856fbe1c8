"""ELECTRA's replaced-token detection on ModernBERT-base's encoder (architecture='modern').

The discriminator has ModernBERT-base's shape: 22 pre-norm layers of 768, 12 heads, a GeGLU
feed-forward of 1,152, RoPE, global attention every third layer and 128-token local windows
elsewhere, trained at 1,024 tokens. The generator is as wide and half as deep (DeBERTa-v3's
choice: with no embedding projection it must share the width) and shares the word table by
DeBERTa-v3's gradient-disentangled sharing (gdes). ModernBERT trains without dropout.

python -m electra_jax.main --config=configs/modern_base.py --workdir=gs://BUCKET/modern_base \
    --config.data.prepared_dir=data/corpus      # see docs/data.md and docs/tpu.md
"""

from electra_jax.common.config import default_config


def get_config():
  c = default_config()
  c.dtype = 'bfloat16'
  c.batch_size = 256
  c.max_seq_length = 1024
  c.num_train_steps = 766_000
  c.learning_rate = 2e-4
  c.embedding_sharing = 'gdes'
  c.model.update(architecture='modern', vocab_size=50_368, embedding_size=768, hidden_size=768,
                 num_layers=22, num_heads=12, intermediate_size=1152, generator_hidden_size=1.0,
                 generator_layers=0.5, max_position_embeddings=8192, dropout_rate=0.0,
                 attention_dropout_rate=0.0)
  return c
