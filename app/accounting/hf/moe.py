"""Mixture-of-experts families: mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss and
glm4_moe (Llama 4's are in llama4.py).

Read as transformers 5.23 builds them (configuration_*.py for the defaults of absent keys,
modeling_*.py for the weights), so the total equals `model.parameters()` of that model:
- mixtral: every layer routes (no dense layer); each expert is intermediate_size wide.
- qwen2_moe: routed experts of moe_intermediate_size, one shared expert of
  shared_expert_intermediate_size behind a d_model -> 1 sigmoid gate; dense layers (mlp_only_layers,
  decoder_sparse_step) are intermediate_size wide; q/k/v carry biases (qkv_bias), o does not.
- qwen3_moe: no shared expert; per-head q/k norms; attention_bias on all four projections.
- deepseek_v2/v3: latent attention, n_shared_experts shared experts built as one MLP of
  n_shared_experts x moe_intermediate_size, the first first_k_dense_replace layers dense.
  moe_layer_freq is not read by transformers (keys.py refuses any value but 1), nor n_group and
  topk_group for weights (routing only). V3's e_score_correction_bias is a buffer, and its
  multi-token-prediction layers (num_nextn_predict_layers) are not built: both are said in warnings.
- gpt_oss: every layer routes (intermediate_size wide experts, as mixtral), its experts and router
  biased, q/k/v/o biased (attention_bias, default true), a learned sink logit per query head
  (sinks), and layer_types alternating a 128-token window with full attention (the default: even
  layers slide). Its experts' gate and up are interleaved columns of one gate_up_proj with a
  clamped SwiGLU: the shapes of SwiGLU.
- glm4_moe (GLM-4.5, GLM-4.5-Air): DeepSeek-V3's routing (a sigmoid router with its
  e_score_correction_bias buffer, n_shared_experts shared experts of moe_intermediate_size each,
  the first first_k_dense_replace layers dense) on grouped-query attention: attention_bias on q, k
  and v only, q/k norms of head_dim with use_qk_norm, rotary on partial_rotary_factor of each head
  (no parameters). Its multi-token-prediction layers (num_nextn_predict_layers) are not built.
"""

from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf import windows
from app.accounting.hf.family import LLAMA_KEY_NAMES, LLAMA_KEYS, Family
from app.accounting.hf.values import alias, boolean, dropout_on, integer
from app.accounting.models import TransformerConfig


def gated(raw: dict, warnings: list[str]) -> str:
    """Every family here gates its MLPs and experts (gate_up_proj): SwiGLU's shapes whatever the act."""
    act = raw.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        warnings.append(f"gated MLP with {str(act)[:40]!r}: same shapes as SwiGLU, counted as swiglu")
    return "swiglu"


def _layers(raw: dict, default: int) -> int:
    """num_hidden_layers, refused up front when out of the engine's bounds: the readers build
    per-layer lists from it."""
    n = integer(raw, "num_hidden_layers", default)
    try:
        TransformerConfig(n_layers=n, d_model=1, n_heads=1, vocab_size=1)
    except InvalidInput as e:
        raise InvalidInput("num_hidden_layers", e.message) from None
    return n


def common(raw: dict, defaults: dict[str, Any]) -> dict[str, Any]:
    """The shape every family here reads the same way; `defaults` is its Config class's."""
    return dict(
        n_layers=_layers(raw, defaults["num_hidden_layers"]),
        d_model=integer(raw, "hidden_size", defaults["hidden_size"]),
        n_heads=integer(raw, "num_attention_heads", defaults["num_attention_heads"]),
        vocab_size=integer(raw, "vocab_size", defaults["vocab_size"]),
        d_ff=integer(raw, "intermediate_size", defaults["intermediate_size"]),
        max_seq_len=integer(raw, "max_position_embeddings", defaults["max_position_embeddings"]),
        tied_embeddings=boolean(raw, "tie_word_embeddings", False), position="rope", norm="rmsnorm",
        bias=False, mlp_bias=False, dropout=dropout_on(raw, "attention_dropout"),
    )


def nullable(raw: dict, key: str, default: int | None) -> int | None:
    """An integer whose Config class takes null too (null stays null; absent is `default`)."""
    return integer(raw, key, None) if key in raw else default


def head_width(raw: dict, fields: dict[str, Any]) -> int:
    """head_dim, or hidden_size // num_attention_heads (floored, as the modeling code divides);
    with no heads, the engine's 422 names num_attention_heads."""
    heads = fields["n_heads"]
    return integer(raw, "head_dim", None) or (fields["d_model"] // heads if heads > 0 else None)


def mlp_only(raw: dict, n_layers: int, warnings: list[str]) -> tuple[int, ...]:
    """Qwen's mlp_only_layers: indices outside the model match no layer (`layer_idx not in ...`)."""
    value = raw.get("mlp_only_layers")
    if value is None:
        return ()
    if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in value):
        raise InvalidInput("mlp_only_layers", f"must be a list of layer indices, got {value!r}"[:120])
    kept = sorted({i for i in value if 0 <= i < n_layers})
    if len(kept) < len(set(value)):
        warnings.append(f"mlp_only_layers entries outside [0, {n_layers - 1}] match no layer; ignored")
    return tuple(kept)


def _mixtral(raw: dict, warnings: list[str]) -> dict[str, Any]:
    fields = common(raw, dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                               vocab_size=32000, intermediate_size=14336, max_position_embeddings=4096 * 32))
    kv = nullable(raw, "num_key_value_heads", 8)  # MixtralConfig: null means num_attention_heads
    window = integer(raw, "sliding_window", None)
    return fields | dict(
        n_kv_heads=kv or fields["n_heads"], head_dim=head_width(raw, fields), mlp=gated(raw, warnings),
        # MixtralConfig.attribute_map lets num_experts set num_local_experts; every layer routes,
        # so zero experts is no model (the engine's 422 names num_local_experts).
        n_experts=alias(raw, "num_local_experts", "num_experts", 8),
        top_k=nullable(raw, "num_experts_per_tok", 2),
        d_ff_expert=fields["d_ff"], **windows.windows([True] * fields["n_layers"], window, "sliding_window"),
    )


def _qwen_moe(raw: dict, warnings: list[str], qwen3: bool) -> dict[str, Any]:
    fields = common(raw, dict(num_hidden_layers=24, hidden_size=2048, vocab_size=151936,
                               num_attention_heads=32 if qwen3 else 16,
                               intermediate_size=6144 if qwen3 else 5632, max_position_embeddings=32768))
    n = fields["n_layers"]
    if qwen3:  # Qwen3MoeConfig.attribute_map: num_experts <-> num_local_experts
        experts = alias(raw, "num_experts", "num_local_experts", 128)
    else:
        experts = integer(raw, "num_experts", 60)
    fields |= dict(n_kv_heads=integer(raw, "num_key_value_heads", 4 if qwen3 else 16),
                   head_dim=head_width(raw, fields), mlp=gated(raw, warnings))
    if experts:  # the decoder layer asks `num_experts > 0`: without experts every layer is dense
        fields |= dict(n_experts=experts, top_k=nullable(raw, "num_experts_per_tok", 8 if qwen3 else 4),
                       d_ff_expert=integer(raw, "moe_intermediate_size", 768 if qwen3 else 1408),
                       moe_every=integer(raw, "decoder_sparse_step", 1),
                       mlp_only_layers=mlp_only(raw, n, warnings))
    sliding = boolean(raw, "use_sliding_window", False)
    window = nullable(raw, "sliding_window", 4096) if sliding else None
    if qwen3:
        # Qwen3Moe: attention_bias on q, k, v and o; one head_dim-wide q norm and k norm.
        return fields | dict(attn_bias=boolean(raw, "attention_bias", False), qk_norm="head",
                             **windows.windows([True] * n, window, "sliding_window"))
    if experts:
        fields |= dict(n_shared_experts=1, shared_expert_gate=True,
                       d_ff_shared=integer(raw, "shared_expert_intermediate_size", 5632))
    windowed = _qwen2_moe_windowed(raw, n, sliding)
    key = "layer_types" if "layer_types" in raw else "max_window_layers"
    return fields | dict(attn_bias=False, qkv_bias=boolean(raw, "qkv_bias", True),
                         **windows.windows(windowed, window, key))


def _qwen2_moe_windowed(raw: dict, n_layers: int, sliding: bool) -> list[bool]:
    """Qwen2MoeConfig's layer_types, or its default: layers 0, 2, 4... below max_window_layers."""
    below = integer(raw, "max_window_layers", 28)
    default = [windows.SLIDING if sliding and i % 2 == 0 and i < below else windows.FULL
               for i in range(n_layers)]
    return windows.sliding(windows.layer_types(raw, n_layers, default))


def _deepseek(raw: dict, warnings: list[str], v3: bool) -> dict[str, Any]:
    fields = common(raw, dict(num_hidden_layers=61 if v3 else 32, hidden_size=7168 if v3 else 4096,
                               num_attention_heads=128 if v3 else 32, vocab_size=129280 if v3 else 102400,
                               intermediate_size=18432 if v3 else 11008,
                               max_position_embeddings=4096 if v3 else 2048))
    d, heads = fields["d_model"], fields["n_heads"]
    if not v3 and heads > 0 and d % heads:  # DeepseekV2Config.validate_architecture refuses it
        raise InvalidInput("num_attention_heads", f"{heads} must divide hidden_size ({d}) in deepseek_v2")
    if not v3 and boolean(raw, "mlp_bias", False):
        # DeepseekV2MLP biases the dense MLPs and the shared experts (and a down_proj bias even with
        # n_shared_experts = 0); Tally's experts have no biases.
        raise InvalidInput("mlp_bias", "biases DeepSeek-V2's shared experts, which Tally does not count")
    kv = raw.get("num_key_value_heads")
    if kv is not None and kv != heads:
        warnings.append(f"num_key_value_heads={str(kv)[:12]} is unused by latent attention's weights "
                        "(transformers' forward needs it equal to num_attention_heads)")
    if nullable(raw, "kv_lora_rank", 512) is None:
        raise InvalidInput("kv_lora_rank", "is required: DeepSeek attention is latent (null builds nothing)")
    experts = (alias(raw, "n_routed_experts", "num_local_experts", 256) if v3
               else alias(raw, "n_routed_experts", "num_experts", 64))
    fields |= dict(
        mlp=gated(raw, warnings), attn_bias=boolean(raw, "attention_bias", False),
        # A null MLA width other than q_lora_rank (V2-Lite's direct queries) is the engine's 422.
        q_lora_rank=nullable(raw, "q_lora_rank", 1536), kv_lora_rank=integer(raw, "kv_lora_rank", 512),
        qk_nope_head_dim=nullable(raw, "qk_nope_head_dim", 128),
        qk_rope_head_dim=nullable(raw, "qk_rope_head_dim", 64), v_head_dim=nullable(raw, "v_head_dim", 128),
        n_experts=experts, top_k=nullable(raw, "num_experts_per_tok", 8 if v3 else None),
        d_ff_expert=integer(raw, "moe_intermediate_size", 2048 if v3 else 1407),
        n_shared_experts=integer(raw, "n_shared_experts", 1 if v3 else 2),
        first_dense_layers=integer(raw, "first_k_dense_replace", 3 if v3 else 0),
        router_score_correction=v3,
    )
    if v3:
        mtp = alias(raw, "num_nextn_predict_layers", "num_mtp_layers", 1)
        if mtp:
            warnings.append(f"num_nextn_predict_layers={mtp}: the multi-token-prediction layers are not "
                            "counted, as transformers does not build them (the checkpoint holds them)")
    return fields


def _gpt_oss(raw: dict, warnings: list[str]) -> dict[str, Any]:
    fields = common(raw, dict(num_hidden_layers=36, hidden_size=2880, num_attention_heads=64,
                               vocab_size=201088, intermediate_size=2880, max_position_embeddings=131072))
    n = fields["n_layers"]
    kv = nullable(raw, "num_key_value_heads", 8)  # GptOssConfig: null means num_attention_heads
    head_dim = nullable(raw, "head_dim", 64)
    default = [windows.SLIDING if (i + 1) % 2 else windows.FULL for i in range(n)]
    window = nullable(raw, "sliding_window", 128)
    return fields | dict(
        n_kv_heads=kv or fields["n_heads"], head_dim=head_dim or head_width({}, fields),
        mlp=gated(raw, warnings), attn_bias=boolean(raw, "attention_bias", True), attention_sinks=True,
        n_experts=alias(raw, "num_local_experts", "num_experts", 128),
        top_k=nullable(raw, "num_experts_per_tok", 4), d_ff_expert=fields["d_ff"], expert_bias=True,
        router_bias=True,
        **windows.windows(windows.sliding(windows.layer_types(raw, n, default)), window, "layer_types"),
    )


def _glm4_moe(raw: dict, warnings: list[str]) -> dict[str, Any]:
    fields = common(raw, dict(num_hidden_layers=46, hidden_size=4096, num_attention_heads=96,
                               vocab_size=151552, intermediate_size=10944, max_position_embeddings=131072))
    kv = nullable(raw, "num_key_value_heads", 8)
    fields |= dict(
        n_kv_heads=kv or fields["n_heads"], head_dim=head_width(raw, fields), mlp=gated(raw, warnings),
        qkv_bias=boolean(raw, "attention_bias", False), attn_bias=False,
        qk_norm="head" if boolean(raw, "use_qk_norm", False) else "none",
        # Glm4MoeConfig.attribute_map: num_local_experts <-> n_routed_experts
        n_experts=alias(raw, "n_routed_experts", "num_local_experts", 128),
        top_k=nullable(raw, "num_experts_per_tok", 8),
        d_ff_expert=integer(raw, "moe_intermediate_size", 1408),
        n_shared_experts=integer(raw, "n_shared_experts", 1),
        first_dense_layers=integer(raw, "first_k_dense_replace", 1), router_score_correction=True)
    mtp = alias(raw, "num_nextn_predict_layers", "num_mtp_layers", 1)
    if mtp:
        warnings.append(f"num_nextn_predict_layers={mtp}: the multi-token-prediction layers are not counted, "
                        "as transformers does not build them (the checkpoint holds them)")
    return fields


# TransformerConfig field -> config.json key, where they differ (to name the key in a 422).
_MOE_NAMES = {**LLAMA_KEY_NAMES, "n_experts": "num_experts", "top_k": "num_experts_per_tok",
              "d_ff_expert": "moe_intermediate_size", "moe_every": "decoder_sparse_step",
              "d_ff_shared": "shared_expert_intermediate_size", "attn_bias": "attention_bias"}
MIXTRAL_NAMES = {**_MOE_NAMES, "n_experts": "num_local_experts", "d_ff_expert": "intermediate_size"}
_DEEPSEEK_NAMES = {**_MOE_NAMES, "n_experts": "n_routed_experts",
                   "first_dense_layers": "first_k_dense_replace"}

MIXTRAL_KEYS = LLAMA_KEYS | {"num_local_experts", "num_experts", "num_experts_per_tok"}
_QWEN_KEYS = LLAMA_KEYS | {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                           "decoder_sparse_step", "mlp_only_layers"}
_DEEPSEEK_KEYS = LLAMA_KEYS | {"attention_bias", "n_routed_experts", "num_experts_per_tok",
                               "n_shared_experts", "moe_intermediate_size", "first_k_dense_replace",
                               "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                               "v_head_dim"}

FAMILIES: tuple[Family, ...] = (
    Family("mixtral", _mixtral, MIXTRAL_KEYS, MIXTRAL_NAMES),
    Family("qwen2_moe", lambda raw, w: _qwen_moe(raw, w, qwen3=False),
           _QWEN_KEYS | {"shared_expert_intermediate_size", "qkv_bias", "layer_types"},
           {**_MOE_NAMES, "global_every": "layer_types"}),
    Family("qwen3_moe", lambda raw, w: _qwen_moe(raw, w, qwen3=True),
           _QWEN_KEYS | {"num_local_experts", "attention_bias"}, _MOE_NAMES),
    Family("deepseek_v2", lambda raw, w: _deepseek(raw, w, v3=False),
           _DEEPSEEK_KEYS | {"num_experts", "mlp_bias"}, _DEEPSEEK_NAMES),
    Family("gpt_oss", _gpt_oss, MIXTRAL_KEYS | {"attention_bias", "layer_types"},
           {**MIXTRAL_NAMES, "attn_bias": "attention_bias", "global_every": "layer_types"}),
    Family("glm4_moe", _glm4_moe,
           _DEEPSEEK_KEYS - {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                             "v_head_dim"}
           | {"num_local_experts", "num_nextn_predict_layers", "num_mtp_layers", "use_qk_norm"},
           {**_DEEPSEEK_NAMES, "qkv_bias": "attention_bias", "qk_norm": "use_qk_norm"}),
    Family("deepseek_v3", lambda raw, w: _deepseek(raw, w, v3=True),
           _DEEPSEEK_KEYS | {"num_local_experts", "num_nextn_predict_layers", "num_mtp_layers"},
           _DEEPSEEK_NAMES),
)
