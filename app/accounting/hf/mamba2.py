"""The Mamba-2 hybrids, as transformers 5.23 builds them:
- bamba (Bamba): Mamba-2 layers (mamba_*) but on attn_layer_indices, each with a gated MLP. Its
  mamba_d_head "auto" is mamba_expand x hidden_size / mamba_n_heads, and the inner width must be
  heads x head_dim (BambaConfig refuses otherwise).
- nemotron_h (Nemotron-H): each layer is one norm and one block, by hybrid_override_pattern (M Mamba-2,
  * attention, - a squared-ReLU MLP, E experts) or layers_block_type: the Mamba-2 and attention layers
  have no MLP (mlp_free_layers), the MLP and expert layers no mixer (layer_mixers "none"). Its experts
  are two-matrix MLPs beside one shared expert, routed by DeepSeek-V3's sigmoid router with its
  score-correction buffer; expand, mamba_proj_bias and attention_bias are not read (use_bias biases the
  Mamba-2 projections; its attention has no biases), nor tie_word_embeddings (its head is never tied).
- falcon_h1 (Falcon-H1): attention and Mamba-2 side by side in every layer on one norm, then a gated
  MLP; the Mamba-2 inner width is mamba_d_ssm (or mamba_expand x hidden_size), its out_proj biased by
  projectors_bias and normed only with mamba_rms_norm. Its multipliers and muP vector are scalars and
  a buffer.
"""

from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf.family import LLAMA_KEY_NAMES, LLAMA_KEYS, Family
from app.accounting.hf.hybrid import kv_heads, unused_dropped
from app.accounting.hf.moe import common, gated
from app.accounting.hf.values import alias, boolean, integer


def _heads(raw: dict, inner: int, what: str) -> tuple[int, int]:
    """(mamba_n_heads, mamba_d_head), the head width "auto" being inner / heads, heads x width = inner."""
    heads = integer(raw, "mamba_n_heads", 128)
    head_dim = raw.get("mamba_d_head", "auto")
    head_dim = (inner // heads if heads > 0 else 0) if head_dim == "auto" else integer(raw, "mamba_d_head")
    if heads < 1 or head_dim * heads != inner:
        raise InvalidInput("mamba_d_head", f"mamba_n_heads x mamba_d_head must be {what} ({inner})")
    return heads, head_dim


def _mamba_keys(raw: dict, inner: int, what: str) -> dict[str, Any]:
    """The Mamba-2 fields Bamba and Falcon-H1 spell alike (mamba_*)."""
    heads, head_dim = _heads(raw, inner, what)
    return dict(
        ssm_heads=heads,
        ssm_head_dim=head_dim,
        ssm_state_size=integer(raw, "mamba_d_state", 256),
        ssm_groups=integer(raw, "mamba_n_groups", 1),
        ssm_conv_kernel=integer(raw, "mamba_d_conv", 4),
        ssm_chunk_size=integer(raw, "mamba_chunk_size", 256),
        ssm_conv_bias=boolean(raw, "mamba_conv_bias", True),
        ssm_proj_bias=boolean(raw, "mamba_proj_bias", False),
    )


def _bamba(raw: dict, warnings: list[str]) -> dict[str, Any]:
    fields = common(
        raw,
        dict(
            num_hidden_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            vocab_size=128000,
            intermediate_size=14336,
            max_position_embeddings=262144,
        ),
    )
    n, d = fields["n_layers"], fields["d_model"]
    mamba = _mamba_keys(raw, integer(raw, "mamba_expand", 2) * d,
                        "mamba_expand x hidden_size, as BambaConfig requires")
    attends = raw.get("attn_layer_indices") or []
    if not isinstance(attends, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in attends):
        raise InvalidInput("attn_layer_indices", f"must be a list of layer indices, got {attends!r}"[:120])
    mixers = tuple("attention" if i in set(attends) else "mamba2" for i in range(n))
    return unused_dropped(
        fields
        | dict(
            n_kv_heads=kv_heads(raw, fields),
            head_dim=fields["d_model"] // fields["n_heads"] if fields["n_heads"] > 0 else None,
            mlp=gated(raw, warnings),
            attn_bias=boolean(raw, "attention_bias", False),
            mlp_bias=boolean(raw, "mlp_bias", False),
            layer_mixers=mixers,
        )
        | mamba
    )


NEMOTRON_BLOCKS = {
    "M": "linear_attention",
    "*": "full_attention",
    "-": "mlp",
    "E": "moe",
    "mamba": "linear_attention",
    "attention": "full_attention",
}


def _nemotron_types(raw: dict) -> tuple[str, list[str]]:
    """(the key read, each layer's block) from hybrid_override_pattern or layers_block_type."""
    for key in ("layers_block_type", "layer_types"):
        if raw.get(key) is not None:
            value = raw[key]
            if (
                not isinstance(value, list)
                or not value
                or any(
                    NEMOTRON_BLOCKS.get(t, t) not in ("linear_attention", "full_attention", "mlp", "moe")
                    for t in value
                    if isinstance(t, str)
                )
                or not all(isinstance(t, str) for t in value)
            ):
                raise InvalidInput(
                    key, "must list each layer's block: linear_attention, full_attention, mlp or moe"
                )
            return key, [NEMOTRON_BLOCKS.get(t, t) for t in value]
    pattern = raw.get("hybrid_override_pattern")
    if pattern is None:
        return "layers_block_type", ["linear_attention", "moe", "full_attention", "mlp"]
    if not isinstance(pattern, str) or not pattern or any(ch not in "M*-E" for ch in pattern):
        raise InvalidInput(
            "hybrid_override_pattern",
            "must be a string of M (Mamba-2), * (attention), - (MLP) and E (experts), one per layer",
        )
    return "hybrid_override_pattern", [NEMOTRON_BLOCKS[ch] for ch in pattern]


def _nemotron_h(raw: dict, warnings: list[str]) -> dict[str, Any]:
    key, types = _nemotron_types(raw)
    if raw.get("moe_latent_size") is not None and "moe" in types:
        raise InvalidInput("moe_latent_size", "experts in a latent (fc1/fc2_latent_proj) are not counted yet")
    act = raw.get("mlp_hidden_act", "relu2")
    if act != "relu2":
        warnings.append(f"mlp_hidden_act {act!r}: counted as the same two matrices as relu2")
    raw_n = {**raw, "num_hidden_layers": len(types)}
    fields = common(
        raw_n,
        dict(
            num_hidden_layers=len(types),
            hidden_size=4096,
            num_attention_heads=32,
            vocab_size=131072,
            intermediate_size=21504,
            max_position_embeddings=4096,
        ),
    )
    mixers = tuple(
        {"linear_attention": "mamba2", "full_attention": "attention"}.get(t, "none") for t in types
    )
    fields |= dict(
        n_kv_heads=kv_heads(raw, fields),
        head_dim=integer(raw, "head_dim", 128),
        mlp="relu2",
        attn_bias=False,  # attention_bias is not read
        mlp_bias=boolean(raw, "mlp_bias", False),
        layer_mixers=mixers,
        tied_embeddings=False,  # NemotronHForCausalLM ties nothing (_tied_weights_keys = {})
        mlp_free_layers=tuple(i for i, t in enumerate(types) if t in ("linear_attention", "full_attention")),
        ssm_heads=integer(raw, "mamba_num_heads", 128),
        ssm_head_dim=integer(raw, "mamba_head_dim", 64),
        ssm_state_size=integer(raw, "ssm_state_size", 128),
        ssm_groups=alias(raw, "n_groups", "mamba_n_groups", 8),
        ssm_conv_kernel=alias(raw, "conv_kernel", "mamba_d_conv", 4),
        ssm_chunk_size=alias(raw, "chunk_size", "mamba_chunk_size", 128),
        ssm_conv_bias=_flag(raw, "use_conv_bias", "mamba_conv_bias", True),
        ssm_proj_bias=boolean(raw, "use_bias", False),
    )
    if "moe" in types:
        if fields["mlp_bias"]:
            raise InvalidInput("mlp_bias", "biases on Nemotron-H's shared expert are not counted yet")
        dense = tuple(i for i, t in enumerate(types) if t == "mlp")
        fields |= dict(
            n_experts=alias(raw, "n_routed_experts", "num_local_experts", 8),
            top_k=integer(raw, "num_experts_per_tok", 2),
            d_ff_expert=integer(raw, "moe_intermediate_size", 7688),
            n_shared_experts=1,
            d_ff_shared=integer(raw, "moe_shared_expert_intermediate_size", 7688),
            router_score_correction=True,
            mlp_only_layers=dense,
        )
    del key
    return unused_dropped(fields)


def _falcon_h1(raw: dict, warnings: list[str]) -> dict[str, Any]:
    fields = common(
        raw,
        dict(
            num_hidden_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            vocab_size=128000,
            intermediate_size=14336,
            max_position_embeddings=8192,
        ),
    )
    n, d = fields["n_layers"], fields["d_model"]
    inner = integer(raw, "mamba_expand", 2) * d if raw.get("mamba_d_ssm", 1024) is None else integer(
        raw, "mamba_d_ssm", 1024)
    mamba = _mamba_keys(raw, inner, "the Mamba-2 inner width: mamba_d_ssm, or mamba_expand x hidden_size")
    return unused_dropped(
        fields
        | dict(
            n_kv_heads=kv_heads(raw, fields),
            head_dim=integer(raw, "head_dim", None)
            or (d // fields["n_heads"] if fields["n_heads"] > 0 else None),
            mlp=gated(raw, warnings),
            attn_bias=boolean(raw, "attention_bias", False),
            mlp_bias=boolean(raw, "mlp_bias", False),
            layer_mixers=("attention_mamba2",) * n,
            ssm_out_bias=boolean(raw, "projectors_bias", False),
            ssm_norm=boolean(raw, "mamba_rms_norm", False),
        )
        | mamba
    )


def _flag(raw: dict, key: str, other: str, default: bool) -> bool:
    """A boolean under either of its two names (NemotronHConfig pops the mamba_ spelling)."""
    return boolean(raw, other, default) if other in raw else boolean(raw, key, default)


_SSM_NAMES = {"ssm_heads": "mamba_n_heads", "ssm_head_dim": "mamba_d_head",
              "ssm_state_size": "mamba_d_state", "ssm_groups": "mamba_n_groups",
              "ssm_conv_kernel": "mamba_d_conv", "ssm_chunk_size": "mamba_chunk_size",
              "layer_mixers": "attn_layer_indices"}

_NEMOTRON_NAMES = {"ssm_heads": "mamba_num_heads", "ssm_head_dim": "mamba_head_dim",
                   "ssm_state_size": "ssm_state_size", "ssm_groups": "n_groups",
                   "ssm_conv_kernel": "conv_kernel", "ssm_chunk_size": "chunk_size",
                   "layer_mixers": "hybrid_override_pattern", "mlp_free_layers": "hybrid_override_pattern",
                   "n_experts": "n_routed_experts", "top_k": "num_experts_per_tok",
                   "d_ff_expert": "moe_intermediate_size",
                   "d_ff_shared": "moe_shared_expert_intermediate_size",
                   "mlp_only_layers": "hybrid_override_pattern"}

FAMILIES: tuple[Family, ...] = (
    Family("bamba", _bamba, LLAMA_KEYS | {
            "attention_bias", "mlp_bias", "mamba_d_state", "layer_types", "attn_layer_indices",
            "mamba_n_heads", "mamba_d_head", "mamba_expand", "mamba_n_groups", "mamba_d_conv",
            "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias"},
           {**LLAMA_KEY_NAMES, **_SSM_NAMES}),
    Family("nemotron_h", _nemotron_h, LLAMA_KEYS - {"tie_word_embeddings"} | {
            "mlp_bias", "use_bias", "layer_types", "n_routed_experts", "num_experts_per_tok",
            "n_shared_experts", "moe_intermediate_size", "ssm_state_size", "mamba_d_conv",
            "mamba_n_groups", "mamba_chunk_size", "mamba_conv_bias", "conv_kernel",
            "hybrid_override_pattern", "layers_block_type", "mamba_num_heads", "mamba_head_dim",
            "n_groups", "chunk_size", "use_conv_bias", "moe_shared_expert_intermediate_size",
            "moe_latent_size", "num_local_experts"},
           {**LLAMA_KEY_NAMES, **_NEMOTRON_NAMES}),
    Family("falcon_h1", _falcon_h1, LLAMA_KEYS | {
            "attention_bias", "mlp_bias", "mamba_d_ssm", "mamba_n_heads", "mamba_d_head", "mamba_n_groups",
            "mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_chunk_size", "mamba_conv_bias",
            "mamba_proj_bias", "mamba_rms_norm", "projectors_bias"},
           {**LLAMA_KEY_NAMES, **_SSM_NAMES, "layer_mixers": "num_hidden_layers"}),
)
