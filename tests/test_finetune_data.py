"""GLUE data for fine-tuning: readers (real SST-2/MRPC files, synthetic folders, TFDS), inputs,
metrics against scikit-learn and SciPy, and the errors a user can cause."""

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics

from conftest import SHARED_DATA
from electra_jax.common.errors import UsageError
from electra_jax.finetune.glue import features, data as glue_data, tasks

GLUE = SHARED_DATA / 'glue'


@pytest.fixture(scope='module')
def glue():
  if not (GLUE / 'SST-2').is_dir():
    pytest.skip(f'real GLUE files not found at {GLUE}')
  return GLUE


def write(path, text, bom=False):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(('\ufeff' if bom else '') + text, encoding='utf-8')


# ---- metrics ---------------------------------------------------------------------------------

@pytest.mark.parametrize('seed', range(3))
def test_metrics_agree_with_sklearn_and_scipy(seed):
  rng = np.random.default_rng(seed)
  labels, predictions = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
  assert tasks.accuracy(labels, predictions) == pytest.approx(
      sklearn.metrics.accuracy_score(labels, predictions), abs=1e-12)
  assert tasks.f1(labels, predictions) == pytest.approx(
      sklearn.metrics.f1_score(labels, predictions), abs=1e-12)
  assert tasks.mcc(labels, predictions) == pytest.approx(
      sklearn.metrics.matthews_corrcoef(labels, predictions), abs=1e-12)
  # Scores with many ties (GLUE's STS-B labels are often multiples of 0.2).
  gold = np.round(rng.uniform(0, 5, 300) * 5) / 5
  predicted = gold + rng.normal(0, 1.5, 300)
  for values in (predicted, np.round(predicted)):
    assert tasks.pearson(gold, values) == pytest.approx(
        scipy.stats.pearsonr(gold, values)[0], abs=1e-10)
    assert tasks.spearman(gold, values) == pytest.approx(
        scipy.stats.spearmanr(gold, values)[0], abs=1e-10)


def test_degenerate_predictions_score_zero_like_sklearn():
  labels, constant = np.array([0, 1, 1, 0]), np.zeros(4, int)
  assert tasks.mcc(labels, constant) == sklearn.metrics.matthews_corrcoef(labels, constant) == 0
  assert tasks.f1(labels, constant) == 0.0


# ---- readers --------------------------------------------------------------------------------

def test_real_sst2_files(glue):
  task = tasks.get_task('sst2')
  data = glue_data.load(task, str(glue), 'glue', '')
  dev = data.dev['SST-2']
  assert len(dev) == 872 and dev.text_b is None
  assert np.bincount(dev.labels).tolist() == [428, 444]
  assert dev.text_a[0].startswith("it 's a charming")
  assert len(data.train) == 67349
  test = data.test['SST-2']
  assert len(test) == 1821 and test.labels is None and test.index[:2] == ['0', '1']


def test_real_mrpc_files_with_bom_and_quotes(glue):
  task = tasks.get_task('MRPC')
  dev = glue_data.read_local(str(glue), task, 'dev', labelled=True)
  assert len(dev) == 408 and np.bincount(dev.labels).tolist() == [129, 279]
  # An unmatched quote stays a character; it does not swallow the next lines.
  assert dev.text_b[0].startswith('"The foodservice pie business')
  train = glue_data.read_local(str(glue), task, 'train', labelled=True)
  assert len(train) == 3668 and np.bincount(train.labels).tolist() == [1194, 2474]
  test = glue_data.read_local(str(glue), task, 'test', labelled=False)
  assert len(test) == 1725 and test.index[:3] == ['0', '1', '2']


def test_synthetic_folders_of_the_other_layouts(tmp_path):
  write(tmp_path / 'CoLA' / 'train.tsv', 'gj04\t1\t\tThe sailors rode the breeze.\n'
        'gj04\t0\t*\tThe more books I ask to whom.\n')
  write(tmp_path / 'CoLA' / 'test.tsv', 'index\tsentence\n0\tBill left.\n1\tLeft Bill.\n')
  cola = glue_data.read_local(str(tmp_path), tasks.get_task('cola'), 'train', True)
  assert cola.text_a[1] == 'The more books I ask to whom.' and cola.labels.tolist() == [1, 0]
  cola_test = glue_data.read_local(str(tmp_path), tasks.get_task('cola'), 'test', False)
  assert cola_test.index == ['0', '1'] and cola_test.labels is None

  mnli_header = ('index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse'
                 '\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n')
  row = '7\t1\t1\tfiction\t(\t(\t(\t(\tA man sleeps.\tA man is awake.\tcontradiction\t{}\n'
  write(tmp_path / 'MNLI' / 'dev_mismatched.tsv', mnli_header + row.format('contradiction')
        + row.format('neutral'))
  mnli = glue_data.read_local(str(tmp_path), tasks.get_task('MNLI'), 'dev_mismatched', True)
  assert mnli.text_b == ['A man is awake.'] * 2 and mnli.labels.tolist() == [0, 2]

  write(tmp_path / 'QQP' / 'test.tsv', 'id\tquestion1\tquestion2\n41\tWhy?\tHow?\n')
  qqp = glue_data.read_local(str(tmp_path), tasks.get_task('qqp'), 'test', False)
  assert qqp.index == ['41'] and qqp.text_a == ['Why?']

  sts_header = ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t'
                'sentence2\tscore\n')
  write(tmp_path / 'STS-B' / 'dev.tsv', sts_header + '0\tg\tf\t2012\t1\tnone\tnone\tA plane.\t'
        'An air plane.\t5.000\n')
  sts = glue_data.read_local(str(tmp_path), tasks.get_task('STS-B'), 'dev', True)
  assert sts.labels.dtype == np.float32 and sts.labels.tolist() == [5.0]


def test_user_errors_are_clear(tmp_path):
  with pytest.raises(UsageError, match="unknown GLUE task 'SST3'.*SST-2"):
    tasks.get_task('SST3')
  mrpc = tasks.get_task('MRPC')
  write(tmp_path / 'MRPC' / 'dev.tsv', 'Quality\t#1 ID\t#2 ID\t#1 Str\t#2 String\n1\t1\t2\ta\tb\n',
        bom=True)
  with pytest.raises(UsageError, match="has no column '#1 String'.*its header: Quality"):
    glue_data.read_local(str(tmp_path), mrpc, 'dev', True)
  write(tmp_path / 'SST-2' / 'dev.tsv', 'sentence\tlabel\ngood\t1\nbad\t2\n')
  with pytest.raises(UsageError, match=r"line 3: SST-2 label '2' is not one of .*\['0', '1'\]"):
    glue_data.read_local(str(tmp_path), tasks.get_task('sst-2'), 'dev', True)
  write(tmp_path / 'SST-2' / 'dev.tsv', 'sentence\tlabel\ngood\n')
  with pytest.raises(UsageError, match='line 2 has 1 tab-separated fields'):
    glue_data.read_local(str(tmp_path), tasks.get_task('sst-2'), 'dev', True)
  write(tmp_path / 'RTE' / 'dev.tsv', 'index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentails\n')
  with pytest.raises(UsageError, match="'entails' is not one of"):
    glue_data.read_local(str(tmp_path), tasks.get_task('rte'), 'dev', True)
  with pytest.raises(UsageError, match='not a similarity score'):
    glue_data.parse_label(tasks.get_task('stsb'), '7.5', 'here')
  with pytest.raises(UsageError, match="has no QNLI/ folder"):
    glue_data.read_local(str(tmp_path), tasks.get_task('qnli'), 'dev', True)
  (tmp_path / 'CoLA').mkdir()
  with pytest.raises(UsageError, match='dev.tsv. does not exist'):
    glue_data.read_local(str(tmp_path), tasks.get_task('cola'), 'dev', True)


def test_tfds_records_map_to_the_same_labels():
  """In-memory records shaped as TFDS glue/mnli gives them: its class order is not GLUE's."""
  mnli = tasks.get_task('MNLI')
  records = [{'premise': b'A dog runs.', 'hypothesis': b'An animal moves.', 'label': 0,
              'idx': 5},
             {'premise': b'A dog runs.', 'hypothesis': b'A cat sleeps.', 'label': 2, 'idx': 6}]
  examples = glue_data.examples_from_records(mnli, records, True, 'records')
  assert [mnli.labels[i] for i in examples.labels] == ['entailment', 'contradiction']
  assert examples.index == ['5', '6'] and examples.text_b[1] == 'A cat sleeps.'
  test = glue_data.examples_from_records(mnli, [dict(records[0], label=-1)], False, 'records')
  assert test.labels is None
  with pytest.raises(UsageError, match='class -1 is not in 0..2'):
    glue_data.examples_from_records(mnli, [dict(records[0], label=-1)], True, 'records')
  with pytest.raises(UsageError, match='no feature hypothesis'):
    glue_data.examples_from_records(mnli, [{'premise': b'x', 'label': 0}], True, 'records')


def test_tfds_dataset_prepared_locally(tmp_path):
  """A small builder with glue/mrpc's features, built by TFDS and read through data_dir."""
  tfds_glue = pytest.importorskip('tfds_glue')
  name = tfds_glue.build(tmp_path)
  data = glue_data.load(tasks.get_task('MRPC'), '', name.split('/')[0], str(tmp_path))
  # TFDS shuffles the records when it writes them; idx keeps each one's identity.
  train = data.train
  assert sorted(zip(map(int, train.index), train.labels.tolist())) == [(i, i % 2) for i in range(6)]
  dev = dict(zip(data.dev['MRPC'].index, data.dev['MRPC'].text_b))
  assert dev['0'] == 'Second "quoted" sentence 0.'
  assert data.test['MRPC'].labels is None and sorted(data.test['MRPC'].index) == ['0', '1']


# ---- model inputs ---------------------------------------------------------------------------

class FakeVocab:
  cls_id, sep_id = 2, 3

  def encode(self, lines):
    return [[10 + len(word) for word in line.split()] for line in lines]


def test_pairs_are_truncated_longest_first_with_segment_ids():
  assert features.truncated_lengths(10, 3, 8) == (5, 3)
  assert features.truncated_lengths(5, 5, 7) == (4, 3)  # a tie takes from the second text
  examples = glue_data.Examples(['a bb ccc dddd eeeee', 'x'], ['yy zzz', 'w'], None, ['0', '1'])
  encoded = features.encode(examples, FakeVocab(), 8)
  assert encoded['input_ids'].tolist() == [[2, 11, 12, 13, 3, 12, 13, 3],
                                           [2, 11, 3, 11, 3, 0, 0, 0]]
  assert encoded['segment_ids'].tolist() == [[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0, 0]]
  single = features.encode(glue_data.Examples(['a bb ccc dddd eeeee'], None, None, ['0']),
                           FakeVocab(), 5)
  assert single['input_ids'].tolist() == [[2, 11, 12, 13, 3]]
  assert not single['segment_ids'].any()


def test_swapped_pairs_and_subsets():
  examples = glue_data.Examples(['a1', 'a2', 'a3'], ['b1', 'b2', 'b3'], np.array([0, 1, 1]),
                                ['0', '1', '2'])
  swapped = features.with_swapped_pairs(examples)
  assert swapped.text_a == ['a1', 'a2', 'a3', 'b1', 'b2', 'b3']
  assert swapped.text_b == ['b1', 'b2', 'b3', 'a1', 'a2', 'a3']
  assert swapped.labels.tolist() == [0, 1, 1, 0, 1, 1]
  two = features.subset(examples, 2)
  assert len(two) == 2 and two.text_a == features.subset(examples, 2).text_a
  assert all(two.text_b[i] == 'b' + two.text_a[i][1] for i in range(2))
