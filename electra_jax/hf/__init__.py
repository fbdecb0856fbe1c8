"""Hugging Face interop: our runs as `transformers` ELECTRA directories, and back.

params.py        our parameter tree <-> PyTorch-named numpy tensors (both networks)
model_config.py  our `model` config section <-> ElectraConfig dicts, with what we can't represent
files.py         reading and writing a model directory: config.json + model.safetensors
tokenizer.py     tokenizer.json / tokenizer_config.json for our sentencepiece or WordPiece vocab
exporting.py     a run's checkpoint -> DIR/discriminator and DIR/generator
importing.py     Hugging Face directories -> a new run workdir at step 0
model_card.py    the README.md model card of each exported directory
bert.py          reading a pretrained BERT directory as the discriminator's encoder

A fine-tuned seed is exported by finetune/export.py. Nothing here imports torch or
transformers: they are only needed to test the result.
"""
