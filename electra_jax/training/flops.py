"""What one training step costs in FLOPs, and what a device can do per second.

Model FLOPs are counted analytically from the config: the work the algorithm needs, the same
number for every implementation, ours or a peer's (one that does more gets no credit for it).

Counted: the matrix multiplications, at 2 FLOPs per multiply-add, of

  per network (generator of width Hg, discriminator of width H; W is either width):
    embeddings_project   2·T·E·W                  only when E != W
    each layer           2·T·(4·W² + 2·W·F)       Q, K, V and output projections; the FFN (F wide)
                         + 2·2·T·L·W              attention scores QKᵀ and context P·V
  generator head         2·P·Hg·E                 dense to E at the selected positions
  vocabulary projection  2·P·E·V                  onto the tied word embeddings, same positions
  discriminator head     2·T·H² + 2·T·H           dense H -> H, then H -> 1 at every token

for config.objective='electra' (and 'electra_15'). 'mlm' is the discriminator with an mlm head
2·P·H·E (dense H -> E at the selected positions) and the vocabulary projection 2·P·E·V.
'replace_mlm' is the generator plus the 'mlm' parts; 'all_tokens_mlm' the same with the mlm head
and the second vocabulary projection at all T tokens and a copy head 2·T·H. 'electric' has two
generator-sized towers over all T tokens (their one-directional attention computed, and counted,
as a full L x L product), a cloze head 2·T·(2·Hg)·E on their concatenation, the vocabulary
projection at every token, and ELECTRA's discriminator and head.

model.architecture='modern' changes only the encoder layers: a GeGLU feed-forward of
2·T·3·W·F (W -> 2F, then F -> W), and attention on a local layer (all but every global_every-th)
over the window's min(L, 2·(window // 2) + 1) keys instead of all L. Its heads (dense W -> W
before the vocabulary or the score) cost what the formulas above give with E = W.

T = B·L tokens, P = B·N selected positions (N slots per sequence, all computed, used or not).
Training costs 3x the forward pass (a gradient for both operands of every product); a frozen
generator its forward pass alone. Not counted: embedding lookups, LayerNorm, GELU, softmax,
biases, the loss, sampling and the optimizer, all small next to the matmuls.
"""

import ml_collections

from electra_jax.common.config import generator_depth, generator_heads_and_ffn, generator_width
from electra_jax.objective.masking import num_slots

# Dense bfloat16 tensor-core peaks (FLOP/s) by device kind, from the vendors' data sheets; the
# first key contained in a device's `device_kind` wins, so the more specific keys come first.
PEAK_BF16_FLOPS = (
    ('H100 PCIe', 756e12),
    ('H100', 989e12),   # SXM
    ('H200', 989e12),
    ('A100', 312e12),
    ('TPU v4', 275e12),
    ('TPU v5 lite', 197e12),  # v5e
    ('TPU v5p', 459e12),
    ('TPU v5', 459e12),
    ('TPU v6 lite', 918e12),  # v6e (Trillium)
)


def table_peak_flops(device_kind: str) -> float | None:
  """A device's dense bfloat16 peak from PEAK_BF16_FLOPS, or None if it is not listed."""
  return next((peak for key, peak in PEAK_BF16_FLOPS if key in device_kind), None)


def _encoder(name: str, m: ml_collections.ConfigDict, tokens: int, length: int, width: int,
             ffn: int, layers: int, towers: int = 1, local_keys: float | None = None
             ) -> dict[str, int]:
  project = 2 * tokens * m.embedding_size * width if m.embedding_size != width else 0
  if m.architecture == 'modern':  # GeGLU's three FFN matrices; local layers see their window
    ffn_matrices, global_layers = 3, len(range(0, layers, m.global_every))
    if local_keys is None:
      local_keys = min(length, 2 * (m.local_window // 2) + 1)
    keys = global_layers * length + (layers - global_layers) * local_keys
  else:
    ffn_matrices, keys = 2, layers * length
  return {name: towers * (project + layers * 2 * tokens * (4 * width * width
                                                           + ffn_matrices * width * ffn)),
          f'{name}_attention': towers * 2 * 2 * tokens * keys * width}


def forward_flops(config: ml_collections.ConfigDict,
                  local_keys: float | None = None) -> dict[str, int]:
  """Forward-pass matmul FLOPs of one step on the whole batch, by part (see the module doc).
  `local_keys`: the keys a modern local layer's query meets, if not its window's (a kernel
  that computes whole blocks meets more)."""
  m, objective = config.model, config.objective
  batch, length = config.batch_size, config.max_seq_length
  tokens, positions = batch * length, batch * num_slots(length, config.mask_prob)
  discriminator = _encoder('discriminator', m, tokens, length, m.hidden_size,
                           m.intermediate_size, m.num_layers, local_keys=local_keys)
  if objective == 'mlm':
    return {**discriminator, 'mlm_head': 2 * positions * m.hidden_size * m.embedding_size,
            'vocabulary_projection': 2 * positions * m.embedding_size * m.vocab_size}
  discriminator_head = {'discriminator_head': 2 * tokens * m.hidden_size * (m.hidden_size + 1)}
  if config.generator_kind == 'unigram':  # ELECTRA without a generator network
    return {**discriminator, **discriminator_head}
  width = generator_width(m)
  generator = _encoder('generator', m, tokens, length, width, generator_heads_and_ffn(m)[1],
                       generator_depth(m), towers=2 if objective == 'electric' else 1,
                       local_keys=local_keys)
  if objective == 'electric':
    return {**generator, 'cloze_head': 2 * tokens * 2 * width * m.embedding_size,
            'vocabulary_projection': 2 * tokens * m.embedding_size * m.vocab_size,
            **discriminator, **discriminator_head}
  with_generator = {**generator, 'generator_head': 2 * positions * width * m.embedding_size,
                    'vocabulary_projection': 2 * positions * m.embedding_size * m.vocab_size,
                    **discriminator}
  if objective in ('electra', 'electra_15'):
    return {**with_generator, **discriminator_head}
  if objective in ('replace_mlm', 'all_tokens_mlm'):
    predicted = positions if objective == 'replace_mlm' else tokens
    counts = {**with_generator, 'mlm_head': 2 * predicted * m.hidden_size * m.embedding_size,
              'mlm_vocabulary_projection': 2 * predicted * m.embedding_size * m.vocab_size}
    if objective == 'all_tokens_mlm':
      counts['copy_head'] = 2 * tokens * m.hidden_size
    return counts
  raise ValueError(f'no FLOPs count for objective {config.objective!r}; add it to flops.py')


# The generator's share of forward_flops: its encoder, head and vocabulary projection.
GENERATOR_PARTS = ('generator', 'generator_attention', 'generator_head', 'vocabulary_projection')


def train_step_flops(config: ml_collections.ConfigDict) -> int:
  """Model FLOPs of one training step: forward and backward (a frozen generator: forward only)."""
  counts = forward_flops(config)
  if config.generator_kind != 'frozen':
    return 3 * sum(counts.values())
  forward_only = sum(counts[part] for part in GENERATOR_PARTS)
  return forward_only + 3 * (sum(counts.values()) - forward_only)
