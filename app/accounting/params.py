"""Parameter counts by component, exact against transformers' `model.parameters()`.

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

from app.accounting.records import RECORD
from app.accounting.transformer import NORMS_PER_BLOCK, TransformerConfig


def one_norm(cfg: TransformerConfig, width: int) -> int:
    """A norm over `width` features: a weight, plus a bias for LayerNorm with biases."""
    if cfg.norm == "layernorm_no_affine":
        return 0
    return width * (2 if cfg.norm == "layernorm" and cfg.bias else 1)


def norm_params(cfg: TransformerConfig) -> int:
    """One d_model-wide norm (a block norm, or the final one)."""
    return one_norm(cfg, cfg.d_model)


def latent_down_params(cfg: TransformerConfig) -> int:
    """Latent attention's down projections with their biases: x to the query latent (when
    there is one) and to the key/value latent with the shared rotary key."""
    if not cfg.mla:
        return 0
    widths = (cfg.q_lora_rank or 0) + cfg.kv_lora_rank + cfg.qk_rope_head_dim
    return widths * (cfg.d_model + cfg.has_attn_bias)


def attention_params(cfg: TransformerConfig) -> int:
    """One layer's attention projections with their biases, norms excluded."""
    d = cfg.d_model
    if cfg.mla:
        h, nope, rope, v = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        q_up = (cfg.q_lora_rank or d) * h * (nope + rope)
        kv_up = cfg.kv_lora_rank * h * (nope + v)
        return latent_down_params(cfg) + q_up + kv_up + h * v * d + d * cfg.has_attn_bias
    q_width, kv_width = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
    weights = d * q_width + 2 * d * kv_width + q_width * d
    biases = (q_width + 2 * kv_width) * cfg.has_qkv_bias + d * cfg.has_attn_bias
    return weights + biases


def attention_norm_params(cfg: TransformerConfig) -> int:
    """Norms inside one layer's attention: q/k norms, or latent attention's two latent norms."""
    if cfg.mla:
        return one_norm(cfg, cfg.kv_lora_rank) + (one_norm(cfg, cfg.q_lora_rank) if cfg.q_lora_rank else 0)
    if cfg.qk_norm == "head":
        return 2 * one_norm(cfg, cfg.hd)
    if cfg.qk_norm == "projection":
        return one_norm(cfg, cfg.n_heads * cfg.hd) + one_norm(cfg, cfg.kv_heads * cfg.hd)
    return 0


def mlp_weights(cfg: TransformerConfig, width: int) -> int:
    """A bias-free MLP of hidden `width`: three matrices when gated, two otherwise."""
    return (3 if cfg.gated else 2) * cfg.d_model * width


def mlp_params(cfg: TransformerConfig) -> int:
    """One dense MLP of width d_ff with its biases."""
    d, f = cfg.d_model, cfg.ff
    biases = (2 * f + d) if cfg.gated else (f + d)
    return mlp_weights(cfg, f) + biases * cfg.has_mlp_bias


def expert_params(cfg: TransformerConfig) -> int:
    """One routed expert."""
    return mlp_weights(cfg, cfg.ff_expert) if cfg.moe else 0


def shared_params(cfg: TransformerConfig) -> int:
    """One MoE layer's shared experts, with Qwen2-MoE's d_model -> 1 gate."""
    return mlp_weights(cfg, cfg.ff_shared) + cfg.d_model * cfg.shared_expert_gate if cfg.moe else 0


def router_params(cfg: TransformerConfig) -> int:
    return cfg.d_model * cfg.n_experts if cfg.moe else 0


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


@lru_cache(maxsize=2048)
def layer_params(cfg: TransformerConfig, moe: bool) -> LayerParams:
    """A dense layer (moe=False) or a mixture-of-experts layer of this model."""
    norms = NORMS_PER_BLOCK[cfg.norm_layout] * norm_params(cfg) + attention_norm_params(cfg)
    if not (moe and cfg.moe):
        return LayerParams(attention_params(cfg), norms, mlp_params(cfg), 0, 0, 0)
    return LayerParams(attention_params(cfg), norms, 0, router_params(cfg),
                       cfg.n_experts * expert_params(cfg), shared_params(cfg))


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
    n_moe = cfg.n_moe_layers
    n_dense = cfg.n_layers - n_moe
    dense, sparse = layer_params(cfg, False), layer_params(cfg, True)
    per_kind = ((n_dense, dense), (n_moe, sparse))

    def total_of(field: str) -> int:
        return sum(n * getattr(layer, field) for n, layer in per_kind)

    layers = sum(n * layer.total for n, layer in per_kind)
    embedding = token + position + lm_head
    total = embedding + layers + norm_params(cfg)
    routed_active = n_moe * (cfg.top_k or 0) * expert_params(cfg)
    active = total - total_of("routed_experts") + routed_active
    moe_parts = {f: total_of(f) for f in ("router", "routed_experts", "shared_experts")}
    return ParamCount(
        total=total, embedding=embedding, non_embedding=total - embedding,
        token_embedding=token, position_embedding=position, lm_head=lm_head,
        attention=total_of("attention"), mlp=total_of("dense_mlp"),
        norms=total_of("norms") + norm_params(cfg),
        per_layer=max(layer.total for n, layer in per_kind if n), active=active,
        active_non_embedding=active - embedding, **moe_parts, routed_experts_active=routed_active,
        buffers=n_moe * cfg.n_experts if cfg.router_score_correction else 0,
    )
