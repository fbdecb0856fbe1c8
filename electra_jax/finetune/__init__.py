"""Fine-tuning a pretrained discriminator (python -m electra_jax.finetune): the shared loop, and
one folder per task family. docs/layout.md names each module's job.
"""
