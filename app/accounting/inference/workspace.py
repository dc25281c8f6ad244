"""Transient memory of one forward beside weights and KV cache, by phase.

What transformers' prefill holds at its peak (engines/hf.py), and SGLang's activations in the
memory it keeps outside its fraction; vLLM's profile run is its own (engines/vllm.py: attention
skipped, a sampler over max_num_seqs rows). The peak is estimated as
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

LOGIT_BYTES = 4
"""The sampler upcasts logits to fp32 (vLLM's Sampler) and keeps them beside their softmax."""


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
    # Token mixers and MLPs differ by kind (attention, Mamba-2, DeltaNet; dense, gated, experts).
    attention = residual + tokens * act_bytes * max(layer.attention.workspace_values(tp)
                                                    for layer, _ in blocks.distinct(cfg))
    mlp = residual + max(layer.mlp.workspace_bytes(tokens=tokens, act_bytes=act_bytes, tp=tp)
                         for layer, _ in blocks.distinct(cfg))
    logits = 2 * min(sequences, tokens) * cfg.vocab_size * LOGIT_BYTES
    return Workspace(tokens=tokens, attention_bytes=attention, mlp_bytes=mlp, logits_bytes=logits,
                     bytes=max(attention, mlp, logits))
