"""Hybrids whose token mixer is not attention in every layer, as transformers 5.23 builds them:
- qwen3_next (Qwen3-Next): layer_types (default: every full_attention_interval-th layer full
  attention, the others linear_attention) mix gated DeltaNet (linear_num_*_heads, linear_*_head_dim,
  linear_conv_kernel_dim) with gated attention (q_proj twice as wide, head-wide q/k norms); the
  MLPs are Qwen2-MoE's routed experts with a gated shared expert, dense on mlp_only_layers.
- jamba (Jamba): Mamba-1 layers (mamba_expand, mamba_dt_rank, with RMSNorms on dt, B and C) but where
  i % attn_layer_period == attn_layer_offset; routed experts (no shared one) where
  i % expert_layer_period == expert_layer_offset, a gated MLP elsewhere.

The Mamba-2 hybrids (bamba, nemotron_h, falcon_h1) are read in mamba2.py.
"""

import math
from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf.family import LLAMA_KEY_NAMES, LLAMA_KEYS, Family
from app.accounting.hf.moe import common, gated, mlp_only, nullable
from app.accounting.hf.values import boolean, integer

LINEAR, FULL = "linear_attention", "full_attention"


def _types(raw: dict, n: int, default: list[str]) -> list[str]:
    types = raw.get("layer_types") or default
    if not isinstance(types, list) or len(types) != n or any(t not in (LINEAR, FULL) for t in types):
        raise InvalidInput(
            "layer_types", f"must list {n} entries (num_hidden_layers), each {LINEAR!r} or {FULL!r}"
        )
    return types


# Each mixer's fields: a config whose layers are all attention (attn_layer_indices naming every layer)
# builds none of them, so they are left at their defaults rather than refused.
_MIXER_FIELDS = {
    "gated_delta_net": (
        "linear_key_heads",
        "linear_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel",
    ),
    "mamba2": ("ssm_heads", "ssm_head_dim", "ssm_groups", "ssm_chunk_size"),
    "mamba": ("ssm_inner", "ssm_dt_rank", "ssm_dt_bc_norms"),
    "attention_mamba2": ("ssm_out_bias", "ssm_norm"),
    "ssm": ("ssm_state_size", "ssm_conv_kernel", "ssm_conv_bias", "ssm_proj_bias"),
}


def kv_heads(raw: dict, fields: dict[str, Any]) -> int:
    """num_key_value_heads, 8 where absent (the hybrids' configs' default); null is every head (MHA)."""
    return fields["n_heads"] if raw.get("num_key_value_heads", 8) is None else integer(
        raw, "num_key_value_heads", 8)


def unused_dropped(fields: dict[str, Any]) -> dict[str, Any]:
    present = set(fields["layer_mixers"])
    if "attention_mamba2" in present:
        present.add("mamba2")
    if present & {"mamba", "mamba2"}:
        present.add("ssm")
    return {
        k: v
        for k, v in fields.items()
        if not any(k in names and kind not in present for kind, names in _MIXER_FIELDS.items())
    }


def _qwen3_next(raw: dict, warnings: list[str]) -> dict[str, Any]:
    fields = common(
        raw,
        dict(
            num_hidden_layers=48,
            hidden_size=2048,
            num_attention_heads=16,
            vocab_size=151936,
            intermediate_size=5632,
            max_position_embeddings=32768,
        ),
    )
    n = fields["n_layers"]
    every = integer(raw, "full_attention_interval", 4)
    if every < 1:
        raise InvalidInput("full_attention_interval", f"must be 1 or more, got {every}")
    types = _types(raw, n, [FULL if (i + 1) % every == 0 else LINEAR for i in range(n)])
    fields |= dict(
        n_kv_heads=integer(raw, "num_key_value_heads", 2),
        head_dim=integer(raw, "head_dim", 256),
        mlp=gated(raw, warnings),
        attn_bias=boolean(raw, "attention_bias", False),
        qk_norm="head",
        attn_output_gate=True,
        layer_mixers=tuple("gated_delta_net" if t == LINEAR else "attention" for t in types),
        linear_key_heads=integer(raw, "linear_num_key_heads", 16),
        linear_value_heads=integer(raw, "linear_num_value_heads", 32),
        linear_key_head_dim=integer(raw, "linear_key_head_dim", 128),
        linear_value_head_dim=integer(raw, "linear_value_head_dim", 128),
        linear_conv_kernel=integer(raw, "linear_conv_kernel_dim", 4),
    )
    experts = integer(raw, "num_experts", 512)
    if experts:  # Qwen3NextDecoderLayer: experts where num_experts > 0 and the sparse step falls
        fields |= dict(
            n_experts=experts,
            top_k=nullable(raw, "num_experts_per_tok", 10),
            d_ff_expert=integer(raw, "moe_intermediate_size", 512),
            moe_every=integer(raw, "decoder_sparse_step", 1),
            mlp_only_layers=mlp_only(raw, n, warnings),
            n_shared_experts=1,
            shared_expert_gate=True,
            d_ff_shared=integer(raw, "shared_expert_intermediate_size", 512),
        )
    return unused_dropped(fields)


def _period(raw: dict, prefix: str, period: int, offset: int) -> tuple[int, int]:
    every, at = integer(raw, f"{prefix}_period", period), integer(raw, f"{prefix}_offset", offset)
    if every < 1:
        raise InvalidInput(f"{prefix}_period", f"must be 1 or more, got {every}")
    if not 0 <= at < every:
        raise InvalidInput(f"{prefix}_offset", f"must be in [0, {prefix}_period), got {at}")
    return every, at


def _jamba(raw: dict, warnings: list[str]) -> dict[str, Any]:
    fields = common(
        raw,
        dict(
            num_hidden_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            vocab_size=65536,
            intermediate_size=14336,
            max_position_embeddings=262144,
        ),
    )
    n, d = fields["n_layers"], fields["d_model"]
    every, at = _period(raw, "attn_layer", 8, 4)
    moe_every, moe_at = _period(raw, "expert_layer", 2, 1)
    rank = raw.get("mamba_dt_rank", "auto")
    rank = math.ceil(d / 16) if rank == "auto" else integer(raw, "mamba_dt_rank")
    fields |= dict(
        n_kv_heads=kv_heads(raw, fields),
        head_dim=d // fields["n_heads"] if fields["n_heads"] > 0 else None,
        mlp=gated(raw, warnings),
        layer_mixers=tuple("attention" if i % every == at else "mamba" for i in range(n)),
        ssm_inner=integer(raw, "mamba_expand", 2) * d,
        ssm_dt_rank=rank,
        ssm_dt_bc_norms=True,
        ssm_state_size=integer(raw, "mamba_d_state", 16),
        ssm_conv_kernel=integer(raw, "mamba_d_conv", 4),
        ssm_conv_bias=boolean(raw, "mamba_conv_bias", True),
        ssm_proj_bias=boolean(raw, "mamba_proj_bias", False),
    )
    experts = integer(raw, "num_experts", 16)
    routed = [i for i in range(n) if i % moe_every == moe_at]
    if experts > 1 and routed:  # JambaSparseMoeBlock where a layer has more than one expert
        layout = (
            dict(moe_every=moe_every)
            if moe_at == moe_every - 1
            else dict(mlp_only_layers=tuple(i for i in range(n) if i not in routed))
        )
        fields |= dict(n_experts=experts, top_k=integer(raw, "num_experts_per_tok", 2), **layout)
    return unused_dropped(fields)


_LINEAR_NAMES = {"linear_key_heads": "linear_num_key_heads",
                 "linear_value_heads": "linear_num_value_heads",
                 "linear_key_head_dim": "linear_key_head_dim",
                 "linear_value_head_dim": "linear_value_head_dim",
                 "linear_conv_kernel": "linear_conv_kernel_dim", "layer_mixers": "layer_types"}

_MOE = {"n_experts": "num_experts", "top_k": "num_experts_per_tok", "d_ff_expert": "moe_intermediate_size",
        "d_ff_shared": "shared_expert_intermediate_size", "moe_every": "decoder_sparse_step",
        "mlp_only_layers": "mlp_only_layers"}

_MAMBA1_NAMES = {"ssm_inner": "mamba_expand", "ssm_dt_rank": "mamba_dt_rank",
                 "ssm_state_size": "mamba_d_state", "ssm_conv_kernel": "mamba_d_conv",
                 "layer_mixers": "attn_layer_period", "n_experts": "num_experts",
                 "top_k": "num_experts_per_tok", "moe_every": "expert_layer_period",
                 "mlp_only_layers": "expert_layer_offset"}

FAMILIES: tuple[Family, ...] = (
    Family("qwen3_next", _qwen3_next, LLAMA_KEYS | {
            "attention_bias", "layer_types", "full_attention_interval", "linear_num_key_heads",
            "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
            "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers"},
           {**LLAMA_KEY_NAMES, **_LINEAR_NAMES, **_MOE}),
    Family("jamba", _jamba, LLAMA_KEYS | {
            "attn_layer_period", "attn_layer_offset", "expert_layer_period", "expert_layer_offset",
            "num_experts", "num_experts_per_tok", "mamba_d_state", "mamba_d_conv", "mamba_expand",
            "mamba_dt_rank", "mamba_conv_bias", "mamba_proj_bias"},
           {**LLAMA_KEY_NAMES, **_MAMBA1_NAMES}),
)
