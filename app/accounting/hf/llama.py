"""The first families: llama, mistral, qwen2, gpt2 and gpt_neox."""

from app.accounting.hf import windows
from app.accounting.hf.family import LLAMA_KEY_NAMES, LLAMA_KEYS, Family
from app.accounting.hf.values import alias, boolean, dropout_on, integer, maybe_int


def _llama_like(raw: dict, family: str, warnings: list[str]) -> dict:
    defaults = {"llama": 2048, "mistral": 4096 * 32, "qwen2": 32768}
    heads = integer(raw, "num_attention_heads")
    # Absent, MistralConfig and Qwen2Config default to 8 and 32 kv heads; null means MHA.
    kv_default = {"llama": None, "mistral": 8, "qwen2": 32}[family]
    kv_heads = integer(raw, "num_key_value_heads", None) if "num_key_value_heads" in raw else kv_default
    act = raw.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        warnings.append(f"gated MLP with {act!r}: same shapes as SwiGLU, counted as swiglu")
    # Only LlamaConfig reads attention_bias and mlp_bias; Mistral has no biases and Qwen2
    # biases q/k/v alone, whatever the config says (the key table refuses contrary values).
    llama = family == "llama"
    attention_bias = boolean(raw, "attention_bias", False) if llama else False
    mlp_bias = boolean(raw, "mlp_bias", False) if llama else False
    n_layers = integer(raw, "num_hidden_layers")
    window = {}
    if family == "mistral":  # MistralConfig: every layer in a window of sliding_window (4096 absent)
        window = windows.windows([True] * n_layers, maybe_int(raw, "sliding_window", 4096), "sliding_window")
    elif family == "qwen2":
        window = windows.qwen(raw, n_layers)
    return window | dict(
        n_layers=n_layers, d_model=integer(raw, "hidden_size"), n_heads=heads,
        n_kv_heads=kv_heads or heads, d_ff=integer(raw, "intermediate_size"),
        vocab_size=integer(raw, "vocab_size"), mlp="swiglu", norm="rmsnorm",
        bias=False, attn_bias=attention_bias, mlp_bias=mlp_bias,
        qkv_bias=True if family == "qwen2" else None,
        tied_embeddings=boolean(raw, "tie_word_embeddings", False), position="rope",
        max_seq_len=integer(raw, "max_position_embeddings", defaults[family]),
        head_dim=integer(raw, "head_dim", None), dropout=dropout_on(raw, "attention_dropout"),
    )


def _gpt2(raw: dict, warnings: list[str]) -> dict:
    d = alias(raw, "n_embd", "hidden_size", 768)
    inner = integer(raw, "n_inner", None)
    return dict(
        n_layers=alias(raw, "n_layer", "num_hidden_layers", 12), d_model=d,
        n_heads=alias(raw, "n_head", "num_attention_heads", 12),
        d_ff=inner or 4 * d, vocab_size=integer(raw, "vocab_size", 50257), mlp="gelu",
        norm="layernorm", bias=True, tied_embeddings=boolean(raw, "tie_word_embeddings", True),
        position="learned", max_seq_len=alias(raw, "n_positions", "max_position_embeddings", 1024),
        dropout=dropout_on(raw, "resid_pdrop", "embd_pdrop", "attn_pdrop", default=0.1), fused_qkv=True,
    )


def _gpt_neox(raw: dict, warnings: list[str]) -> dict:
    # attention_bias covers query_key_value and dense only; the MLP and LayerNorms keep theirs.
    return dict(
        n_layers=integer(raw, "num_hidden_layers"), d_model=integer(raw, "hidden_size"),
        n_heads=integer(raw, "num_attention_heads"), d_ff=integer(raw, "intermediate_size"),
        vocab_size=integer(raw, "vocab_size"), mlp="gelu", norm="layernorm", bias=True,
        attn_bias=boolean(raw, "attention_bias", True),
        norm_layout="parallel" if boolean(raw, "use_parallel_residual", True) else "pre",
        tied_embeddings=boolean(raw, "tie_word_embeddings", False), position="rope",
        max_seq_len=integer(raw, "max_position_embeddings", 2048),
        dropout=dropout_on(raw, "attention_dropout", "hidden_dropout"), fused_qkv=True,
    )


_GPT2_NAMES = {"n_layers": "n_layer", "d_model": "n_embd", "n_heads": "n_head", "d_ff": "n_inner",
               "vocab_size": "vocab_size", "max_seq_len": "n_positions"}
_NEOX_NAMES = {k: v for k, v in LLAMA_KEY_NAMES.items() if k not in ("n_kv_heads", "head_dim")}

FAMILIES = (
    Family("llama", lambda raw, w: _llama_like(raw, "llama", w), LLAMA_KEYS | {"attention_bias", "mlp_bias"},
           LLAMA_KEY_NAMES),
    Family("mistral", lambda raw, w: _llama_like(raw, "mistral", w), LLAMA_KEYS, LLAMA_KEY_NAMES),
    # qwen2's layer_types only picks full or sliding windows: same weights.
    Family("qwen2", lambda raw, w: _llama_like(raw, "qwen2", w), LLAMA_KEYS, LLAMA_KEY_NAMES),
    # GPT2Config.attribute_map lets hidden_size & co. set n_embd & co.
    Family("gpt2", _gpt2, frozenset(("n_embd", "n_layer", "n_head", "n_inner", "vocab_size", "n_positions",
                                     "tie_word_embeddings", "hidden_size", "num_hidden_layers",
                                     "num_attention_heads", "max_position_embeddings")), _GPT2_NAMES),
    Family("gpt_neox", _gpt_neox, frozenset((
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
        "max_position_embeddings", "tie_word_embeddings", "attention_bias", "use_parallel_residual")),
        _NEOX_NAMES),
)
