"""Parameter counts by component, exact against transformers' `model.parameters()`: each layer's
summed from its blocks' weight lists (app/accounting/blocks/), the embeddings, LM head and final
norm here.

Conventions:
- Tied embeddings are counted once (as `parameters()` yields a shared tensor once).
- Experts and routers have no biases; a router is a d_model x n_experts matrix.
- DeepSeek-V3's score-correction bias is a buffer in transformers, not a parameter: it is
  reported as `buffers` and left out of every parameter total.
- Active parameters are what one token's forward pass reads: every dense part (embeddings
  and head included), the shared experts, the routers, and top_k of the n_experts routed
  experts in each MoE layer. Routing is assumed dropless.
"""

from dataclasses import dataclass
from functools import lru_cache

from app.accounting import blocks
from app.accounting.blocks.base import one_norm
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig

__all__ = ["one_norm", "norm_params", "LayerParams", "layer_params", "ParamCount", "count_params"]


def norm_params(cfg: TransformerConfig) -> int:
    """One d_model-wide norm (a block norm, or the final one)."""
    return one_norm(cfg, cfg.d_model)


@dataclass(frozen=True, slots=True)
class LayerParams:
    """One layer's parameters by component."""

    attention: int
    norms: int
    dense_mlp: int
    router: int
    routed_experts: int
    shared_experts: int

    @property
    def total(self) -> int:
        return (self.attention + self.norms + self.dense_mlp + self.router + self.routed_experts
                + self.shared_experts)


@lru_cache(maxsize=4096)
def layer_params(layer: blocks.Layer) -> LayerParams:
    """One layer's parameters, summed from its blocks' weights (block norms, q/k or latent norms in
    `norms`)."""
    p = layer.params
    return LayerParams(p.get("attention", 0), p.get("norms", 0), p.get("mlp", 0), p.get("router", 0),
                       p.get("routed_experts", 0), p.get("shared_experts", 0))


@dataclass(frozen=True, slots=True)
class ParamCount:
    """Parameters by component; tied embeddings are counted once."""

    total: int
    embedding: int
    """Token and position embeddings, and an untied LM head."""
    non_embedding: int
    """total - embedding: the N of Kaplan et al. (2020)."""
    token_embedding: int
    position_embedding: int
    lm_head: int
    """0 when tied to the token embedding."""
    attention: int
    """All layers: q, k, v and output projections with their biases (latent attention's down
    and up projections included); their norms are in `norms`."""
    mlp: int
    """The MLPs of dense layers (every layer of a dense model); a mixture-of-experts layer's
    parts are router, routed_experts and shared_experts."""
    norms: int
    """Block norms, q/k norms, latent attention's latent norms, and the final norm."""
    per_layer: int
    """The largest layer's parameters (an MoE layer in a mixture-of-experts model)."""
    active: int
    """Parameters one token's forward pass reads: total less the routed experts it does not
    use (top_k of n_experts per MoE layer). Equal to total for a dense model."""
    active_non_embedding: int
    """active - embedding."""
    router: int
    """Routers: d_model x n_experts per MoE layer."""
    routed_experts: int
    """All routed experts of all MoE layers."""
    routed_experts_active: int
    """top_k routed experts per MoE layer."""
    shared_experts: int
    """Shared experts (and Qwen2-MoE's shared-expert gate) of all MoE layers."""
    buffers: int
    """Non-parameter tensors of the checkpoint: DeepSeek-V3's router score-correction bias
    (n_experts floats per MoE layer). Not in any parameter total."""

    __pydantic_config__ = RECORD


@lru_cache(maxsize=1024)
def count_params(cfg: TransformerConfig) -> ParamCount:
    token = cfg.vocab_size * cfg.d_model
    position = cfg.max_seq_len * cfg.d_model if cfg.position == "learned" else 0
    lm_head = 0 if cfg.tied_embeddings else cfg.vocab_size * cfg.d_model
    per_kind = [(n, layer_params(layer), layer.mlp) for layer, n in blocks.distinct(cfg)]

    def total_of(field: str) -> int:
        return sum(n * getattr(layer, field) for n, layer, _ in per_kind)

    layers = sum(n * layer.total for n, layer, _ in per_kind)
    embedding = token + position + lm_head
    total = embedding + layers + norm_params(cfg)
    routed_active = sum(n * mlp.routed_active_params for n, _, mlp in per_kind)
    active = total - total_of("routed_experts") + routed_active
    moe_parts = {f: total_of(f) for f in ("router", "routed_experts", "shared_experts")}
    return ParamCount(
        total=total, embedding=embedding, non_embedding=total - embedding,
        token_embedding=token, position_embedding=position, lm_head=lm_head,
        attention=total_of("attention"), mlp=total_of("dense_mlp"),
        norms=total_of("norms") + norm_params(cfg),
        per_layer=max(layer.total for _, layer, _ in per_kind), active=active,
        active_non_embedding=active - embedding, **moe_parts, routed_experts_active=routed_active,
        buffers=sum(n * mlp.buffers for n, _, mlp in per_kind),
    )
