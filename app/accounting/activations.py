"""Activation memory, after Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (arXiv:2205.05198), section 4.

The paper counts, per layer, every tensor the backward pass keeps, for a GPT
block with 16-bit activations, 1-byte dropout masks, d_ff = 4h and
multi-head attention, and arrives at s*b*h*(34 + 5*a*s/h) bytes. The same
items are listed here one by one with their element sizes, so the sum is
exactly the paper's for that block, and stays meaningful for SwiGLU, grouped-
query attention, no dropout, or 4-byte activations. It assumes fused norms
(input kept, not the normalised output) and K, V kept at n_kv_heads width
(as SDPA and FlashAttention do with grouped-query attention).

Symbols: s sequence length, b micro-batch size, h d_model, a heads, t tensor-
parallel size, v vocabulary.
"""

from functools import lru_cache
from typing import Literal, NamedTuple

from app.accounting.models import TransformerConfig

Recompute = Literal["none", "selective", "full"]


class _Item(NamedTuple):
    """One saved tensor: elements = s*b*(per_token + per_token_per_position*s)."""

    name: str
    per_token: int
    per_token_per_position: int  # the s x s attention tensors: a elements per token per position
    bytes_per_element: int
    tensor_parallel: bool  # split by t even without sequence parallelism


@lru_cache(maxsize=1024)
def layer_recipe(cfg: TransformerConfig, act_bytes: int, recompute: Recompute,
                 residual_bytes: int | None = None) -> tuple[_Item, ...]:
    """Tensors one layer keeps for backward. selective drops the attention core
    (softmax and its dropout over s x s), which is recomputed, as FlashAttention
    never stores it; full keeps only the layer's input and recomputes the rest.
    residual_bytes sizes the residual stream (layer and norm inputs), which stays
    in fp32 under autocast while matmul inputs are 16-bit; default act_bytes."""
    h, f, a = cfg.d_model, cfg.ff, cfg.n_heads
    hq, hkv = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
    res = act_bytes if residual_bytes is None else residual_bytes
    if recompute == "full":
        return (_Item("layer_input", h, 0, res, False),)
    core = 0 if recompute == "selective" else a
    items = [
        _Item("attention/norm_input", h, 0, res, False),
        _Item("attention/qkv_input", h, 0, act_bytes, False),
        _Item("attention/q_and_k", hq + hkv, 0, act_bytes, True),
        _Item("attention/softmax_output", 0, core, act_bytes, True),
    ]
    if cfg.dropout:
        items += [
            _Item("attention/softmax_dropout_mask", 0, core, 1, True),
            _Item("attention/softmax_dropout_output", 0, core, act_bytes, True),
        ]
    items += [
        _Item("attention/v", hkv, 0, act_bytes, True),
        _Item("attention/output_proj_input", hq, 0, act_bytes, True),
    ]
    if cfg.dropout:
        items.append(_Item("attention/dropout_mask", h, 0, 1, False))
    items += [
        _Item("mlp/norm_input", h, 0, res, False),
        _Item("mlp/up_input", h, 0, act_bytes, False),
    ]
    if cfg.mlp == "swiglu":  # silu(x W_gate) * (x W_up), then W_down
        names = ("mlp/gate_output", "mlp/up_output", "mlp/silu_output", "mlp/down_input")
    else:
        names = ("mlp/activation_input", "mlp/down_input")
    items += [_Item(name, f, 0, act_bytes, True) for name in names]
    if cfg.dropout:
        items.append(_Item("mlp/dropout_mask", h, 0, 1, False))
    return tuple(i for i in items if i.per_token or i.per_token_per_position)


@lru_cache(maxsize=1024)
def embedding_recipe(cfg: TransformerConfig) -> tuple[_Item, ...]:
    """First stage, outside the layers: the embedding dropout mask."""
    return (_Item("embedding/dropout_mask", cfg.d_model, 0, 1, False),) if cfg.dropout else ()


@lru_cache(maxsize=1024)
def head_recipe(cfg: TransformerConfig, act_bytes: int,
                residual_bytes: int | None = None) -> tuple[_Item, ...]:
    """Last stage, outside the layers: final norm, LM head input, and the logits
    the cross-entropy keeps in float32 (the paper's 4sbv/t)."""
    res = act_bytes if residual_bytes is None else residual_bytes
    return (
        _Item("head/final_norm_input", cfg.d_model, 0, res, False),
        _Item("head/lm_head_input", cfg.d_model, 0, act_bytes, False),
        _Item("head/logits_fp32", cfg.vocab_size, 0, 4, True),
    )


def sized(items: tuple[_Item, ...], *, s: int, b: int, t: int, sequence_parallel: bool) -> dict[str, int]:
    """Bytes per micro-batch on one GPU, by saved tensor: everything divides by t
    under sequence parallelism, only the tensor-parallel regions without it."""
    sb, out = s * b, {}
    for name, per_token, per_position, nbytes, split in items:
        total = sb * (per_token + per_position * s) * nbytes
        out[name] = -(-total // t) if (split or sequence_parallel) and t > 1 else total
    return out


def linear_stack(tokens: int, dims: tuple[int, ...], act_bytes: int, input_copied: bool) -> dict[str, int]:
    """Bytes a stack of bias-free linear layers x @ W1 @ ... @ Wn keeps for backward: each
    layer's input (tokens x d_in), which its weight gradient needs. The first input is the
    batch, which the caller holds anyway, unless autocast keeps a 16-bit copy of it
    (input_copied). The loss keeps the prediction (tokens x d_out) in fp32."""
    out = {f"layer{i}/input": tokens * d_in * act_bytes for i, d_in in enumerate(dims[:-1])
           if i or input_copied}
    out["loss/prediction_fp32"] = tokens * dims[-1] * 4
    return out
