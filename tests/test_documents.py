"""Documents kept apart: packing 'documents' (data/packing.py) places whole documents, each
[CLS] piece [SEP] with its own document id, best-fit, every token once; attention given document
ids never crosses a document's edge, on the einsum path and on Pallas's splash kernel (interpret
mode), for both architectures, global and local."""

import json
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO
from electra_jax.common import config as config_lib
from electra_jax.common.errors import UsageError
from electra_jax.data import packing
from electra_jax.model import layers, modern
from test_faults import (STEPS, command, corpus, env, final_state,  # noqa: F401
                         killed_once_and_resumed, max_abs_difference, records, run)

CLS, SEP = 2, 3


def random_corpus(seed=0, count=300):
  rng = np.random.default_rng(seed)
  return [[list(rng.integers(5, 1000, rng.integers(1, 40))) for _ in range(rng.integers(1, 30))]
          for _ in range(count)]


@pytest.mark.parametrize('length', [16, 128, 1024])
def test_every_token_once_in_order_and_documents_apart(length):
  docs = random_corpus()
  rows = list(packing.packed_documents(docs, length))
  assert rows == list(packing.packed_documents(docs, length))  # deterministic
  pieces = [piece for row in rows for piece in row]
  assert all(sum(len(p) + 2 for p in row) <= length for row in rows)
  # Each document's pieces appear in order; together they are its tokens exactly.
  expected = list(packing.document_pieces(docs, length))
  assert sorted(map(tuple, pieces)) == sorted(map(tuple, expected))
  assert [t for piece in expected for t in piece] == [t for doc in docs for line in doc
                                                      for t in line]
  input_ids = np.zeros((len(rows), length), np.int32)
  document_ids = np.zeros_like(input_ids)
  for row, pieces_of_row in enumerate(rows):
    packing.fill_documents(pieces_of_row, input_ids[row], document_ids[row], CLS, SEP)
  for row, pieces_of_row in enumerate(rows):
    for k, piece in enumerate(pieces_of_row, start=1):
      span = input_ids[row][document_ids[row] == k]
      assert list(span) == [CLS, *piece, SEP]
  assert ((document_ids == 0) == (input_ids == 0)).all()  # padding is document 0


def test_a_long_document_is_cut_into_full_pieces():
  doc = [[7] * 50, [8] * 45]
  pieces = list(packing.document_pieces([doc], 32))
  assert [len(p) for p in pieces] == [30, 30, 30, 5]
  rows = list(packing.packed_documents([doc], 32))
  assert [len(r) for r in rows] == [1, 1, 1, 1] and sum(len(p) for r in rows for p in r) == 95


# ---- attention never crosses a document's edge -----------------------------------------------

LENGTH, WIDTH, HEADS = 128, 128, 2  # the smallest length the Pallas kernel takes


def document_ids():
  """Two rows: documents of 40, 50 and 30 tokens then padding; one document of 100 then padding."""
  first = np.repeat([1, 2, 3, 0], [40, 50, 30, 8])
  second = np.repeat([1, 0], [100, 28])
  return jnp.asarray(np.stack([first, second]), jnp.int32)


def batch_mesh():
  return jax.make_mesh((2,), ('data',), devices=jax.devices()[:2],
                       axis_types=(jax.sharding.AxisType.Auto,))


def reach(module, params, x, ids, query):
  """|d out[0, query] / d x[0, k]| summed over features, for every k."""
  grads = jax.grad(lambda x: module.apply(params, x, ids, True)[0, query].astype(jnp.float32)
                   .sum())(x)
  return np.abs(np.asarray(grads[0], np.float32)).sum(-1)


ATTENTIONS = {
    'bert': lambda impl: layers.SelfAttention(HEADS, 0.0, jnp.float32, impl, interpret=True),
    'modern global': lambda impl: modern.RotaryAttention(HEADS, 0.0, 160_000.0, 0,
                                                         implementation=impl, interpret=True),
    'modern local': lambda impl: modern.RotaryAttention(HEADS, 0.0, 10_000.0, 32,
                                                        implementation=impl, interpret=True),
}


@pytest.mark.parametrize('kind', list(ATTENTIONS))
def test_no_gradient_crosses_a_document_edge_on_einsum_and_splash(kind):
  x = jax.random.normal(jax.random.key(0), (2, LENGTH, WIDTH))
  ids = document_ids()
  module = ATTENTIONS[kind]
  params = module('einsum').init(jax.random.key(1), x, ids, True)
  params = jax.tree.map(lambda w: w * 8.0, params)  # sharp attention: a leak would show
  doc = np.asarray(ids[0])
  for query in (45, 60, 89):  # the second document: its first, middle and last tokens
    einsum = reach(module('einsum'), params, x, ids, query)
    with jax.set_mesh(batch_mesh()):
      splash = reach(module('pallas'), params, x, ids, query)
    for got in (einsum, splash):
      assert (got[doc != doc[query]] == 0).all()  # exactly zero outside its document
      inside = got[doc == doc[query]] > 0
      if kind == 'modern local':  # and within the window
        inside = inside[np.abs(np.arange(40, 90) - query) <= 16]
      assert inside.all()
    with jax.set_mesh(batch_mesh()):
      out_splash = module('pallas').apply(params, x, ids, True)
    out_einsum = module('einsum').apply(params, x, ids, True)
    real = np.asarray(ids) != 0
    np.testing.assert_allclose(np.asarray(out_splash)[real], np.asarray(out_einsum)[real],
                               atol=2e-5, rtol=2e-5)


def test_splash_local_window_equals_the_einsum_band_with_padding():
  x = jax.random.normal(jax.random.key(2), (2, LENGTH, WIDTH))
  mask = jnp.arange(LENGTH)[None, :] < jnp.asarray([LENGTH, 77])[:, None]
  module = ATTENTIONS['modern local']
  params = jax.tree.map(lambda w: w * 8.0, module('einsum').init(jax.random.key(3), x, mask, True))
  with jax.set_mesh(batch_mesh()):
    got = module('pallas').apply(params, x, mask, True)
  want = module('einsum').apply(params, x, mask, True)
  real = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=2e-5, rtol=2e-5)


# ---- a prepared directory with document ids, killed mid-run, resumes exactly ------------------

MODERN = ['--config.data.document_attention=true', '--config.model.architecture=modern',
          '--config.model.embedding_size=32', '--config.model.generator_hidden_size=1.0',
          '--config.model.generator_layers=0.5', '--config.model.local_window=8',
          '--config.embedding_sharing=gdes']


def test_a_run_on_prepared_document_ids_killed_mid_run_resumes_exactly(corpus, tmp_path):
  prepared = tmp_path / 'prepared'
  prepare = command(corpus, tmp_path / 'unused', STEPS, *MODERN)
  prepare[2] = 'electra_jax.prepare'
  prepare = [a for a in prepare if not a.startswith('--workdir')] + [f'--out={prepared}']
  result = subprocess.run(prepare, env=env(), cwd=REPO, capture_output=True, text=True,
                          timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  manifest = json.loads((prepared / 'train' / 'manifest.json').read_text())
  assert manifest['documents'] is True
  flags = [*MODERN, f'--config.data.prepared_dir={prepared}', '--config.data.train_files=',
           '--config.data.eval_files=', '--config.data.vocab_model=']
  workdir, reference = killed_once_and_resumed(corpus, tmp_path, 3, *flags)
  train, _ = records(workdir)
  assert [r['step'] for r in train] == list(range(1, STEPS + 1))
  assert train == records(reference)[0]  # every loss, bit for bit
  assert max_abs_difference(final_state(workdir, STEPS), final_state(reference, STEPS)) == 0.0
  # Asked of a directory without document ids, or the other way round: refused by name.
  refused = run(corpus, tmp_path / 'other', STEPS, *flags[1:], check=False)
  assert "holds examples with document ids (packing 'documents')" in refused.stderr


def test_long_bert_is_refused_naming_modern_and_packing_must_agree():
  config = config_lib.default_config()
  config.data.train_files = 'x.txt'
  config.max_seq_length = 1024
  with pytest.raises(UsageError, match="'bert' network's position table ends there: raise it, or "
                     'use --config.model.architecture=modern'):
    config_lib.validate(config, 1)
  config.max_seq_length = 128
  config.data.document_attention = True
  config.data.packing = 'fill'
  with pytest.raises(UsageError, match="packing 'documents' \\(or 'auto'\\) keeps the document"):
    config_lib.validate(config, 1)
  config.data.packing = 'auto'
  config_lib.validate(config, 1)


@pytest.mark.slow  # run with -m slow (about 30 s of a 2-core CI machine)
def test_context_extension_continues_a_modern_run_longer_with_a_new_rope_base(corpus, tmp_path):
  """A modern run trained at 32 tokens continues at 64 with a new global RoPE base, its weights
  and optimizer state restored (docs/training.md, 'Long sequences'); a 'bert' run may not."""
  modern_flags = [f for f in MODERN if 'document_attention' not in f]
  workdir = tmp_path / 'run'
  run(corpus, workdir, 4, *modern_flags)
  longer = ['--config.max_seq_length=64', '--config.model.max_position_embeddings=128',
            '--config.model.rope_theta=320000']
  result = run(corpus, workdir, 8, *modern_flags, *longer)
  assert 'resuming at step 4' in result.stderr or 'resum' in result.stderr
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['max_seq_length'] == 64 and saved['model']['rope_theta'] == 320000
  kept = json.loads((workdir / 'config.until-4.json').read_text())
  assert kept['max_seq_length'] == 32 and kept['model']['rope_theta'] == 160000
  steps = [r['step'] for r in records(workdir)[0]]
  assert steps == list(range(1, 9))
  bert = tmp_path / 'bert'
  run(corpus, bert, 2)
  refused = run(corpus, bert, 4, '--config.model.max_position_embeddings=128', check=False)
  assert 'holds a run of a different model (max_position_embeddings' in refused.stderr
