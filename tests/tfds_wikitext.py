"""A real TFDS dataset for the tests: WikiText-2 articles from ../shared/data, built locally.

`build(data_dir)` runs TFDS's own download_and_prepare, writing array_record files and
dataset_info.json into data_dir/wikitext_local/raw/1.0.0, exactly as `tfds build` would. The
training code then finds the dataset by name through data_dir, without this class.
"""

import tensorflow_datasets as tfds

from conftest import WIKITEXT


class WikitextLocal(tfds.core.GeneratorBasedBuilder):
  """WikiText-2 raw, one record per article (split at its ' = Title = ' heading lines)."""

  VERSION = tfds.core.Version('1.0.0')
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name='raw', description='untokenized text')]

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        features=tfds.features.FeaturesDict({'title': tfds.features.Text(),
                                             'text': tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager  # Local files: nothing to download.
    return {'train': self._generate_examples(WIKITEXT / 'wiki.valid.raw'),
            'test': self._generate_examples(WIKITEXT / 'wiki.test.raw')}

  def _generate_examples(self, path):
    articles, lines = [], []
    for line in path.read_text(encoding='utf-8').splitlines():
      heading = line.strip()
      if heading.startswith('= ') and not heading.startswith('= ='):
        if lines:
          articles.append(lines)
        lines = [heading]
      elif heading:
        lines.append(heading)
    articles.append(lines)
    for index, article in enumerate(articles):
      yield index, {'title': article[0].strip('= '), 'text': '\n'.join(article[1:])}


def build(data_dir) -> str:
  """Builds the dataset into data_dir; returns its TFDS name."""
  builder = WikitextLocal(config='raw', data_dir=str(data_dir), file_format='array_record')
  builder.download_and_prepare()
  return 'wikitext_local/raw'
