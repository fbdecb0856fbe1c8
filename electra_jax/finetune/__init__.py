"""Fine-tuning on GLUE, SQuAD 1.1/2.0 and CoNLL-2000 chunking: data, heads, the loop, results.

Command line: python -m electra_jax.finetune (see __main__.py).
"""
