"""Typed reads of config.json values, errors naming the config.json key; and the shape keys the
llama-style Config classes share (Defaults, shape), with their readers' small helpers."""

from dataclasses import dataclass
from typing import Any

from app.accounting.errors import InvalidInput


def integer(raw: dict, key: str, default: Any = ...) -> Any:
    """raw[key] as an int; absent means `default` (required when none is given)."""
    value = raw.get(key, default)
    if value is ...:
        raise InvalidInput(key, "is required for this model_type")
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(key, f"must be an integer, got {value!r}"[:120])
    return value


def maybe_int(raw: dict, key: str, default: int | None) -> int | None:
    """An `int | None` field: null is None, absent is `default`."""
    return integer(raw, key, None) if key in raw else default


def boolean(raw: dict, key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise InvalidInput(key, f"must be true or false, got {value!r}"[:120])
    return value


def dropout_on(raw: dict, *keys: str, default: float = 0.0) -> bool:
    """Any of these dropout probabilities above zero."""
    for key in keys:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidInput(key, f"must be a number, got {value!r}"[:120])
        if value > 0:
            return True
    return False


def alias(raw: dict, key: str, other: str, default: int) -> int:
    """An attribute_map pair (GPT2Config: hidden_size sets n_embd): either spelling, not two values."""
    if key in raw and other in raw and raw[key] != raw[other]:
        raise InvalidInput(other, f"{raw[other]!r} contradicts {key}={raw[key]!r}; give one of them"[:160])
    return integer(raw, key, default) if key in raw else integer(raw, other, default)


@dataclass(frozen=True)
class Defaults:
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


def flag(raw: dict, key: str, default: bool) -> bool:
    """A `bool | None` field (Falcon's): null reads as false, as `if config.x` does."""
    return False if key in raw and raw[key] is None else boolean(raw, key, default)


def dropout(raw: dict, *names: str) -> bool:
    """dropout_on over the keys that are set (a null probability is no dropout)."""
    return dropout_on(raw, *(k for k in names if raw.get(k) is not None))


def shape(raw: dict, d: Defaults) -> dict[str, Any]:
    """The shape keys a llama-style Config class reads, its defaults for absent ones."""
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


def gated(raw: dict, key: str, default: str, mlp: str, warnings: list[str]) -> str:
    """A gated MLP: act(gate) * up, then down. Any activation gives the same three matrices."""
    act = raw.get(key) or default
    family = "gelu" if mlp == "geglu" else "silu"
    if not (isinstance(act, str) and (act.startswith(family) or act == "swish" and family == "silu")):
        warnings.append(f"gated MLP with {str(act)[:40]!r}: same shapes as {mlp}, counted as {mlp}")
    return mlp
