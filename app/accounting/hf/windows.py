"""Per-layer attention windows, as transformers' configs state them (layer_types, or a family's
own keys), read into sliding_window and global_every."""

from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf.values import boolean, integer, maybe_int

FULL, SLIDING = "full_attention", "sliding_attention"


def layer_types(raw: dict, n_layers: int, default: list[str]) -> list[str]:
    value = raw.get("layer_types")
    if value is None:
        return default
    if not isinstance(value, list) or len(value) != n_layers or any(t not in (FULL, SLIDING) for t in value):
        raise InvalidInput("layer_types", f"must list {n_layers} entries (num_hidden_layers), each "
                                          f"{FULL!r} or {SLIDING!r}")
    return value


def windows(sliding: list[bool], window: int | None, key: str) -> dict[str, Any]:
    """sliding_window and global_every for which layers slide: all, or every Nth layer global
    (layer i global when (i+1) % N == 0); refused naming `key` otherwise. A null window attends
    fully."""
    if window is None or not any(sliding):
        return {}
    if all(sliding):
        return dict(sliding_window=window)
    every = sliding.index(False) + 1
    if all(s == ((i + 1) % every != 0) for i, s in enumerate(sliding)):
        return dict(sliding_window=window, global_every=every)
    pattern = "".join("S" if s else "F" for s in sliding)[:64]
    raise InvalidInput(key, f"gives the window pattern {pattern} (S sliding, F full), which Tally cannot "
                            "express: all layers sliding, or every Nth layer full and the others sliding")


def qwen(raw: dict, n_layers: int) -> dict[str, Any]:
    """Qwen2Config and Qwen3Config: no window unless use_sliding_window; then the layers from
    max_window_layers on slide (or as layer_types lists them)."""
    window = maybe_int(raw, "sliding_window", 4096) if boolean(raw, "use_sliding_window", False) else None
    first = integer(raw, "max_window_layers", 28)
    default = [SLIDING if window is not None and i >= first else FULL for i in range(n_layers)]
    key = "layer_types" if "layer_types" in raw else "max_window_layers"
    return windows(sliding(layer_types(raw, n_layers, default)), window, key)


def sliding(types: list[str]) -> list[bool]:
    return [t == SLIDING for t in types]
