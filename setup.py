"""electra_jax: ELECTRA pretraining in JAX/Flax for TPU, GPU and CPU."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
REQUIREMENTS = [line.split('#')[0].strip()
                for line in (HERE / 'requirements.txt').read_text().splitlines()
                if line.split('#')[0].strip()]

setup(
    name='electra_jax',
    version='0.1.0',
    description='ELECTRA pretraining (generator + discriminator) in JAX/Flax, TPU first.',
    long_description=(HERE / 'README.md').read_text() if (HERE / 'README.md').exists() else '',
    long_description_content_type='text/markdown',
    packages=find_packages(include=['electra_jax', 'electra_jax.*']),
    python_requires='>=3.11',
    install_requires=REQUIREMENTS,
    extras_require={
        # A run directory on Cloud Storage (--workdir=gs://..., as on a TPU pod slice): gcsfs
        # for etils.epath and Orbax, google-cloud-storage for tensorboardX's event writer.
        'gcs': ['gcsfs', 'google-cloud-storage'],
        # The plots of research/transfer_study (python -m research.transfer_study).
        'bench': ['matplotlib>=3.7'],
        # Corpora as published (docs/data.md): parquet files (pyarrow), .jsonl.zst and .json.zst
        # (zstandard), hf: datasets (datasets); each imported only where a source needs it.
        # Tested with pyarrow 26, zstandard 0.25, datasets 5.2.
        'corpora': ['pyarrow', 'zstandard', 'datasets'],
        # Test-only: the suite (in parallel processes: pytest-xdist, see pytest.ini), and scipy
        # for float64 references of erf and friends (and, with scikit-learn, of the GLUE
        # metrics); torch (CPU) and transformers check the Hugging Face export and import;
        # nbconvert and ipykernel execute launch/colab.ipynb; matplotlib
        # draws the transfer study's plots in its smoke test; libtpu (JAX's TPU backend, matched
        # to the installed jax by the jax[tpu] extra) lets tests/test_aot.py compile the train
        # step for a TPU slice on a CPU host. The CPU tests still run on the CPU: conftest sets
        # JAX_PLATFORMS=cpu before jax is imported. The corpora extra's three packages let
        # tests/test_corpus_formats.py read parquet, zstd and hf: sources.
        'test': ['pytest>=8', 'pytest-xdist>=3.5', 'scipy>=1.11', 'scikit-learn>=1.3',
                 'torch==2.13.0', 'transformers', 'nbconvert>=7', 'ipykernel>=6', 'matplotlib>=3.7',
                 'jax[tpu]', 'pyarrow', 'zstandard', 'datasets'],
    },
)
