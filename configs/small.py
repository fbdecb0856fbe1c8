"""ELECTRA-Small as in the paper: 14M-parameter discriminator, generator 1/4 of its width."""

from electra_jax.common.config import default_config


def get_config():
  c = default_config()  # the defaults are ELECTRA-Small's hyperparameters
  c.dtype = 'bfloat16'
  return c
