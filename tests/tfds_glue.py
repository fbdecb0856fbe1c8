"""A TFDS dataset with the features of glue/mrpc, built locally: the fine-tuning reader finds
it by name through data_dir, as it would find a prepared glue/mrpc."""

import numpy as np
import tensorflow_datasets as tfds


class GlueLocal(tfds.core.GeneratorBasedBuilder):
  """Six train, two validation and two test pairs; test labels are -1, as in TFDS glue."""

  VERSION = tfds.core.Version('1.0.0')
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name='mrpc', description='MRPC-shaped pairs')]

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        features=tfds.features.FeaturesDict({
            'sentence1': tfds.features.Text(), 'sentence2': tfds.features.Text(),
            'label': tfds.features.ClassLabel(names=['not_equivalent', 'equivalent']),
            'idx': tfds.features.Scalar(dtype=np.int32)}))

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    return {'train': self._generate_examples(6, True),
            'validation': self._generate_examples(2, True),
            'test': self._generate_examples(2, False)}

  def _generate_examples(self, count, labelled):
    for i in range(count):
      yield i, {'sentence1': f'First sentence {i}.', 'sentence2': f'Second "quoted" sentence {i}.',
                'label': i % 2 if labelled else -1, 'idx': i}


def build(data_dir) -> str:
  """Builds the dataset into data_dir; returns its TFDS name."""
  builder = GlueLocal(config='mrpc', data_dir=str(data_dir), file_format='array_record')
  builder.download_and_prepare()
  return 'glue_local/mrpc'
