"""research.transfer_study.variants: the plan puts every run at ELECTRA's FLOPs, the frozen
generator's pretraining counted, and gives the MLM run the shape the Fast-ELECTRA run loads."""

import pytest

from conftest import REPO
from electra_jax.training import generator_modes
from research.transfer_study import study, variants


@pytest.fixture(scope='module')
def plan(tmp_path_factory):
  out = tmp_path_factory.mktemp('variants')
  args = variants.parse_args([f'--out={out}', '--steps=1000', '--jobs=1'])
  return args, variants.plan_pretraining(args, str(out / 'data'))


def test_every_run_costs_electras_flops_the_generators_pretraining_counted(plan):
  _, runs = plan
  budget = runs['electra']['steps'] * runs['electra']['flops_per_step']
  assert runs['whole_word']['steps'] * runs['whole_word']['flops_per_step'] == budget
  fast = (runs['fast']['steps'] * runs['fast']['flops_per_step']
          + runs['generator']['steps'] * runs['generator']['flops_per_step'])
  assert abs(fast - budget) <= runs['fast']['flops_per_step'] / 2  # rounded to a whole step
  # The frozen generator's forward pass is cheaper than training it: more steps than
  # (budget - generator) / ELECTRA's step would give.
  assert runs['fast']['flops_per_step'] < runs['electra']['flops_per_step']
  assert runs['fast']['steps'] > round(
      (budget - runs['generator']['steps'] * runs['generator']['flops_per_step'])
      / runs['electra']['flops_per_step'])


def test_the_mlm_run_has_the_shape_of_the_generator_that_loads_it(plan):
  args, runs = plan
  mlm, fast = (study.resolve_config(runs[name]['flags']) for name in ('generator', 'fast'))
  assert mlm.objective == 'mlm' and fast.generator_init.endswith('/generator')
  m = mlm.model
  assert generator_modes.generator_shape(fast.model) == generator_modes.Shape(
      m.hidden_size, m.num_heads, m.intermediate_size, m.num_layers, m.embedding_size,
      m.vocab_size, m.max_position_embeddings, m.type_vocab_size)
  assert fast.embedding_sharing == 'none' and fast.temperature_start == 2.0
  whole_word = study.resolve_config(runs['whole_word']['flags'])
  assert whole_word.masking == 'whole_word'
  assert str(REPO / 'configs' / 'mini.py') in runs['electra']['flags'][0]


def test_the_table_names_every_start_and_marks_what_has_not_run():
  summary = {'pretraining': {name: None for name in ('electra', 'whole_word', 'generator',
                                                      'fast')},
             'total_flops': {}, 'finetuning': {s: {t: None for t in variants.TASKS}
                                               for s in variants.STARTS}}
  summary['pretraining']['electra'] = {'steps': 10, 'seconds': 60.0,
                                       'final_eval': {'eval_disc_auc': 0.75}}
  summary['total_flops']['electra'] = 6.6e10
  summary['finetuning']['electra']['MRPC'] = {
      'seeds': {'0': {'accuracy': 0.70}, '1': {'accuracy': 0.72}, '2': {'accuracy': 0.71}},
      'median': {'accuracy': 0.71, 'f1': 0.80}}
  summary['finetuning']['electra']['chunk'] = {
      'seeds': {'0': {'f1': 58.0}, '1': {'f1': 57.5}, '2': {'f1': 58.25}}, 'median': {'f1': 58.0}}
  lines = variants.markdown(summary).splitlines()
  assert len(lines) == 2 + len(variants.STARTS)
  assert lines[2] == ('| ELECTRA (token masking) | 6.6e+10 | 10 | 0.750 | 1m00s | '
                      '70.00, 72.00, 71.00 (71.00) | 80.00 | 58.00, 57.50, 58.25 (58.00) |')
  assert lines[3].count('| - ') == 7


def test_the_modern_run_costs_electras_flops_on_modernberts_design(tmp_path):
  args = variants.parse_args([f'--out={tmp_path}', '--steps=1000', '--jobs=1',
                              '--starts=modern,electra'])
  runs = variants.plan_pretraining(args, str(tmp_path / 'data'))
  assert list(runs) == ['electra', 'modern'] and args.starts == ['electra', 'modern']
  budget = runs['electra']['steps'] * runs['electra']['flops_per_step']
  assert abs(runs['modern']['steps'] * runs['modern']['flops_per_step'] - budget) <= (
      runs['modern']['flops_per_step'] / 2)
  electra, modern = (study.resolve_config(runs[name]['flags']) for name in ('electra', 'modern'))
  assert modern.model.architecture == 'modern' and electra.model.architecture == 'bert'
  assert (modern.model.hidden_size, modern.model.num_layers) == (
      electra.model.hidden_size, electra.model.num_layers)
  assert modern.model.intermediate_size == 3 * modern.model.hidden_size // 2
  with pytest.raises(variants.UsageError, match='--starts=modern,bert'):
    variants.parse_args([f'--out={tmp_path}', '--starts=modern,bert'])
