"""Pretraining data: text -> sentencepiece ids -> packed ELECTRA examples -> deterministic batches.

text.py reads corpora, vocab.py trains and loads the vocabulary, packing.py builds examples the
way google-research/electra does, and pipeline.py caches them and draws batches.
"""
