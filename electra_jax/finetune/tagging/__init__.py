"""Token tagging (CoNLL-2000 chunking): data, span F1, the runner."""
