"""The shapes no model has, refused naming the field to change: TransformerConfig runs these on
every instance (transformer.py), so the engine never holds a config the API would refuse."""

from typing import TYPE_CHECKING

from app.accounting.errors import InvalidInput

if TYPE_CHECKING:
    from app.accounting.transformer import TransformerConfig

_MLA = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MOE_ONLY = ("top_k", "d_ff_expert", "d_ff_shared")
MIXERS = ("attention", "mamba", "mamba2", "gated_delta_net", "attention_mamba2", "none")
_SSM = ("ssm_heads", "ssm_head_dim")
_MAMBA1 = ("ssm_inner", "ssm_dt_rank")
_LINEAR = ("linear_key_heads", "linear_value_heads", "linear_key_head_dim", "linear_value_head_dim")


def check(c: "TransformerConfig") -> None:
    """Refuse configs no model has, naming the field to change."""
    if c.n_heads % c.kv_heads:
        raise InvalidInput("n_kv_heads", f"{c.kv_heads} must divide n_heads ({c.n_heads})")
    if c.head_dim is None and not c.mla and c.d_model % c.n_heads:
        raise InvalidInput("n_heads", f"{c.n_heads} must divide d_model ({c.d_model}) unless head_dim is set")
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = getattr(c, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6
        ):
            raise InvalidInput(name, f"must be a positive number below 1e6, or null; got {value!r}"[:120])
    if c.global_every is not None and c.sliding_window is None and c.attention_chunk_size is None:
        raise InvalidInput(
            "global_every",
            "needs sliding_window or attention_chunk_size (the window or chunk of the other layers)",
        )
    if c.attention_chunk_size is not None and c.sliding_window is not None:
        raise InvalidInput(
            "attention_chunk_size",
            "local layers attend either in a sliding window or in "
            "chunks; set one of sliding_window and attention_chunk_size",
        )
    if c.mla:
        if c.transformers_caches_all_heads:
            raise InvalidInput(
                "transformers_caches_all_heads",
                "latent attention caches the latent, not per-head keys and values; use false",
            )
        if c.qk_norm != "none":
            raise InvalidInput("qk_norm", "latent attention has its own latent norms; use 'none'")
        for name in _MLA[1:]:
            if getattr(c, name) is None:
                raise InvalidInput(name, "is required with kv_lora_rank (multi-head latent attention)")
    else:
        for name in _MLA:
            if getattr(c, name) is not None:
                raise InvalidInput(name, "is a latent-attention width; it needs kv_lora_rank")
    _check_experts(c)
    _check_mixers(c)
    if c.attention_sinks and c.kv_lora_rank is not None:
        raise InvalidInput(
            "attention_sinks", "are counted for grouped-query attention; latent attention has none"
        )


def _check_experts(c: "TransformerConfig") -> None:
    if type(c.mlp_only_layers) is not tuple or any(
        type(i) is not int or not 0 <= i < c.n_layers for i in c.mlp_only_layers
    ):
        raise InvalidInput("mlp_only_layers", f"must list layer indices in [0, {c.n_layers - 1}]")
    if not c.moe:
        for name in _MOE_ONLY:
            if getattr(c, name) is not None:
                raise InvalidInput(name, "describes experts; it needs n_experts")
        for name, neutral in (
            ("n_shared_experts", 0),
            ("shared_expert_gate", False),
            ("first_dense_layers", 0),
            ("moe_every", 1),
            ("mlp_only_layers", ()),
            ("router_score_correction", False),
            ("expert_bias", False),
            ("router_bias", False),
        ):
            if getattr(c, name) != neutral:
                raise InvalidInput(name, "describes experts; it needs n_experts")
        return
    if c.top_k is None:
        raise InvalidInput("top_k", "is required with n_experts (routed experts per token)")
    if c.top_k > c.n_experts:
        raise InvalidInput("top_k", f"{c.top_k} exceeds n_experts ({c.n_experts})")
    if c.n_shared_experts == 0 and (c.d_ff_shared is not None or c.shared_expert_gate):
        name = "d_ff_shared" if c.d_ff_shared is not None else "shared_expert_gate"
        raise InvalidInput(name, "describes shared experts; it needs n_shared_experts >= 1")


def _check_mixers(c: "TransformerConfig") -> None:
    mixers = c.layer_mixers
    if (
        type(mixers) is not tuple
        or (mixers and len(mixers) != c.n_layers)
        or any(m not in MIXERS for m in mixers)
    ):
        raise InvalidInput(
            "layer_mixers",
            f"must list {c.n_layers} entries (n_layers), each one of "
            f"{', '.join(MIXERS)}; or be empty (attention everywhere)",
        )
    ssm = {"mamba", "mamba2", "attention_mamba2"} & set(mixers)
    if ssm and c.ssm_state_size is None:
        raise InvalidInput("ssm_state_size", "is required with mamba or mamba2 layers in layer_mixers")
    if not ssm and c.ssm_state_size is not None:
        raise InvalidInput("ssm_state_size", "describes mamba or mamba2 layers; layer_mixers lists none")
    if "mamba" not in mixers and c.ssm_dt_bc_norms:
        raise InvalidInput("ssm_dt_bc_norms", "describes mamba layers; layer_mixers lists none")
    for kind, names in (("mamba2", _SSM), ("mamba", _MAMBA1), ("gated_delta_net", _LINEAR)):
        if kind in mixers or (kind == "mamba2" and "attention_mamba2" in mixers):
            for name in names:
                if getattr(c, name) is None:
                    raise InvalidInput(name, f"is required with {kind} layers in layer_mixers")
        else:
            for name in names:
                if getattr(c, name) is not None:
                    raise InvalidInput(name, f"describes {kind} layers; layer_mixers lists none")
    if c.ssm_heads is not None and c.ssm_heads % c.ssm_groups:
        raise InvalidInput("ssm_groups", f"{c.ssm_groups} must divide ssm_heads ({c.ssm_heads})")
    if "gated_delta_net" in mixers and c.linear_value_heads % c.linear_key_heads:
        raise InvalidInput(
            "linear_value_heads",
            f"{c.linear_value_heads} must be a multiple of linear_key_heads ({c.linear_key_heads})",
        )
    free = c.mlp_free_layers
    if type(free) is not tuple or any(type(i) is not int or not 0 <= i < c.n_layers for i in free):
        raise InvalidInput("mlp_free_layers", f"must list layer indices in [0, {c.n_layers - 1}]")
    empty = [i for i in free if mixers and mixers[i] == "none"]
    if empty:
        raise InvalidInput(
            "mlp_free_layers", f"layer {empty[0]} has neither a mixer (layer_mixers 'none') nor an MLP"
        )
    if (free or "none" in mixers) and c.norm_layout != "pre":
        raise InvalidInput("norm_layout", "a layer without a mixer or an MLP is counted with pre norms only")
    if mixers and not {"attention", "attention_mamba2"} & set(mixers):
        for name in ("sliding_window", "attention_chunk_size", "kv_lora_rank"):
            if getattr(c, name) is not None:
                raise InvalidInput(name, "describes attention layers; layer_mixers lists none")
    if mixers and c.mla and any(m != "attention" for m in mixers):
        raise InvalidInput(
            "layer_mixers", "latent attention is not counted beside state-space or linear attention layers"
        )
