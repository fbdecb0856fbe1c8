"""What every command builds on: the run config, the networks, the optimizer, FLOPs, errors.

config.py   the pretraining config (every field, with why it has its default) and config files
cli.py      what every command shares: a user's mistake ends as one `electra_jax: error:` line
errors.py   UsageError, the error a user can fix (printed as one `electra_jax: error:` line)
storage.py  the run directory's files, in a local directory or at a URI (gs://, s3://)
model.py    the pretraining networks in Flax Linen: ELECTRA's pair and BERT's masked LM
optim.py    AdamW with the original's details, warmup and linear decay, layer-wise decay
flops.py    the model FLOPs of a training step, per objective
"""
