"""Hugging Face interop: our runs as `transformers` directories, and back. Nothing here imports
torch or transformers: they are only needed to test the result. docs/layout.md names each
module's job.
"""
