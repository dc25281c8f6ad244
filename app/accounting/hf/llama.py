"""LLaMA's lineage: llama, mistral, qwen2, qwen3, phi3, olmo and olmo2. Decoders with rotary
positions, gated MLPs and no biases but where a family adds them (Qwen2's q/k/v, Llama's
attention_bias and mlp_bias); they differ in norms (OLMo's non-affine LayerNorm, OLMo 2's
post-norms and projection-wide q/k norms, Qwen3's per-head q/k norms), windows (Mistral, Qwen) and
fused projections (Phi-3's qkv_proj and gate_up_proj).

Each reader maps config.json as its transformers 5.23 Config class does (that class's default
for an absent key) and describes the weights its modeling_<family>.py builds.
"""

from app.accounting.hf import windows
from app.accounting.hf.family import LLAMA_KEY_NAMES, LLAMA_KEYS, Family
from app.accounting.hf.values import Defaults, boolean, dropout, dropout_on, gated, integer, maybe_int, shape


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


# Each Config class's defaults (configuration_<family>.py).
QWEN3 = Defaults(vocab=151936, d=4096, ff=22016, layers=32, heads=32, kv=32, kv_nullable=True, head_dim=128,
                 head_dim_nullable=False, max_pos=32768, tied=False)
PHI3 = Defaults(vocab=32064, d=3072, ff=8192, layers=32, heads=32, kv=None, kv_nullable=True, head_dim=None,
                head_dim_nullable=False, max_pos=4096, tied=False)
OLMO = Defaults(vocab=50304, d=4096, ff=11008, layers=32, heads=32, kv=None, kv_nullable=True, head_dim=None,
                head_dim_nullable=False, max_pos=2048, tied=False)  # OLMo 2's as well


def _qwen3(raw: dict, warnings: list[str]) -> dict:
    f = shape(raw, QWEN3)
    return f | windows.qwen(raw, f["n_layers"]) | dict(
        mlp=gated(raw, "hidden_act", "silu", "swiglu", warnings), norm="rmsnorm", bias=False,
        attn_bias=boolean(raw, "attention_bias", False), qk_norm="head",  # q_norm, k_norm: head_dim wide
        dropout=dropout(raw, "attention_dropout"))


def _phi3(raw: dict, warnings: list[str]) -> dict:
    # Fused qkv_proj and gate_up_proj: the same weights and matmul FLOPs as separate projections.
    f = shape(raw, PHI3)
    window = maybe_int(raw, "sliding_window", None)  # every layer, when set
    return f | windows.windows([True] * f["n_layers"], window, "sliding_window") | dict(
        mlp=gated(raw, "hidden_act", "silu", "swiglu", warnings), norm="rmsnorm", bias=False,
        dropout=dropout(raw, "attention_dropout", "resid_pdrop", "embd_pdrop"), fused_qkv=True,
        fused_gate_up=True)


def _olmo(raw: dict, warnings: list[str]) -> dict:
    # OlmoLayerNorm: F.layer_norm with no weight and no bias.
    return shape(raw, OLMO) | dict(
        mlp=gated(raw, "hidden_act", "silu", "swiglu", warnings), norm="layernorm_no_affine", bias=False,
        attn_bias=boolean(raw, "attention_bias", False), dropout=dropout(raw, "attention_dropout"))


def _olmo2(raw: dict, warnings: list[str]) -> dict:
    # Norms on each sublayer's output; q_norm over n_heads*head_dim, k_norm over n_kv_heads*head_dim.
    return _olmo(raw, warnings) | dict(norm="rmsnorm", norm_layout="post", qk_norm="projection")


FAMILIES: tuple[Family, ...] = (
    Family("llama", lambda raw, w: _llama_like(raw, "llama", w), LLAMA_KEYS | {"attention_bias", "mlp_bias"},
           LLAMA_KEY_NAMES),
    Family("mistral", lambda raw, w: _llama_like(raw, "mistral", w), LLAMA_KEYS, LLAMA_KEY_NAMES),
    # qwen2's layer_types only picks full or sliding windows: same weights.
    Family("qwen2", lambda raw, w: _llama_like(raw, "qwen2", w), LLAMA_KEYS, LLAMA_KEY_NAMES),
    Family("qwen3", _qwen3, LLAMA_KEYS | {"attention_bias", "layer_types"}, LLAMA_KEY_NAMES),
    Family("phi3", _phi3, LLAMA_KEYS, LLAMA_KEY_NAMES),
    Family("olmo", _olmo, LLAMA_KEYS | {"attention_bias"}, LLAMA_KEY_NAMES),
    Family("olmo2", _olmo2, LLAMA_KEYS | {"attention_bias"}, LLAMA_KEY_NAMES),
)
