"""ELECTRA-Small as in the paper: 14M-parameter discriminator, generator 1/4 of its width.

python -m electra_jax.main --config=configs/small.py --workdir=runs/small \
    --config.data.train_files='corpus/*.txt'
"""

from electra_jax.common.config import default_config


def get_config():
  c = default_config()  # the defaults are ELECTRA-Small's hyperparameters
  c.dtype = 'bfloat16'
  return c
