"""GLUE fine-tuning: tasks, data, the classifier, layer-wise LR decay, the loop, the results.

Command line: python -m electra_jax.finetune (see __main__.py).
"""
