"""Pretraining data: text -> token ids -> packed examples on disk -> deterministic batches.

docs/layout.md names each module's job; docs/data.md is the user's guide.
"""
