"""Readers of the supported families' config.json, each as its transformers class reads it."""

from dataclasses import dataclass
from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf import keys
from app.accounting.models import ParamCount, TransformerConfig, count_params
from app.accounting.records import RECORD

SUPPORTED = ("llama", "mistral", "qwen2", "gpt2", "gpt_neox")

# TransformerConfig field -> config.json key, per family, for naming errors.
_KEYS = {
    "gpt2": {"n_layers": "n_layer", "d_model": "n_embd", "n_heads": "n_head", "d_ff": "n_inner",
             "vocab_size": "vocab_size", "max_seq_len": "n_positions"},
    "llama": {"n_layers": "num_hidden_layers", "d_model": "hidden_size",
              "n_heads": "num_attention_heads", "n_kv_heads": "num_key_value_heads",
              "d_ff": "intermediate_size", "vocab_size": "vocab_size",
              "max_seq_len": "max_position_embeddings", "head_dim": "head_dim"},
}
_KEYS["gpt_neox"] = {k: v for k, v in _KEYS["llama"].items() if k not in ("n_kv_heads", "head_dim")}


@dataclass(slots=True)
class ImportedModel:
    """A Hugging Face config read as a TransformerConfig."""

    model_type: str
    config: TransformerConfig
    params: ParamCount
    warnings: list[str]
    """What the import approximated or ignored."""

    __pydantic_config__ = RECORD


def _int(raw: dict, key: str, default: Any = ...) -> Any:
    value = raw.get(key, default)
    if value is ...:
        raise InvalidInput(key, "is required for this model_type")
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(key, f"must be an integer, got {value!r}"[:120])
    return value


def _bool(raw: dict, key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise InvalidInput(key, f"must be true or false, got {value!r}"[:120])
    return value


def _dropout(raw: dict, *keys: str, default: float = 0.0) -> bool:
    for key in keys:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidInput(key, f"must be a number, got {value!r}"[:120])
        if value > 0:
            return True
    return False


def _llama_like(raw: dict, family: str, warnings: list[str]) -> dict:
    defaults = {"llama": 2048, "mistral": 4096 * 32, "qwen2": 32768}
    heads = _int(raw, "num_attention_heads")
    # Absent, MistralConfig and Qwen2Config default to 8 and 32 kv heads; null means MHA.
    kv_default = {"llama": None, "mistral": 8, "qwen2": 32}[family]
    kv_heads = _int(raw, "num_key_value_heads", None) if "num_key_value_heads" in raw else kv_default
    act = raw.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        warnings.append(f"gated MLP with {act!r}: same shapes as SwiGLU, counted as swiglu")
    # Only LlamaConfig reads attention_bias and mlp_bias; Mistral has no biases and Qwen2
    # biases q/k/v alone, whatever the config says (the key table refuses contrary values).
    llama = family == "llama"
    attention_bias = _bool(raw, "attention_bias", False) if llama else False
    mlp_bias = _bool(raw, "mlp_bias", False) if llama else False
    if raw.get("sliding_window") and family == "mistral":
        warnings.append("sliding_window ignored: attention FLOPs count the full causal window")
    return dict(
        n_layers=_int(raw, "num_hidden_layers"), d_model=_int(raw, "hidden_size"), n_heads=heads,
        n_kv_heads=kv_heads or heads, d_ff=_int(raw, "intermediate_size"),
        vocab_size=_int(raw, "vocab_size"), mlp="swiglu", norm="rmsnorm",
        bias=False, attn_bias=attention_bias, mlp_bias=mlp_bias,
        qkv_bias=True if family == "qwen2" else None,
        tied_embeddings=_bool(raw, "tie_word_embeddings", False), position="rope",
        max_seq_len=_int(raw, "max_position_embeddings", defaults[family]),
        head_dim=_int(raw, "head_dim", None), dropout=_dropout(raw, "attention_dropout"),
    )


def _alias(raw: dict, key: str, alias: str, default: int) -> int:
    """GPT2Config.attribute_map: `alias` (hidden_size...) sets `key` (n_embd...)."""
    if key in raw and alias in raw and raw[key] != raw[alias]:
        raise InvalidInput(alias, f"{raw[alias]!r} contradicts {key}={raw[key]!r}; give one of them"[:160])
    return _int(raw, key, default) if key in raw else _int(raw, alias, default)


def _gpt2(raw: dict, warnings: list[str]) -> dict:
    d = _alias(raw, "n_embd", "hidden_size", 768)
    inner = _int(raw, "n_inner", None)
    return dict(
        n_layers=_alias(raw, "n_layer", "num_hidden_layers", 12), d_model=d,
        n_heads=_alias(raw, "n_head", "num_attention_heads", 12),
        d_ff=inner or 4 * d, vocab_size=_int(raw, "vocab_size", 50257), mlp="gelu",
        norm="layernorm", bias=True, tied_embeddings=_bool(raw, "tie_word_embeddings", True),
        position="learned", max_seq_len=_alias(raw, "n_positions", "max_position_embeddings", 1024),
        dropout=_dropout(raw, "resid_pdrop", "embd_pdrop", "attn_pdrop", default=0.1),
    )


def _gpt_neox(raw: dict, warnings: list[str]) -> dict:
    # attention_bias covers query_key_value and dense only; the MLP and LayerNorms keep theirs.
    return dict(
        n_layers=_int(raw, "num_hidden_layers"), d_model=_int(raw, "hidden_size"),
        n_heads=_int(raw, "num_attention_heads"), d_ff=_int(raw, "intermediate_size"),
        vocab_size=_int(raw, "vocab_size"), mlp="gelu", norm="layernorm", bias=True,
        attn_bias=_bool(raw, "attention_bias", True),
        tied_embeddings=_bool(raw, "tie_word_embeddings", False), position="rope",
        max_seq_len=_int(raw, "max_position_embeddings", 2048),
        dropout=_dropout(raw, "attention_dropout", "hidden_dropout"),
    )


def import_config(raw: dict[str, Any]) -> ImportedModel:
    """Read a config.json body. Errors name the config.json key at fault."""
    family = raw.get("model_type")
    if not isinstance(family, str) or family not in SUPPORTED:
        raise InvalidInput("model_type", f"{str(family)[:40]!r} is not one of {', '.join(SUPPORTED)}")
    warnings: list[str] = []
    if family == "gpt2":
        fields = _gpt2(raw, warnings)
    elif family == "gpt_neox":
        fields = _gpt_neox(raw, warnings)
    else:
        fields = _llama_like(raw, family, warnings)
    names = _KEYS["llama" if family in ("mistral", "qwen2") else family]
    try:
        cfg = TransformerConfig(**fields)
    except InvalidInput as e:
        raise InvalidInput(names.get(e.field, e.field), e.message) from None
    keys.check(raw, family, cfg, warnings)
    return ImportedModel(model_type=family, config=cfg.resolved(), params=count_params(cfg),
                         warnings=warnings)
