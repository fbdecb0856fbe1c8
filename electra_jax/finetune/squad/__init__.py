"""SQuAD 1.1 and 2.0: data, windowed features, the QA head, predictions, metrics, the runner."""
