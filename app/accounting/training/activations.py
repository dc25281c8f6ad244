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

Each layer's attention and MLP list their own items (app/accounting/blocks/): a
mixture-of-experts layer keeps the router's tensors and, for the routed experts,
top_k copies of every token's expert input, hidden and output (routing dropless,
tokens spread evenly, so no expert holds more than its share of the step's
transients either); multi-head latent attention keeps its latents and the per-head
q, k, v it expands them to. The layer's norm layout then changes the norms' items.

Symbols: s sequence length, b micro-batch size, h d_model, a heads, t tensor-
parallel size, v vocabulary; e n_experts, k top_k.
"""

from functools import lru_cache
from typing import Literal

from app.accounting.blocks import Layer
from app.accounting.blocks.base import Item, Recompute
from app.accounting.errors import InvalidInput
from app.accounting.models import TransformerConfig
from app.accounting.training import fp8

TrainRecompute = Literal[Recompute, "op_selective"]
"""What a pretraining plan and its memory take: also torchtitan's op-level selective checkpointing."""

__all__ = ["Item", "Recompute", "TrainRecompute", "layer_recipe", "op_selective_recompute_flops", "embedding_recipe", "head_recipe", "sized", "linear_stack"]


@lru_cache(maxsize=1024)
def layer_recipe(layer: Layer, act_bytes: int, recompute: TrainRecompute, residual_bytes: int | None = None, *,
                 tp: int = 1, linear_input_bytes: int = 0) -> tuple[Item, ...]:
    """Tensors one layer keeps for backward, its attention's then its MLP's. selective drops the
    attention core (softmax and its dropout over s x s), which is recomputed, as FlashAttention
    never stores it; full keeps only the layer's input and recomputes the rest. residual_bytes
    sizes the residual stream (layer and norm inputs), which stays in fp32 under autocast while
    matmul inputs are 16-bit; default act_bytes. tp sizes K and V when tensor ranks outnumber the
    key/value heads and each keeps a replica of one (Megatron-LM, vLLM). linear_input_bytes, when
    given, sizes the linear projections' saved inputs (an FP8 recipe keeps them in FP8: fp8.py)."""
    cfg, res = layer.attention.cfg, act_bytes if residual_bytes is None else residual_bytes
    if recompute == "full":
        return (Item("layer_input", cfg.d_model, 0, res, False),)
    if recompute == "op_selective":
        return _op_selective(layer, act_bytes, res, linear_input_bytes)
    items = layer.attention.saved(act_bytes=act_bytes, residual_bytes=res, recompute=recompute, tp=tp)
    items += layer.mlp.saved(act_bytes=act_bytes, residual_bytes=res)
    items = _norm_layout(cfg, items, act_bytes, res)
    if linear_input_bytes:
        items = [i._replace(bytes_per_element=linear_input_bytes) if i.name in fp8.LINEAR_INPUTS else i
                 for i in items]
    return tuple(i for i in items if i.per_token or i.per_token_per_position)


def _dense_only(layer: Layer) -> TransformerConfig:
    cfg = layer.attention.cfg
    if layer.mlp.routes or cfg.mla or cfg.norm_layout != "pre":
        raise InvalidInput("recompute", "op_selective is torchtitan's policy for its pre-norm dense blocks "
                                        "(grouped-query attention and an MLP); use selective or full for a "
                                        "mixture-of-experts, latent-attention or other block")
    return cfg


def _op_selective(layer: Layer, act_bytes: int, res: int, linear_input_bytes: int) -> tuple[Item, ...]:
    """torchtitan's op-level selective activation checkpointing (torchtitan/distributed/
    activation_checkpoint.py, selective_ac_option "op"): each block is checkpointed, and inside it
    the outputs of matmuls, attention (SDPA) and tensor-parallel reduce-scatters are saved, except
    every second matmul, which is recomputed. torchtitan's Llama block runs its matmuls as wq, wk,
    wv, wo, then w1, w3, w2 (SwiGLU: w2(silu(w1 x) * w3 x)), or up, down for a plain MLP: the odd ones
    (q, v, w1, w2) are saved, the even ones (k, o, w3) recomputed, with the norms, rotary and
    activations between them. Saved per token: the block's input (the checkpoint's), q, v, the
    attention output and its fp32 log-sum-exp per head, w1's output and w2's (after the reduce-scatter
    under tensor parallelism). FP8 recipes keep the same tensors (their outputs are bf16)."""
    cfg = _dense_only(layer)
    del linear_input_bytes  # saved matmul outputs, not inputs
    q, kv = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
    items = [Item("layer_input", cfg.d_model, 0, res, False), Item("attention/q", q, 0, act_bytes, True),
             Item("attention/v", kv, 0, act_bytes, True), Item("attention/sdpa_output", q, 0, act_bytes, True),
             Item("attention/sdpa_logsumexp_fp32", cfg.n_heads, 0, 4, True),
             Item("mlp/gate_output" if cfg.gated else "mlp/up_output", cfg.ff, 0, act_bytes, True)]
    if cfg.gated:
        items.append(Item("mlp/down_output", cfg.d_model, 0, act_bytes, False))
    return tuple(items)


def op_selective_recompute_flops(cfg: TransformerConfig, tokens: int) -> int:
    """Forward FLOPs op_selective recomputes per layer: the even matmuls, k and o projections and
    w3 (gated) or down (plain MLP)."""
    h, kv, q = cfg.d_model, cfg.kv_heads * cfg.hd, cfg.n_heads * cfg.hd
    return 2 * tokens * (h * kv + q * h + h * cfg.ff)


def _norm_layout(cfg: TransformerConfig, items: list[Item], act_bytes: int, res: int) -> list[Item]:
    """The pre-norm items, changed for the block's norm layout (fused norms keep their input):
    - post: each norm reads its sublayer's output (matmul dtype), not the residual;
    - sandwich: two more norms, each keeping its sublayer's output;
    - parallel: both norms read the same residual, kept once; parallel_shared: one norm,
      whose output both sublayers read (one copy, or one 16-bit copy each under autocast)."""
    layout, out = cfg.norm_layout, []
    for item in items:
        name = item.name
        if name.endswith("/norm_input") and name != "attention/norm_input" and layout.startswith("parallel"):
            continue
        shared_input = name in ("mlp/up_input", "moe/router_input")
        if shared_input and layout == "parallel_shared" and act_bytes == res:
            continue
        if name.endswith("/norm_input") and layout == "post":
            item = item._replace(bytes_per_element=act_bytes)
        out.append(item)
        if layout == "sandwich" and name in ("attention/output_proj_input",):
            out.append(Item("attention/post_norm_input", cfg.d_model, 0, act_bytes, False))
    if layout == "sandwich":
        mlp = "moe" if any(i.name.startswith("moe/") for i in items) else "mlp"
        out.append(Item(f"{mlp}/post_norm_input", cfg.d_model, 0, act_bytes, False))
    return out


@lru_cache(maxsize=1024)
def embedding_recipe(cfg: TransformerConfig) -> tuple[Item, ...]:
    """First stage, outside the layers: the embedding dropout mask."""
    return (Item("embedding/dropout_mask", cfg.d_model, 0, 1, False),) if cfg.dropout else ()


@lru_cache(maxsize=1024)
def head_recipe(cfg: TransformerConfig, act_bytes: int,
                residual_bytes: int | None = None) -> tuple[Item, ...]:
    """Last stage, outside the layers: final norm, LM head input, and the logits
    the cross-entropy keeps in float32 (the paper's 4sbv/t)."""
    res = act_bytes if residual_bytes is None else residual_bytes
    return (
        Item("head/final_norm_input", cfg.d_model, 0, res, False),
        Item("head/lm_head_input", cfg.d_model, 0, act_bytes, False),
        Item("head/logits_fp32", cfg.vocab_size, 0, 4, True),
    )


def sized(items: tuple[Item, ...], *, s: int, b: int, t: int, sequence_parallel: bool) -> dict[str, int]:
    """Bytes per micro-batch on one GPU, by saved tensor: everything divides by t
    under sequence parallelism, only the tensor-parallel regions without it, and never
    what every tensor rank holds whole."""
    sb, out = s * b, {}
    for name, per_token, per_position, nbytes, split, replicated in items:
        total = sb * (per_token + per_position * s) * nbytes
        out[name] = -(-total // t) if (split or sequence_parallel) and t > 1 and not replicated else total
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
