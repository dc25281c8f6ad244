"""Context parallelism: cp ranks split each sequence and exchange keys and values so every query
still sees the whole causal prefix (Megatron-LM's --context-parallel-size; Llama 3's CP).

Each rank keeps s / cp of the sequence's tokens, so its activations, logits and inputs are a
cp-th of the whole; its weights are the same as its peers', so ZeRO shards and gradients reduce
over data x context ranks (Megatron-LM's data-parallel-with-context group). Causal load balancing
splits the sequence into 2 cp chunks and gives rank i chunks i and 2 cp - 1 - i, so every rank
does the same attention work (megatron/core/utils.py, get_batch_on_this_cp_rank): the sequence
must be a multiple of 2 cp.

Two ways to exchange keys and values, per layer (Megatron-LM's --cp-comm-type):
  ring (p2p): cp - 1 steps, each sending this rank's K and V chunk to the next rank while
    attention runs on the chunk received, so the exchange hides behind the attention core; the
    backward pass sends K, V and their gradients (Liu et al. 2023, "Ring Attention";
    megatron/core/transformer/dot_product_attention.py via Transformer Engine's
    AttnFuncWithCPAndKVP2P). Two chunks of K and V are alive at once (the one in use, the one
    arriving).
  all_gather: every rank gathers the whole sequence's K and V before attention, and the backward
    pass reduce-scatters their gradients; exposed, not overlapped, and cheap with grouped-query
    attention's few key/value heads (Llama 3 paper, section 3.3.2, which chose it for CP16 at
    131k tokens). The gathered K and V of one layer are alive during its attention.
"""

from typing import Literal

from app.accounting.errors import InvalidInput
from app.accounting.transformer import TransformerConfig

Algorithm = Literal["ring", "all_gather"]
ALGORITHMS: tuple[Algorithm, ...] = ("ring", "all_gather")

NOTE = ("context_parallel {cp}: each rank keeps 1/{cp} of every sequence's tokens (causal load balancing: "
        "chunks i and 2cp-1-i), and ZeRO shards over data x context ranks")


def local_tokens(seq_len: int, cp: int, model: TransformerConfig | None) -> int:
    """Tokens of each sequence on one context-parallel rank; InvalidInput naming context_parallel
    when the sequence does not split into 2 cp equal chunks or there is no model to split."""
    if model is None:
        raise InvalidInput("context_parallel", "splits sequences: it needs the model's shape, not a bare "
                                               "parameter count")
    if seq_len % (2 * cp):
        raise InvalidInput("context_parallel", f"seq_len ({seq_len}) must be a multiple of 2 x context_parallel "
                                               f"({2 * cp}): causal load balancing gives each rank two chunks")
    return seq_len // cp


def kv_width(cfg: TransformerConfig) -> int:
    """Elements per token of one layer's keys and values as attention reads them: 2 x n_kv_heads x
    head_dim, or latent attention's per-head keys (nope + rope) and values expanded over n_heads."""
    if cfg.mla:
        return cfg.n_heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim + cfg.v_head_dim)
    return 2 * cfg.kv_heads * cfg.hd


def kv_chunk_bytes(cfg: TransformerConfig, local_seq: int, batch: int, tp: int, act_bytes: int) -> int:
    """One rank's K and V for its local tokens, in one layer, split over tensor ranks by heads."""
    return -(-local_seq * batch * kv_width(cfg) * act_bytes // tp)


def gathered_kv_bytes(cfg: TransformerConfig, local_seq: int, batch: int, cp: int, tp: int, act_bytes: int,
                      algorithm: Algorithm = "ring") -> int:
    """K and V buffers alive during one layer's attention beyond the rank's own: the chunk arriving
    (ring), or the other cp - 1 ranks' chunks (all_gather)."""
    chunk = kv_chunk_bytes(cfg, local_seq, batch, tp, act_bytes)
    return chunk if algorithm == "ring" else (cp - 1) * chunk
