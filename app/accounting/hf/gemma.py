"""Gemma's lineage: gemma, gemma2, gemma3_text and gemma3 (its text model). GeGLU MLPs, RMSNorm,
tied embeddings; Gemma 2 and 3 add four norms a block (sandwich), local layers in a sliding window
with every k-th global, logit softcapping (Gemma 2) and per-head q/k norms (Gemma 3).

Each reader maps config.json as its transformers 5.23 Config class does (that class's default for
an absent key) and describes the weights its modeling_<family>.py builds; a window pattern the
engine cannot express is a 422 naming the key.
"""

from app.accounting.errors import InvalidInput
from app.accounting.hf import nested, windows
from app.accounting.hf.family import LLAMA_KEY_NAMES, LLAMA_KEYS, Family
from app.accounting.hf.values import Defaults, boolean, dropout, flag, gated, integer, maybe_int, shape

# Each Config class's defaults (configuration_<family>.py).
GEMMA = Defaults(vocab=256000, d=3072, ff=24576, layers=28, heads=16, kv=16, kv_nullable=False, head_dim=256,
                 head_dim_nullable=False, max_pos=8192, tied=True)
GEMMA2 = Defaults(vocab=256000, d=2304, ff=9216, layers=26, heads=8, kv=4, kv_nullable=False, head_dim=256,
                  head_dim_nullable=False, max_pos=8192, tied=True)
GEMMA3 = Defaults(vocab=262208, d=2304, ff=9216, layers=26, heads=8, kv=4, kv_nullable=False, head_dim=256,
                  head_dim_nullable=False, max_pos=131072, tied=True)


def _gemma(raw: dict, warnings: list[str]) -> dict:
    # GemmaConfig reads hidden_act (its legacy "gelu" means the tanh approximation).
    return shape(raw, GEMMA) | dict(
        mlp=gated(raw, "hidden_act", "gelu_pytorch_tanh", "geglu", warnings), norm="rmsnorm", bias=False,
        attn_bias=boolean(raw, "attention_bias", False), dropout=dropout(raw, "attention_dropout"))


def _gemma_sandwich(raw: dict, warnings: list[str], d: Defaults, every: int, caps: tuple,
                    window: int | None) -> dict:
    """Gemma 2 and 3: four norms a block, local layers with every `every`-th one global, those
    attending within `window` tokens."""
    f = shape(raw, d)
    default = [windows.SLIDING if (i + 1) % every else windows.FULL for i in range(f["n_layers"])]
    types = windows.layer_types(raw, f["n_layers"], default)
    key = "layer_types" if "layer_types" in raw else "sliding_window_pattern"
    return f | windows.windows(windows.sliding(types), window, key) | dict(
        mlp=gated(raw, "hidden_activation", "gelu_pytorch_tanh", "geglu", warnings), norm="rmsnorm",
        bias=False, attn_bias=boolean(raw, "attention_bias", False), norm_layout="sandwich",
        attn_logit_softcapping=raw.get("attn_logit_softcapping", caps[0]),
        final_logit_softcapping=raw.get("final_logit_softcapping", caps[1]),
        dropout=dropout(raw, "attention_dropout"))


def _gemma2(raw: dict, warnings: list[str]) -> dict:
    return _gemma_sandwich(raw, warnings, GEMMA2, 2, (50.0, 30.0), maybe_int(raw, "sliding_window", 4096))


def _gemma3_window(raw: dict, warnings: list[str]) -> int | None:
    """sliding_window as Gemma3TextConfig.__post_init__ leaves it: with use_bidirectional_attention
    it becomes sliding_window // 2 + 1 (the window is then |i - j| < that, both ways, an exclusive
    bound for flash-attention), which is what the sliding layers' mask and their cache
    (DynamicSlidingWindowLayer, sliding_window - 1 tokens between forwards) read."""
    window = maybe_int(raw, "sliding_window", 4096)
    if not flag(raw, "use_bidirectional_attention", False):
        return window
    if window is None:
        raise InvalidInput("sliding_window", "is null with use_bidirectional_attention, which transformers "
                                             "cannot build (it halves the window: sliding_window // 2 + 1)")
    halved = window // 2 + 1
    warnings.append(f"use_bidirectional_attention: attention is not causal; causal='halved' FLOPs assume it "
                    f"is. Sliding layers attend within |i - j| < {halved} (sliding_window {window} // 2 + 1, "
                    f"as Gemma3TextConfig reads it), so their window is {halved} tokens")
    return halved


def _gemma3_text(raw: dict, warnings: list[str]) -> dict:
    # Gemma3TextConfig reads sliding_window_pattern (default 6); `_sliding_window_pattern`, which
    # it writes back out, never sets the pattern, so it is not read here either.
    every = integer(raw, "sliding_window_pattern", 6)
    if every < 1:
        raise InvalidInput("sliding_window_pattern", f"must be at least 1, got {every}")
    window = _gemma3_window(raw, warnings)
    return _gemma_sandwich(raw, warnings, GEMMA3, every, (None, None), window) | dict(qk_norm="head")


_GEMMA_KEYS = LLAMA_KEYS | {"attention_bias", "hidden_activation"}
_SANDWICH_KEYS = _GEMMA_KEYS | {"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                                "layer_types"}
GEMMA3_TEXT = Family("gemma3_text", _gemma3_text,
                     _SANDWICH_KEYS | {"sliding_window_pattern", "_sliding_window_pattern"}, LLAMA_KEY_NAMES)


def _gemma3(raw: dict, warnings: list[str]) -> dict:
    """Gemma3Config: the text model Gemma3ForCausalLM builds from text_config (absent: defaults)."""
    fields = nested.text_model(raw, GEMMA3_TEXT, warnings)
    # Gemma3ForConditionalGeneration ties its head by the outer key (default true).
    outer = flag(raw, "tie_word_embeddings", True)
    if outer != fields["tied_embeddings"]:
        raise InvalidInput("tie_word_embeddings", f"{outer!r} contradicts text_config's "
                                                  f"{fields['tied_embeddings']}; the two models would differ")
    return fields


FAMILIES: tuple[Family, ...] = (
    Family("gemma", _gemma, _GEMMA_KEYS, LLAMA_KEY_NAMES),
    Family("gemma2", _gemma2, _SANDWICH_KEYS, LLAMA_KEY_NAMES),
    GEMMA3_TEXT,
    # The vision tower is not counted (a warning says so), so vision_config is read, not refused.
    Family("gemma3", _gemma3, frozenset(("tie_word_embeddings", "text_config", "vision_config")),
           {k: "text_config." + v for k, v in LLAMA_KEY_NAMES.items()}),
)
