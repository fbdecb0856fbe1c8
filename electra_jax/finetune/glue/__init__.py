"""GLUE: the tasks as data, their TSV or TFDS examples, features and metrics."""
