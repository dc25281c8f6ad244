"""Transient memory a serving engine needs beside weights and KV cache.

vLLM sizes its KV cache by running one dummy forward over `max_num_batched_tokens` tokens
(its profile run) and keeping what that forward peaked at off the cache budget
(vllm/v1/worker/gpu_worker.py, determine_available_memory). Here that peak is estimated as
the largest live set of one layer, since a forward frees each layer's intermediates before
the next: the residual stream and its normed copy, plus either attention's projections
(FlashAttention keeps no score matrix) or the MLP's hidden activations, or the sampler's
fp32 logits for the sequences sampled at once, each layer's blocks answering their part
(app/accounting/blocks/). Everything a tensor-parallel rank holds of a split tensor is divided
by tensor_parallel; the residual stream is whole on each rank.
"""

from dataclasses import dataclass

from app.accounting import blocks
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig
from app.accounting.units import GIB

LOGIT_BYTES = 4
"""The sampler upcasts logits to fp32 (vLLM's Sampler) and keeps them beside their softmax."""

DEFAULT_OVERHEAD_BYTES = GIB
"""CUDA context, cuBLAS/NCCL workspaces and captured CUDA graphs: what vLLM's start-up log
reports as non-torch memory plus graph memory is 0.5 to 1.5 GiB on one H100; 1 GiB stated."""


@dataclass(slots=True)
class Workspace:
    """Peak transient bytes of one forward on one GPU, by phase; the largest is kept."""

    tokens: int
    """Tokens in the forward (max_num_batched_tokens)."""
    attention_bytes: int
    """Residual + normed input + q/k/v + attention output, (tokens x width) each."""
    mlp_bytes: int
    """Residual + normed input + the MLP's hidden activations (gate, up and their product);
    in a mixture-of-experts layer, the routed copies (tokens x top_k) and the router's fp32 logits."""
    logits_bytes: int
    """fp32 logits and probabilities for the sequences sampled in one step."""
    bytes: int
    """max of the three."""

    __pydantic_config__ = RECORD


def workspace(cfg: TransformerConfig, *, tokens: int, sequences: int, act_bytes: int,
              tensor_parallel: int = 1) -> Workspace:
    d, tp = cfg.d_model, tensor_parallel
    residual = 2 * tokens * d * act_bytes
    # Every layer's attention holds the same; the MLPs differ by kind (dense, gated, experts).
    attention = residual + tokens * blocks.model_attention(cfg).workspace_values(tp) * act_bytes
    mlp = residual + max(layer.mlp.workspace_bytes(tokens=tokens, act_bytes=act_bytes, tp=tp)
                         for layer, _ in blocks.distinct(cfg))
    logits = 2 * min(sequences, tokens) * cfg.vocab_size * LOGIT_BYTES
    return Workspace(tokens=tokens, attention_bytes=attention, mlp_bytes=mlp, logits_bytes=logits,
                     bytes=max(attention, mlp, logits))
