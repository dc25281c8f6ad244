"""Today's dense families: qwen3, gemma, gemma2, gemma3_text, gemma3 (its text model), phi3,
olmo, olmo2, falcon and starcoder2.

Each reader maps config.json as its transformers 5.23 Config class does (that class's default
for an absent key) and describes the weights its modeling_<family>.py builds. A value
transformers would build but cannot run (a Falcon block layout its forward lacks) is a 422
naming the key, as is a window pattern the engine cannot express.
"""

from dataclasses import dataclass
from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf import keys, windows
from app.accounting.hf.family import LLAMA_KEY_NAMES, LLAMA_KEYS, Family
from app.accounting.hf.values import boolean, dropout_on, integer, maybe_int
from app.accounting.transformer import TransformerConfig


@dataclass(frozen=True)
class _Defaults:
    """A Config class's defaults for the shape keys."""

    vocab: int
    d: int
    ff: int
    layers: int
    heads: int
    kv: int | None
    """num_key_value_heads when absent; None means num_attention_heads."""
    kv_nullable: bool
    """`num_key_value_heads: null` means multi-head (typed `int | None`), else transformers refuses it."""
    head_dim: int | None
    """head_dim when absent; None means hidden_size // num_attention_heads (read by getattr)."""
    head_dim_nullable: bool
    """`head_dim: null` means hidden_size // num_attention_heads (starcoder2's `or`); elsewhere
    transformers fails on it (a strict int field, or None ** -0.5)."""
    max_pos: int
    tied: bool


def _flag(raw: dict, key: str, default: bool) -> bool:
    """A `bool | None` field (Falcon's): null reads as false, as `if config.x` does."""
    return False if key in raw and raw[key] is None else boolean(raw, key, default)


def _dropout(raw: dict, *names: str) -> bool:
    return dropout_on(raw, *(k for k in names if raw.get(k) is not None))


def _shape(raw: dict, d: _Defaults) -> dict[str, Any]:
    heads = integer(raw, "num_attention_heads", d.heads)
    kv = maybe_int(raw, "num_key_value_heads", d.kv) if d.kv_nullable else integer(
        raw, "num_key_value_heads", d.kv)
    if raw.get("head_dim", 0) is None and not d.head_dim_nullable:
        raise InvalidInput("head_dim", "is null, which transformers cannot build for this model_type; "
                                       "give an integer or leave it out")
    return dict(
        n_layers=integer(raw, "num_hidden_layers", d.layers), d_model=integer(raw, "hidden_size", d.d),
        n_heads=heads, n_kv_heads=kv or heads, d_ff=integer(raw, "intermediate_size", d.ff),
        vocab_size=integer(raw, "vocab_size", d.vocab), head_dim=maybe_int(raw, "head_dim", d.head_dim),
        tied_embeddings=boolean(raw, "tie_word_embeddings", d.tied), position="rope",
        max_seq_len=integer(raw, "max_position_embeddings", d.max_pos))


def _gated(raw: dict, key: str, default: str, mlp: str, warnings: list[str]) -> str:
    """A gated MLP: act(gate) * up, then down. Any activation gives the same three matrices."""
    act = raw.get(key) or default
    family = "gelu" if mlp == "geglu" else "silu"
    if not (isinstance(act, str) and (act.startswith(family) or act == "swish" and family == "silu")):
        warnings.append(f"gated MLP with {str(act)[:40]!r}: same shapes as {mlp}, counted as {mlp}")
    return mlp


# Each Config class's defaults (configuration_<family>.py).
QWEN3 = _Defaults(vocab=151936, d=4096, ff=22016, layers=32, heads=32, kv=32, kv_nullable=True, head_dim=128,
                  head_dim_nullable=False, max_pos=32768, tied=False)
GEMMA = _Defaults(vocab=256000, d=3072, ff=24576, layers=28, heads=16, kv=16, kv_nullable=False, head_dim=256,
                  head_dim_nullable=False, max_pos=8192, tied=True)
GEMMA2 = _Defaults(vocab=256000, d=2304, ff=9216, layers=26, heads=8, kv=4, kv_nullable=False, head_dim=256,
                   head_dim_nullable=False, max_pos=8192, tied=True)
GEMMA3 = _Defaults(vocab=262208, d=2304, ff=9216, layers=26, heads=8, kv=4, kv_nullable=False, head_dim=256,
                   head_dim_nullable=False, max_pos=131072, tied=True)
PHI3 = _Defaults(vocab=32064, d=3072, ff=8192, layers=32, heads=32, kv=None, kv_nullable=True, head_dim=None,
                 head_dim_nullable=False, max_pos=4096, tied=False)
OLMO = _Defaults(vocab=50304, d=4096, ff=11008, layers=32, heads=32, kv=None, kv_nullable=True, head_dim=None,
                 head_dim_nullable=False, max_pos=2048, tied=False)  # OLMo 2's as well
STARCODER2 = _Defaults(vocab=49152, d=3072, ff=12288, layers=30, heads=24, kv=2, kv_nullable=False,
                       head_dim=None, head_dim_nullable=True, max_pos=4096, tied=True)


def _qwen3(raw: dict, warnings: list[str]) -> dict:
    f = _shape(raw, QWEN3)
    return f | windows.qwen(raw, f["n_layers"]) | dict(
        mlp=_gated(raw, "hidden_act", "silu", "swiglu", warnings), norm="rmsnorm", bias=False,
        attn_bias=boolean(raw, "attention_bias", False), qk_norm="head",  # q_norm, k_norm: head_dim wide
        dropout=_dropout(raw, "attention_dropout"))


def _gemma(raw: dict, warnings: list[str]) -> dict:
    # GemmaConfig reads hidden_act (its legacy "gelu" means the tanh approximation).
    return _shape(raw, GEMMA) | dict(
        mlp=_gated(raw, "hidden_act", "gelu_pytorch_tanh", "geglu", warnings), norm="rmsnorm", bias=False,
        attn_bias=boolean(raw, "attention_bias", False), dropout=_dropout(raw, "attention_dropout"))


def _gemma_sandwich(raw: dict, warnings: list[str], d: _Defaults, every: int, caps: tuple) -> dict:
    """Gemma 2 and 3: four norms a block, local layers with every `every`-th one global."""
    f = _shape(raw, d)
    window = maybe_int(raw, "sliding_window", 4096)
    default = [windows.SLIDING if (i + 1) % every else windows.FULL for i in range(f["n_layers"])]
    types = windows.layer_types(raw, f["n_layers"], default)
    key = "layer_types" if "layer_types" in raw else "sliding_window_pattern"
    return f | windows.windows(windows.sliding(types), window, key) | dict(
        mlp=_gated(raw, "hidden_activation", "gelu_pytorch_tanh", "geglu", warnings), norm="rmsnorm",
        bias=False, attn_bias=boolean(raw, "attention_bias", False), norm_layout="sandwich",
        attn_logit_softcapping=raw.get("attn_logit_softcapping", caps[0]),
        final_logit_softcapping=raw.get("final_logit_softcapping", caps[1]),
        dropout=_dropout(raw, "attention_dropout"))


def _gemma2(raw: dict, warnings: list[str]) -> dict:
    return _gemma_sandwich(raw, warnings, GEMMA2, 2, (50.0, 30.0))


def _gemma3_text(raw: dict, warnings: list[str]) -> dict:
    # Gemma3TextConfig reads sliding_window_pattern (default 6); `_sliding_window_pattern`, which
    # it writes back out, never sets the pattern, so it is not read here either.
    every = integer(raw, "sliding_window_pattern", 6)
    if every < 1:
        raise InvalidInput("sliding_window_pattern", f"must be at least 1, got {every}")
    if raw.get("use_bidirectional_attention"):
        warnings.append("use_bidirectional_attention: attention is not causal; causal='halved' FLOPs "
                        "assume it is")
    return _gemma_sandwich(raw, warnings, GEMMA3, every, (None, None)) | dict(qk_norm="head")


def _phi3(raw: dict, warnings: list[str]) -> dict:
    # Fused qkv_proj and gate_up_proj: the same weights and matmul FLOPs as separate projections.
    f = _shape(raw, PHI3)
    window = maybe_int(raw, "sliding_window", None)  # every layer, when set
    return f | windows.windows([True] * f["n_layers"], window, "sliding_window") | dict(
        mlp=_gated(raw, "hidden_act", "silu", "swiglu", warnings), norm="rmsnorm", bias=False,
        dropout=_dropout(raw, "attention_dropout", "resid_pdrop", "embd_pdrop"), fused_qkv=True,
        fused_gate_up=True)


def _olmo(raw: dict, warnings: list[str]) -> dict:
    # OlmoLayerNorm: F.layer_norm with no weight and no bias.
    return _shape(raw, OLMO) | dict(
        mlp=_gated(raw, "hidden_act", "silu", "swiglu", warnings), norm="layernorm_no_affine", bias=False,
        attn_bias=boolean(raw, "attention_bias", False), dropout=_dropout(raw, "attention_dropout"))


def _olmo2(raw: dict, warnings: list[str]) -> dict:
    # Norms on each sublayer's output; q_norm over n_heads*head_dim, k_norm over n_kv_heads*head_dim.
    return _olmo(raw, warnings) | dict(norm="rmsnorm", norm_layout="post", qk_norm="projection")


def _starcoder2(raw: dict, warnings: list[str]) -> dict:
    # nn.LayerNorm keeps its bias whatever use_bias says; use_bias covers every linear but the head.
    f = _shape(raw, STARCODER2)
    use_bias = boolean(raw, "use_bias", True)
    window = maybe_int(raw, "sliding_window", None)
    return f | windows.windows([True] * f["n_layers"], window, "sliding_window") | dict(
        mlp="gelu", norm="layernorm", bias=True, attn_bias=use_bias, mlp_bias=use_bias,
        dropout=_dropout(raw, "attention_dropout", "residual_dropout", "embedding_dropout"))


def _falcon_layout(raw: dict, new: bool) -> str:
    """Norms of a Falcon block, as FalconDecoderLayer builds them and its forward can run them."""
    parallel = _flag(raw, "parallel_attn", True)
    lns = maybe_int(raw, "num_ln_in_parallel_attn", None)
    if not parallel:
        if new:
            raise InvalidInput("parallel_attn", "false with new_decoder_architecture is a block "
                                                "transformers' Falcon builds but cannot run (no ln_attn)")
        return "pre"  # input_layernorm, then post_attention_layernorm before the MLP
    if new:
        if (lns or 2) not in (1, 2):
            raise InvalidInput("num_ln_in_parallel_attn", f"must be 1 or 2 with new_decoder_architecture, "
                                                          f"got {lns}")
        return "parallel" if (lns or 2) == 2 else "parallel_shared"  # ln_attn + ln_mlp, or one shared
    if lns == 2:
        raise InvalidInput("num_ln_in_parallel_attn", "2 needs new_decoder_architecture: without it, "
                                                      "Falcon builds two norms but runs a third")
    return "parallel_shared"  # input_layernorm feeds attention and the MLP


def _falcon(raw: dict, warnings: list[str]) -> dict:
    # FalconConfig: n_embed, when given, overrides hidden_size; head_dim is always hidden / heads.
    d = integer(raw, "n_embed") if raw.get("n_embed") is not None else integer(raw, "hidden_size", 4544)
    if raw.get("n_embed") is not None and raw.get("hidden_size", d) != d:
        raise InvalidInput("hidden_size", f"{raw['hidden_size']!r} contradicts n_embed={d}; give one of them")
    heads = integer(raw, "num_attention_heads", 71)
    new = _flag(raw, "new_decoder_architecture", False)
    kv_given = maybe_int(raw, "num_kv_heads", None)
    if new:
        kv = kv_given or heads  # query_key_value: (2*num_kv_heads + heads) * head_dim outputs
    elif _flag(raw, "multi_query", True):
        kv = 1  # hidden + 2*head_dim outputs: one key/value head, num_kv_heads unread
        if kv_given not in (None, 1):
            warnings.append(f"num_kv_heads={kv_given} is not read: without new_decoder_architecture, "
                            "multi_query builds one key/value head")
    else:
        kv = heads  # 3*hidden outputs
        if kv_given not in (None, heads):
            raise InvalidInput("num_kv_heads", f"{kv_given} needs new_decoder_architecture: without it (and "
                                               f"without multi_query) Falcon builds {heads} key/value heads")
    bias = _flag(raw, "bias", False)
    if _flag(raw, "alibi", False):
        warnings.append("ALiBi: position biases computed from slopes, no parameters (as with rope)")
    return dict(
        n_layers=integer(raw, "num_hidden_layers", 32), d_model=d, n_heads=heads, n_kv_heads=kv,
        d_ff=maybe_int(raw, "ffn_hidden_size", None) or 4 * d, vocab_size=integer(raw, "vocab_size", 65024),
        mlp="gelu", norm="layernorm", bias=True, attn_bias=bias, mlp_bias=bias,  # nn.LayerNorm keeps its bias
        norm_layout=_falcon_layout(raw, new), tied_embeddings=boolean(raw, "tie_word_embeddings", True),
        position="rope", max_seq_len=integer(raw, "max_position_embeddings", 2048),
        dropout=_dropout(raw, "hidden_dropout", "attention_dropout"), fused_qkv=True)


_GEMMA_KEYS = LLAMA_KEYS | {"attention_bias", "hidden_activation"}
_SANDWICH_KEYS = _GEMMA_KEYS | {"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                                "layer_types"}
GEMMA3_TEXT = Family("gemma3_text", _gemma3_text,
                     _SANDWICH_KEYS | {"sliding_window_pattern", "_sliding_window_pattern"}, LLAMA_KEY_NAMES)


def _gemma3(raw: dict, warnings: list[str]) -> dict:
    """Gemma3Config: the text model Gemma3ForCausalLM builds from text_config (absent: defaults)."""
    text = raw.get("text_config") or {}
    if not isinstance(text, dict):
        raise InvalidInput("text_config", "must be an object (Gemma3TextConfig's keys)")
    if text.get("model_type", "gemma3_text") != "gemma3_text":
        got = repr(text["model_type"])[:40]
        raise InvalidInput("text_config.model_type", f"must be 'gemma3_text', got {got}")
    try:
        fields = GEMMA3_TEXT.read(text, warnings)
        keys.check(text, GEMMA3_TEXT, TransformerConfig(**fields), warnings)
    except InvalidInput as e:
        raise InvalidInput("text_config." + GEMMA3_TEXT.key_names.get(e.field, e.field), e.message) from None
    # Gemma3ForConditionalGeneration ties its head by the outer key (default true).
    outer = _flag(raw, "tie_word_embeddings", True)
    if outer != fields["tied_embeddings"]:
        raise InvalidInput("tie_word_embeddings", f"{outer!r} contradicts text_config's "
                                                  f"{fields['tied_embeddings']}; the two models would differ")
    warnings.append("the text model only: the vision tower and multimodal projector (vision_config) are "
                    "not counted")
    return fields


_FALCON_NAMES = LLAMA_KEY_NAMES | {"n_kv_heads": "num_kv_heads", "d_ff": "ffn_hidden_size"}
_FALCON_KEYS = frozenset(("hidden_size", "num_hidden_layers", "num_attention_heads", "num_kv_heads",
                          "ffn_hidden_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings",
                          "bias", "parallel_attn", "new_decoder_architecture", "multi_query",
                          "num_ln_in_parallel_attn", "n_embed"))

FAMILIES: tuple[Family, ...] = (
    Family("qwen3", _qwen3, LLAMA_KEYS | {"attention_bias", "layer_types"}, LLAMA_KEY_NAMES),
    Family("gemma", _gemma, _GEMMA_KEYS, LLAMA_KEY_NAMES),
    Family("gemma2", _gemma2, _SANDWICH_KEYS, LLAMA_KEY_NAMES),
    GEMMA3_TEXT,
    # The vision tower is not counted (a warning says so), so vision_config is read, not refused.
    Family("gemma3", _gemma3, frozenset(("tie_word_embeddings", "text_config", "vision_config")),
           {k: "text_config." + v for k, v in LLAMA_KEY_NAMES.items()}),
    Family("phi3", _phi3, LLAMA_KEYS, LLAMA_KEY_NAMES),
    Family("olmo", _olmo, LLAMA_KEYS | {"attention_bias"}, LLAMA_KEY_NAMES),
    Family("olmo2", _olmo2, LLAMA_KEYS | {"attention_bias"}, LLAMA_KEY_NAMES),
    Family("falcon", _falcon, _FALCON_KEYS, _FALCON_NAMES),
    Family("starcoder2", _starcoder2, LLAMA_KEYS | {"use_bias"}, LLAMA_KEY_NAMES),
)
