"""GPT-2's lineage: gpt2, gpt_neox, falcon and starcoder2. LayerNorm with biases, two-matrix
GELU MLPs, biases on the linear layers (as each family's flags say), a fused query_key_value
(GPT-2's c_attn, GPT-NeoX's and Falcon's query_key_value); learned positions (GPT-2) or rotary,
parallel attention and MLP blocks (GPT-NeoX, Falcon), multi-query attention (Falcon-7B).

Each reader maps config.json as its transformers 5.23 Config class does and describes the weights
its modeling_<family>.py builds. A value transformers would build but cannot run (a Falcon block
layout its forward lacks) is a 422 naming the key.
"""

from app.accounting.errors import InvalidInput
from app.accounting.hf import windows
from app.accounting.hf.family import LLAMA_KEY_NAMES, LLAMA_KEYS, Family
from app.accounting.hf.values import (
    Defaults,
    alias,
    boolean,
    dropout,
    dropout_on,
    flag,
    integer,
    maybe_int,
    shape,
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


# Starcoder2Config's defaults (configuration_starcoder2.py).
STARCODER2 = Defaults(vocab=49152, d=3072, ff=12288, layers=30, heads=24, kv=2, kv_nullable=False,
                      head_dim=None, head_dim_nullable=True, max_pos=4096, tied=True)


def _starcoder2(raw: dict, warnings: list[str]) -> dict:
    # nn.LayerNorm keeps its bias whatever use_bias says; use_bias covers every linear but the head.
    f = shape(raw, STARCODER2)
    use_bias = boolean(raw, "use_bias", True)
    window = maybe_int(raw, "sliding_window", None)
    return f | windows.windows([True] * f["n_layers"], window, "sliding_window") | dict(
        mlp="gelu", norm="layernorm", bias=True, attn_bias=use_bias, mlp_bias=use_bias,
        dropout=dropout(raw, "attention_dropout", "residual_dropout", "embedding_dropout"))


def _falcon_layout(raw: dict, new: bool) -> str:
    """Norms of a Falcon block, as FalconDecoderLayer builds them and its forward can run them."""
    parallel = flag(raw, "parallel_attn", True)
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
    new = flag(raw, "new_decoder_architecture", False)
    kv_given = maybe_int(raw, "num_kv_heads", None)
    if new:
        kv = kv_given or heads  # query_key_value: (2*num_kv_heads + heads) * head_dim outputs
    elif flag(raw, "multi_query", True):
        kv = 1  # hidden + 2*head_dim outputs: one key/value head, num_kv_heads unread
        if kv_given not in (None, 1):
            warnings.append(f"num_kv_heads={kv_given} is not read: without new_decoder_architecture, "
                            "multi_query builds one key/value head")
    else:
        kv = heads  # 3*hidden outputs
        if kv_given not in (None, heads):
            raise InvalidInput("num_kv_heads", f"{kv_given} needs new_decoder_architecture: without it (and "
                                               f"without multi_query) Falcon builds {heads} key/value heads")
    # FalconAttention._split_heads broadcasts each key/value head to its query group before the
    # cache update: [b, n_heads, s, head_dim] cached, where vLLM's FalconAttention keeps num_kv_heads.
    all_heads = new and kv < heads
    if all_heads:
        warnings.append(f"new_decoder_architecture: transformers caches K and V broadcast to all {heads} "
                        f"query heads, {heads // kv}x the {kv} key/value heads vLLM caches; the serving "
                        "calculators count vLLM's unless asked for engine 'transformers'")
    bias = flag(raw, "bias", False)
    if flag(raw, "alibi", False):
        warnings.append("ALiBi: position biases computed from slopes, no parameters (as with rope)")
    return dict(
        n_layers=integer(raw, "num_hidden_layers", 32), d_model=d, n_heads=heads, n_kv_heads=kv,
        d_ff=maybe_int(raw, "ffn_hidden_size", None) or 4 * d, vocab_size=integer(raw, "vocab_size", 65024),
        mlp="gelu", norm="layernorm", bias=True, attn_bias=bias, mlp_bias=bias,  # nn.LayerNorm keeps its bias
        norm_layout=_falcon_layout(raw, new), tied_embeddings=boolean(raw, "tie_word_embeddings", True),
        position="rope", max_seq_len=integer(raw, "max_position_embeddings", 2048),
        dropout=dropout(raw, "hidden_dropout", "attention_dropout"), fused_qkv=True,
        transformers_caches_all_heads=all_heads)


_GPT2_NAMES = {"n_layers": "n_layer", "d_model": "n_embd", "n_heads": "n_head", "d_ff": "n_inner",
               "vocab_size": "vocab_size", "max_seq_len": "n_positions"}
_NEOX_NAMES = {k: v for k, v in LLAMA_KEY_NAMES.items() if k not in ("n_kv_heads", "head_dim")}
_FALCON_NAMES = LLAMA_KEY_NAMES | {"n_kv_heads": "num_kv_heads", "d_ff": "ffn_hidden_size"}
_FALCON_KEYS = frozenset(("hidden_size", "num_hidden_layers", "num_attention_heads", "num_kv_heads",
                          "ffn_hidden_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings",
                          "bias", "parallel_attn", "new_decoder_architecture", "multi_query",
                          "num_ln_in_parallel_attn", "n_embed"))

FAMILIES: tuple[Family, ...] = (
    # GPT2Config.attribute_map lets hidden_size & co. set n_embd & co.
    Family("gpt2", _gpt2, frozenset(("n_embd", "n_layer", "n_head", "n_inner", "vocab_size", "n_positions",
                                     "tie_word_embeddings", "hidden_size", "num_hidden_layers",
                                     "num_attention_heads", "max_position_embeddings")), _GPT2_NAMES),
    Family("gpt_neox", _gpt_neox, frozenset((
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
        "max_position_embeddings", "tie_word_embeddings", "attention_bias", "use_parallel_residual")),
        _NEOX_NAMES),
    Family("falcon", _falcon, _FALCON_KEYS, _FALCON_NAMES),
    Family("starcoder2", _starcoder2, LLAMA_KEYS | {"use_bias"}, LLAMA_KEY_NAMES),
)
