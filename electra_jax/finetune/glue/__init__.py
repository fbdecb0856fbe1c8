"""GLUE: the tasks as data, their TSV or TFDS examples, features, the classifier, metrics,
submission files, the runner."""
