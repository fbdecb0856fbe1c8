"""CoNLL-2000 chunking with ELECTRA's recipe (google-research/electra, task "chunk").

python -m electra_jax.finetune --config=configs/finetune/chunk.py \
    --config.data_dir=../shared/data/conll2000 --config.init_from=runs/small --workdir=runs/chunk

The optimizer and its per-size recipe are GLUE's (configs/finetune/glue.py, whose fields this
file starts from). The values in comments are the original's (configure_finetuning.py and
finetune/tagging/tagging_tasks.py).
"""

import os

from electra_jax.finetune.settings import shared_recipe


def get_config():
  c = shared_recipe(os.path.join(os.path.dirname(__file__), 'glue.py'))
  c.task = 'chunk'
  c.data_dir = ''              # the folder of the CoNLL-2000 files
  c.train_file = 'train.txt'
  c.eval_file = 'test.txt'     # CoNLL-2000 has no dev split; F1 is reported on this file
  c.max_train_sentences = 0    # > 0: only the first N training sentences
  c.max_seq_length = 256       # 256 for "chunk"
  c.num_epochs = 0.0           # 0 = 3 (num_train_epochs 3.0)
  c.tag_encoding = 'BIOES'     # LABEL_ENCODING "BIOES"; 'BIO' trains on the file's own tags
  return c
