"""Typed reads of config.json values; errors name the config.json key."""

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
