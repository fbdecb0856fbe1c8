"""Pretraining data: text -> token ids -> packed ELECTRA examples on disk -> deterministic batches.

sources.py names corpora (text, JSON Lines and TFDS via tfds_source.py) and cuts them into
units of work; text.py reads text files, formats.py the formats of books and Wikipedia (cut
into sentences by sentences.py); vocab.py (and wordpiece.py) train and load a vocabulary, and
run_vocab.py keeps the run's own in its workdir; packing.py builds examples the way
google-research/electra does (or fills them); preparation.py tokenizes and packs the units in
parallel into shards that store.py writes, checks and reads (prepared_dir.py: a shared prepared
directory); pipeline.py says which example ids each step reads.
"""
