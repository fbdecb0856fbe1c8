"""electra_jax: ELECTRA pretraining in JAX.

Top-level modules are commands (python -m electra_jax.main, .prepare, ...); the packages are the
library: common/, model/, objective/, data/, training/, hf/, finetune/. docs/layout.md has the map.
"""
