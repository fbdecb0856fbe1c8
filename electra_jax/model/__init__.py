"""The networks in Flax Linen: layers.py's building blocks, networks.py's pretraining networks."""
