"""A fine-tuned seed -> one transformers directory whose standard class computes our model
(ElectraFor* or, on 'modern', ModernBertFor* QuestionAnswering, TokenClassification or
SequenceClassification); network_of refuses the heads with no such class. Our QA head adds -1000
where an answer cannot lie; the exported one gives the raw logits, as transformers' does.
"""

import json
import os

import jax
import ml_collections
import orbax.checkpoint as ocp

from electra_jax.common import storage
from electra_jax.common.errors import UsageError
from electra_jax.finetune import init as finetune_init, loop, settings
from electra_jax.finetune.glue import tasks
from electra_jax.hf import (exporting, files, model_card, model_config, modern as hf_modern,
                            params as params_lib, tokenizer)


def network_of(config: ml_collections.ConfigDict) -> str:
  """The exported network (params.NETWORKS) of a fine-tuning run, or a refusal naming why."""
  if config.task in ('squad_v1', 'squad_v2'):  # its saved, resolved name
    if config.head != 'plain':
      raise UsageError(f"the '{config.head}' QA head (end logits conditioned on the start, a beam "
                       'search) has no transformers class; fine-tune with --config.head=plain '
                       'to export an ElectraForQuestionAnswering')
    return 'qa'
  if config.task == 'chunk':
    return 'tagger'
  if config.head != 'transformers':
    raise UsageError(f"a model fine-tuned on {config.task} with ELECTRA's GLUE head (one dense "
                     "layer on [CLS]) has no transformers class (ElectraForSequenceClassification "
                     'has dense, GELU, dense); fine-tune with --config.head=transformers to '
                     'export one')
  if config.pooling != 'cls' and config.model.architecture != 'modern':
    raise UsageError(f"a model fine-tuned with pooling={config.pooling!r} has no transformers "
                     "class (ElectraForSequenceClassification reads [CLS]); fine-tune with "
                     '--config.pooling=cls to export one')
  return 'sequence'


def is_finetuned(workdir: str) -> bool:
  """Whether `workdir` holds a fine-tuning run (its config names a task and seeds)."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.isfile(path):
    return False
  saved = json.loads(storage.read_text(path))
  return 'task' in saved and 'seeds' in saved


def load_config(workdir: str) -> ml_collections.ConfigDict:
  path = os.path.join(workdir, 'config.json')
  if not os.path.isfile(path):
    raise UsageError(f"'{workdir}' holds no fine-tuning run (no config.json)")
  return ml_collections.ConfigDict(settings.with_added_fields(json.loads(storage.read_text(path))))


def seed_params(workdir: str, seed: int) -> tuple[dict, int]:
  """The parameters (numpy) of seed's final checkpoint, and its step."""
  step = loop.saved_step(workdir, seed)
  folder = os.path.join(os.path.abspath(workdir), 'checkpoints', f'seed_{seed}')
  if not step:
    raise UsageError(f"'{workdir}' has no checkpoint of seed {seed}; fine-tune that seed first "
                     f'(it is saved to {folder})')
  manager = ocp.CheckpointManager(folder, item_handlers=ocp.StandardCheckpointHandler())
  try:
    # Restored onto one device whatever the device count it was trained on.
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                          manager.item_metadata(step))
    state = manager.restore(step, args=ocp.args.StandardRestore(target))
  finally:
    manager.close()
  return jax.device_get(state['params']), step


def model_config_json(config: ml_collections.ConfigDict, network: str, labels: list[str],
                      vocab=None) -> dict:
  """The discriminator's ElectraConfig (or ModernBertConfig) as the task's class, with labels."""
  m = config.model
  if m.architecture == 'modern':
    hf_config = hf_modern.hf_config(m, network, m.num_layers, exporting.modern_special_ids(vocab))
    hf_config['num_labels'] = len(labels)
    if network == 'sequence':
      hf_config['classifier_pooling'] = config.pooling
  else:
    hf_config = model_config.to_hf(m, network)
  hf_config['id2label'] = {str(i): label for i, label in enumerate(labels)}
  hf_config['label2id'] = {label: i for i, label in enumerate(labels)}
  if network == 'sequence':  # its loss in transformers, and the dropout our head trained with
    hf_config['problem_type'] = ('regression' if tasks.get_task(config.task).is_regression
                                 else 'single_label_classification')
    hf_config['classifier_dropout'] = config.head_dropout
  return hf_config


def labels_of(workdir: str, network: str, config: ml_collections.ConfigDict) -> list[str]:
  if network == 'qa':
    return ['start', 'end']  # qa_outputs' two columns
  if network == 'sequence':  # the task's labels in the classifier's order; STS-B's one score
    return list(tasks.get_task(config.task).labels) or ['score']
  results = json.loads(storage.read_text(os.path.join(workdir, loop.RESULTS)))
  return results['labels']  # the tagger's output order


def export_seed(workdir: str, out_dir: str, seed: int, overwrite: bool = False,
                language: str = '', license_id: str = '') -> int:
  """Writes seed's fine-tuned model in `workdir` to `out_dir`; returns the step exported. Its
  model card names `language` and `license_id` where given (hf/model_card.py)."""
  languages = model_card.languages_of(language)
  model_card.check_license(license_id)
  config = load_config(workdir)
  network = network_of(config)
  if os.path.exists(out_dir) and os.listdir(out_dir) and not overwrite:
    raise UsageError(f"'{out_dir}' already exists; choose another --out or pass --overwrite")
  params, step = seed_params(workdir, seed)
  labels = labels_of(workdir, network, config)
  vocab = finetune_init.load_start(config).vocab  # the start's vocabulary, as fine-tuning read it
  hf_config = model_config_json(config, network, labels, vocab)
  tensors = (hf_modern.to_hf(params, 'discriminator', 'head', network)
             if config.model.architecture == 'modern' else params_lib.to_hf(params, network))
  files.write_model_dir(out_dir, hf_config, tensors)
  tokenizer.write_tokenizer(vocab, out_dir, model_max_length=config.max_seq_length,
                            token_types=config.model.architecture != 'modern')
  results = os.path.join(workdir, loop.RESULTS)
  if os.path.exists(results):  # the run has finished: the card quotes its recipe and scores
    card = model_card.finetuned_card(network, hf_config, json.loads(storage.read_text(results)),
                                     seed, step, languages, license_id)
    storage.write_text(os.path.join(out_dir, 'README.md'), card)
  return step
