"""Fine-tuning a pretrained discriminator: the shared loop, and one folder per task family.

Command line: python -m electra_jax.finetune (see __main__.py).

families.py  which family `config.task` names, and its fine-tuning
settings.py  the config resolved: the paper's recipe filled in for the task and model size
init.py      where fine-tuning starts: a pretraining run, a Hugging Face directory, or nothing
model.py     the encoder every head reads, and fresh parameters for any family's network
optim.py     the recipe's optimizer: layer-wise learning-rate decay over the encoder
loop.py      the shared loop: compiled steps, seeds, checkpoints, predictions, the workdir
results.py   results.json: each seed's scores, the medians, the other families' output files
export.py    a fine-tuned seed -> the transformers class that computes it
aot.py       GLUE's fine-tuning step compiled for a TPU slice (python -m electra_jax.compile)
cpu_threefry.py  threefry's random bits computed the CPU-friendly way
glue/        GLUE: tasks, data, features, the classifier, metrics, submission files, the runner
squad/       SQuAD 1.1 / 2.0: data, features, the QA head, predictions, metrics, the runner
tagging/     CoNLL-2000 chunking: data, the tagger, metrics, the runner
"""
