"""Which tokens each kind of attention layer keeps, and in how many of vLLM's blocks.

Tokens a layer keeps for a sequence of `context` tokens, during the step that writes the last:
- full attention keeps all;
- a windowed layer keeps min(context, window): the window - 1 the next query reads back, plus the
  token being written. vLLM's SlidingWindowManager frees a block once all its tokens are skipped
  (get_num_skipped_tokens = computed - window + 1), so with block_size 1 it holds exactly that.
  transformers' DynamicSlidingWindowLayer keeps window - 1 tokens between forwards (a view of the
  window it concatenated, whose storage still holds window tokens);
- a chunked layer (Llama 4) keeps the tokens of the current chunk: vLLM's ChunkedLocalAttentionManager
  skips computed // C x C tokens, so with block_size 1 it holds (c - 1) mod C + 1 and at most
  min(context, C) on the way to `context`. transformers caches a chunked layer as a sliding window
  of C (cache_utils maps "chunked_attention" to DynamicSlidingWindowLayer), also min(context, C)
  during the step, though after it the window may reach back into the previous chunk.

Paging follows vLLM v1 (vllm-project/vllm at 001cabc1 and 129ab7c6: vllm/v1/kv_cache_interface.py,
vllm/v1/core/single_type_kv_cache_manager.py, vllm/v1/core/kv_cache_utils.py): each layer keeps
whole blocks of block_size tokens; a full layer cdiv(context, block) of them, a local one the blocks
not wholly skipped. Those counts drop when the window's start (or a new chunk) crosses a block
boundary, so the peak on the way to `context` is reported: bytes never fall as context grows, and a
capacity search can bisect on them. In a model with several kinds vLLM groups layers into KV cache
groups of equal size (the fewest layers of a kind, or the most when under 1.5x the fewest) and pads
each kind up to whole groups: padded layers' blocks are allocated and unused (Gemma 3 27B: 52
windowed layers are held as 60).
"""

import math
from functools import lru_cache
from typing import NamedTuple

from app.accounting import blocks
from app.accounting.blocks.chunked import Chunked
from app.accounting.transformer import TransformerConfig

VLLM_GROUP_RATIO = 1.5
"""vLLM sizes KV cache groups by the larger kind when it has fewer than 1.5x the smaller's layers
(kv_cache_utils._get_kv_cache_groups_uniform_page_size)."""


class Kinds(NamedTuple):
    """Layers of each attention kind, and the local kinds' span in tokens (None without them)."""

    full: int
    windowed: int
    window: int | None
    chunked: int
    chunk: int | None


class Blocks(NamedTuple):
    """Blocks (tokens, when unpaged) one layer of each kind holds per sequence, the layers of each
    kind allocated (padding included), and their product summed: layer-blocks per sequence."""

    full: int
    windowed: int
    chunked: int
    padded: tuple[int, int, int, int]
    """Layers allocated of each kind: full, windowed, chunked, and state layers (vLLM's mamba pages,
    one a sequence, in a hybrid's KV cache groups; 0 where the state is not paged)."""
    total: int


@lru_cache(maxsize=1024)
def kinds(cfg: TransformerConfig) -> Kinds:
    """Each attention layer, counted by kind (state-space and linear-attention layers keep no per-token
    cache: inference/state.py); local layers share the config's span."""
    attentions = [layer.attention for layer in blocks.layers(cfg) if layer.attention.mixes_by_attention]
    windowed = [a.window for a in attentions if a.window is not None]
    chunked = [a.chunk for a in attentions if isinstance(a, Chunked)]
    return Kinds(
        len(attentions) - len(windowed) - len(chunked),
        len(windowed),
        windowed[0] if windowed else None,
        len(chunked),
        chunked[0] if chunked else None,
    )


def vllm_padded_layers(counts: tuple[int, ...]) -> tuple[int, ...]:
    """Layers of each kind vLLM allocates blocks for: with two kinds or more present, it splits each
    into groups of group_size layers and pads the last (_get_kv_cache_groups_uniform_page_size)."""
    present = [n for n in counts if n]
    if len(present) < 2:
        return counts
    small, large = min(present), max(present)
    size = large if large < small * VLLM_GROUP_RATIO else small
    return tuple(math.ceil(n / size) * size for n in counts)


def windowed_blocks(context: int, window: int, block: int) -> int:
    """The most blocks a windowed layer holds on the way to `context` tokens. Writing token c
    (1-based) it holds cdiv(c, block) less the blocks every token of which is out of the window:
    vLLM frees (computed - window + 1) // block = (c - window) // block of them. Past the window
    that count oscillates by one block (a block is freed when the window's start crosses into the
    next one), so the peak is kept: with window = q x block + r and s = min(context - window,
    block - 1), q + cdiv(r + s, block), at most cdiv(window - 1, block) + 1 (vLLM's
    SlidingWindowSpec.max_memory_usage_bytes adds that 1)."""
    if context <= window:
        return -(-context // block)
    q, r = divmod(window, block)
    return q - (-(r + min(context - window, block - 1)) // block)


def chunked_blocks(context: int, chunk: int, block: int) -> int:
    """The most blocks a chunked layer holds on the way to `context` tokens. In chunk j (tokens
    jC+1 to (j+1)C, 1-based) vLLM has skipped jC tokens, (jC) // block whole blocks, so writing
    token c it holds cdiv(c, block) - (jC) // block, which grows through the chunk: the peak of a
    chunk is at its last token written. A whole chunk's peak depends on jC mod block only, so the
    first min(j, block) whole chunks give every value; with C a multiple of the block (Llama 4's
    8,192 over 16) it is C / block."""
    last = (context - 1) // chunk
    peak = -(-context // block) - (last * chunk) // block
    for j in range(min(last, block)):
        peak = max(peak, -(-(j + 1) * chunk // block) - (j * chunk) // block)
    return peak


def layer_blocks(
    cfg: TransformerConfig, context: int, block: int, paged: bool, state_layers: int = 0
) -> Blocks:
    """What one sequence of `context` tokens holds, layer kind by layer kind (block 1: tokens).
    state_layers: layers whose state vLLM pages, one page a sequence each, grouped with the rest."""
    k = kinds(cfg)
    full = -(-context // block)
    windowed = windowed_blocks(context, k.window, block) if k.windowed else 0
    chunked = chunked_blocks(context, k.chunk, block) if k.chunked else 0
    counts = (k.full, k.windowed, k.chunked, state_layers)
    padded = vllm_padded_layers(counts) if paged else counts
    return Blocks(
        full,
        windowed,
        chunked,
        padded,
        padded[0] * full + padded[1] * windowed + padded[2] * chunked + padded[3],
    )
