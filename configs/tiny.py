"""A model that pretrains in minutes on a laptop CPU: for trying the pipeline, not for results.

python -m electra_jax.main --config=configs/tiny.py --workdir=runs/tiny \
    --config.data.train_files=../shared/data/wikitext-2-raw/wiki.valid.raw
"""

from electra_jax.common.config import default_config


def get_config():
  c = default_config()
  c.batch_size = 32
  c.max_seq_length = 128
  c.num_train_steps = 300
  c.learning_rate = 1e-3       # 2e-3 collapses the 2-layer discriminator to a constant (AUC 0.5)
  c.warmup_steps = 100
  c.log_every = 25
  c.eval_every = 100
  c.eval_steps = 4
  c.save_every = 100
  c.model.update(vocab_size=4096, embedding_size=64, hidden_size=128, num_layers=2, num_heads=2,
                 intermediate_size=512, generator_hidden_size=0.25)
  return c
