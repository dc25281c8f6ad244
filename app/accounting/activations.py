"""Activation memory, after Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (arXiv:2205.05198), section 4.

The paper counts, per layer, every tensor the backward pass keeps, for a GPT
block with 16-bit activations, 1-byte dropout masks, d_ff = 4h and
multi-head attention, and arrives at s*b*h*(34 + 5*a*s/h) bytes. The same
items are listed here one by one with their element sizes, so the sum is
exactly the paper's for that block, and stays meaningful for SwiGLU, grouped-
query attention, no dropout, or 4-byte activations.

Symbols: s sequence length, b micro-batch size, h d_model, a heads, t tensor-
parallel size, v vocabulary.
"""

import math
from dataclasses import dataclass
from typing import Literal

from app.accounting.models import TransformerConfig

Recompute = Literal["none", "selective", "full"]


@dataclass(frozen=True, slots=True)
class _Item:
    name: str
    elements: int  # per layer per micro-batch, before any parallel split
    bytes_per_element: int
    tensor_parallel: bool  # split by t even without sequence parallelism
    attention_core: bool = False  # the s^2 tensors that selective recompute drops


def layer_items(cfg: TransformerConfig, s: int, b: int, act_bytes: int) -> list[_Item]:
    """Tensors one transformer layer saves for backward, with no recompute."""
    sb, h, f, a = s * b, cfg.d_model, cfg.ff, cfg.n_heads
    hq, hkv = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
    mask = 1 if cfg.dropout else 0
    items = [
        _Item("attention/norm_input", sb * h, act_bytes, False),
        _Item("attention/qkv_input", sb * h, act_bytes, False),
        _Item("attention/q_and_k", sb * (hq + hkv), act_bytes, True),
        _Item("attention/softmax_output", a * s * s * b, act_bytes, True, attention_core=True),
    ]
    if mask:
        items += [
            _Item("attention/softmax_dropout_mask", a * s * s * b, 1, True, attention_core=True),
            _Item("attention/softmax_dropout_output", a * s * s * b, act_bytes, True, attention_core=True),
        ]
    items += [
        _Item("attention/v", sb * hkv, act_bytes, True),
        _Item("attention/output_proj_input", sb * hq, act_bytes, True),
    ]
    if mask:
        items.append(_Item("attention/dropout_mask", sb * h, 1, False))
    items += [
        _Item("mlp/norm_input", sb * h, act_bytes, False),
        _Item("mlp/up_input", sb * h, act_bytes, False),
    ]
    if cfg.mlp == "swiglu":  # silu(x W_gate) * (x W_up), then W_down
        items += [
            _Item("mlp/gate_output", sb * f, act_bytes, True),
            _Item("mlp/up_output", sb * f, act_bytes, True),
            _Item("mlp/silu_output", sb * f, act_bytes, True),
            _Item("mlp/down_input", sb * f, act_bytes, True),
        ]
    else:
        items += [
            _Item("mlp/activation_input", sb * f, act_bytes, True),
            _Item("mlp/down_input", sb * f, act_bytes, True),
        ]
    if mask:
        items.append(_Item("mlp/dropout_mask", sb * h, 1, False))
    return items


def _split(item: _Item, t: int, sequence_parallel: bool) -> int:
    total = item.elements * item.bytes_per_element
    return math.ceil(total / t) if (item.tensor_parallel or sequence_parallel) else total


def per_layer(cfg: TransformerConfig, *, s: int, b: int, act_bytes: int, t: int,
              sequence_parallel: bool, recompute: Recompute) -> dict[str, int]:
    """Bytes one layer keeps per micro-batch on one GPU, by saved tensor.

    selective drops the attention core (softmax and dropout over s x s), which is
    recomputed; FlashAttention never stores it either. full keeps only the
    layer's input and recomputes the rest.
    """
    if recompute == "full":
        layer_input = _Item("layer_input", s * b * cfg.d_model, act_bytes, False)
        return {layer_input.name: _split(layer_input, t, sequence_parallel)}
    items = layer_items(cfg, s, b, act_bytes)
    if recompute == "selective":
        items = [i for i in items if not i.attention_core]
    return {i.name: _split(i, t, sequence_parallel) for i in items}


def embedding_items(cfg: TransformerConfig, *, s: int, b: int, t: int,
                    sequence_parallel: bool) -> dict[str, int]:
    """First stage, outside the layers: the embedding dropout mask."""
    if not cfg.dropout:
        return {}
    mask = _Item("embedding/dropout_mask", s * b * cfg.d_model, 1, False)
    return {mask.name: _split(mask, t, sequence_parallel)}


def head_items(cfg: TransformerConfig, *, s: int, b: int, act_bytes: int, t: int,
               sequence_parallel: bool) -> dict[str, int]:
    """Last stage, outside the layers: final norm, LM head input, and the logits
    the cross-entropy keeps in float32 (the paper's 4sbv/t)."""
    items = [
        _Item("head/final_norm_input", s * b * cfg.d_model, act_bytes, False),
        _Item("head/lm_head_input", s * b * cfg.d_model, act_bytes, False),
        _Item("head/logits_fp32", s * b * cfg.vocab_size, 4, True),
    ]
    return {i.name: _split(i, t, sequence_parallel) for i in items}

