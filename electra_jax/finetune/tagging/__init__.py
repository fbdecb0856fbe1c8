"""Token tagging (CoNLL-2000 chunking): data, the tagger, span F1, the runner."""
