"""Extractive QA on SQuAD 1.1 or 2.0 with ELECTRA's recipe (google-research/electra).

python -m electra_jax.finetune --config=configs/finetune/squad.py --config.task=squad_v1 \
    --config.data_dir=../shared/data/squad --config.train_file=train-v2.0.first-11-articles.json \
    --config.init_from=runs/small --workdir=runs/small-squad

The optimizer and its per-size recipe are GLUE's (configs/finetune/glue.py, whose fields this
file starts from): learning rate 3e-4 small, 1e-4 base, 5e-5 large, layer decay 0.8 (0.9 large),
warmup 10%, weight decay 0.01. What differs for SQuAD is below; the values in comments are the
original's (configure_finetuning.py unless said otherwise).
"""

import os

from electra_jax.finetune.settings import shared_recipe


def get_config():
  c = shared_recipe(os.path.join(os.path.dirname(__file__), 'glue.py'))
  c.task = 'squad_v1'          # squad_v1 or squad_v2
  c.data_dir = ''              # the official JSON files (squad_v1 reads 2.0's answerable only)
  c.train_file = ''            # '' = the official name (train-v1.1.json, train-v2.0.json)
  c.dev_file = ''              # '' = the official name (dev-v1.1.json, dev-v2.0.json)
  c.train_articles = 0         # > 0: only the first N articles of the train file
  c.dev_articles = 0           # > 0: only the first N articles of the dev file

  c.max_seq_length = 512       # 512 for "squad" tasks (128 for GLUE)
  c.max_query_length = 64      # question sub-tokens kept
  c.doc_stride = 128           # sub-tokens between the starts of a context's windows
  c.num_epochs = 0.0           # 0 = 2 ("squad" tasks: num_train_epochs 2.0)
  c.batch_size = 32            # train_batch_size 32
  c.eval_batch_size = 32       # predict_batch_size 32

  # 'electra' (the original's: end conditioned on start) or 'plain' (ElectraForQuestionAnswering's).
  c.head = 'electra'
  c.beam_size = 20             # beam_size 20: starts kept, and ends per start ('electra')
  c.n_best_size = 20           # n_best_size 20: answers kept per question ('plain': starts, ends)
  c.max_answer_length = 30     # max_answer_length 30 sub-tokens
  c.na_threshold = -2.75       # SQuAD 2.0: "no answer" above this score (qa_na_threshold -2.75)
  return c
