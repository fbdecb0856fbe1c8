"""The networks in Flax Linen.

layers.py    embeddings, attention, the post-LayerNorm encoder, the generator's and discriminator's heads
networks.py  the pretraining networks: ELECTRA's pair, BERT's masked LM, the ablations', Electric's
"""
