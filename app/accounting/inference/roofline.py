"""One forward pass of a served model on the roofline: FLOPs against bytes, per GPU.

A pass takes max(FLOPs / (peak x flops_efficiency), bytes / (bandwidth x memory_efficiency))
plus its tensor-parallel all-reduces, which are not overlapped with compute (as in
llm-analysis, Li 2023, and kipply's "Transformer Inference Arithmetic", 2022).

FLOPs are matmul FLOPs as flops.py counts them (exact against FlopCounterMode), with one
serving difference: the LM head runs only on each sequence's last position (vLLM's
LogitsProcessor prunes the hidden states to the sampled tokens before the head).
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from app.accounting import blocks
from app.accounting.flops import Causal, transformer_forward
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig

ALLREDUCES_PER_LAYER = 2
"""Megatron-style tensor parallelism: one after attention's output projection, one after
the MLP's down projection (Shoeybi et al. 2019, section 3)."""


@dataclass(frozen=True, slots=True)
class Hardware:
    """One GPU as the roofline sees it."""

    peak_flop_per_sec: float
    """Dense peak of one GPU at the compute dtype."""
    bandwidth_bytes_per_sec: float
    flops_efficiency: float
    memory_efficiency: float
    interconnect_bytes_per_sec: float | None
    """Per direction, per GPU; needed only with tensor_parallel > 1."""
    allreduce_latency_s: float


@dataclass(slots=True)
class Pass:
    """One forward pass on one GPU."""

    flops: float
    """Matmul FLOPs one GPU does (the pass's total / tensor_parallel)."""
    bytes: float
    """Bytes one GPU reads and writes: its share of the weights, the KV cache read and the
    new entries written."""
    compute_seconds: float
    memory_seconds: float
    communication_seconds: float
    """2 ring all-reduces per layer of (tokens x d_model) activations: 2(tp-1)/tp of the
    message crosses each link (nccl-tests' bus bandwidth), plus a fixed latency each."""
    seconds: float
    """max(compute, memory) + communication."""
    bound: Literal["compute", "memory"]

    __pydantic_config__ = RECORD


def run(hw: Hardware, *, flops: float, bytes: float, tensor_parallel: int, comm_seconds: float) -> Pass:
    compute = flops / tensor_parallel / (hw.peak_flop_per_sec * hw.flops_efficiency)
    memory = bytes / (hw.bandwidth_bytes_per_sec * hw.memory_efficiency)
    return Pass(flops=flops / tensor_parallel, bytes=bytes, compute_seconds=compute, memory_seconds=memory,
                communication_seconds=comm_seconds, seconds=max(compute, memory) + comm_seconds,
                bound="compute" if compute >= memory else "memory")


def allreduce_seconds(cfg: TransformerConfig, hw: Hardware, *, tokens: int, act_bytes: int,
                      tensor_parallel: int) -> float:
    if tensor_parallel == 1:
        return 0.0
    message = tokens * cfg.d_model * act_bytes
    assert hw.interconnect_bytes_per_sec is not None
    ring = 2 * (tensor_parallel - 1) / tensor_parallel * message / hw.interconnect_bytes_per_sec
    return ALLREDUCES_PER_LAYER * cfg.n_layers * (ring + hw.allreduce_latency_s)


@lru_cache(maxsize=4096)
def prefill_flops(cfg: TransformerConfig, *, prompt: int, sequences: int = 1,
                  causal: Causal = "halved") -> int:
    """Forward FLOPs of `sequences` prompts of `prompt` tokens, the LM head on the last
    position only. Attention over the causal triangle by default (FlashAttention skips
    masked tiles); "full" scores every pair, as eager attention does."""
    fwd = transformer_forward(cfg, sequences, prompt, causal=causal)
    return fwd.total - fwd.lm_head * (prompt - 1) // prompt


def prefill_pass(cfg: TransformerConfig, hw: Hardware, *, prompt: int, sequences: int, weights_bytes: int,
                 cache_bytes: int, act_bytes: int, tensor_parallel: int) -> Pass:
    """`sequences` prompts of `prompt` tokens in one forward on one GPU: this GPU's weights read
    once (`weights_bytes`) and each prompt's cache written (`cache_bytes` per sequence); FLOPs
    and all-reduced tokens are `sequences` times one prompt's."""
    comm = allreduce_seconds(cfg, hw, tokens=sequences * prompt, act_bytes=act_bytes,
                             tensor_parallel=tensor_parallel)
    return run(hw, flops=sequences * prefill_flops(cfg, prompt=prompt),
               bytes=weights_bytes + sequences * cache_bytes, tensor_parallel=tensor_parallel,
               comm_seconds=comm)


@lru_cache(maxsize=4096)
def decode_flops(cfg: TransformerConfig, *, context: int, mla_cache: str = "latent") -> int:
    """FLOPs of one decoded token of one sequence: every matmul on one token (top_k experts
    in an MoE layer) plus its query scored against, and weighting, `context` cached keys and
    values, as each layer's attention block reads them (a windowed layer reads at most its
    window, as FlashAttention's window_size and vLLM do; latent attention depends on what is
    cached, `mla_cache`: blocks/latent.py)."""
    one = transformer_forward(cfg, 1, 1, causal="full")
    matmuls = one.total - one.attention_scores - one.attention_values
    return matmuls + sum(n * layer.attention.decode_flops(context=context, mla_cache=mla_cache)
                         for layer, n in blocks.distinct(cfg))


def experts_read(cfg: TransformerConfig, tokens: int) -> float:
    """Expected routed experts one MoE layer reads for `tokens` tokens (blocks/experts.py)."""
    return blocks.routed(cfg).experts_read(tokens)


def decode_step_bytes(cfg: TransformerConfig, *, weights_bytes: int, routed_bytes: int, embedding_bytes: int,
                      batch: int, cache_bytes: int, new_bytes: int) -> int:
    """Bytes one decode step of `batch` sequences moves on one GPU: its weights read once, less
    the routed experts no token of the batch picks (experts_read; `routed_bytes` is this GPU's
    share of them) and less the embedding tables a step only looks rows up in
    (`embedding_bytes`, this GPU's share of the token and position tables; kept when the LM
    head reads the tied table whole; the batch's own rows are too few to count), plus each
    sequence's cache read (`cache_bytes`) and its new entries written (`new_bytes`)."""
    experts = blocks.routed(cfg)
    if experts is not None:
        weights_bytes -= round(routed_bytes * (1 - experts.experts_read(batch) / cfg.n_experts))
    if not cfg.tied_embeddings:
        weights_bytes -= embedding_bytes
    return weights_bytes + batch * (cache_bytes + new_bytes)
