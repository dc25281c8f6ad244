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

Mixture-of-experts layers (moe_recipe) keep the router's tensors and, for the
routed experts, top_k copies of every token's expert input, hidden and output:
routing is dropless, and however tokens spread over experts their copies sum to
s*b*top_k, so the bytes do not depend on the spread (it is assumed even, so no
expert holds more than its share of the step's transients either). Multi-head
latent attention keeps its latents and the per-head q, k, v it expands them to.

Symbols: s sequence length, b micro-batch size, h d_model, a heads, t tensor-
parallel size, v vocabulary; e n_experts, k top_k.
"""

from functools import lru_cache
from typing import Literal, NamedTuple

from app.accounting.models import TransformerConfig

Recompute = Literal["none", "selective", "full"]
INDEX_BYTES = 8  # torch's int64 indices (top-k's and the sort's)
FP32 = 4


class Item(NamedTuple):
    """One saved tensor: elements = s*b*(per_token + per_token_per_position*s)."""

    name: str
    per_token: int
    per_token_per_position: int  # the s x s attention tensors: a elements per token per position
    bytes_per_element: int
    tensor_parallel: bool  # split by t even without sequence parallelism
    replicated: bool = False  # held whole on every tensor rank, even with sequence parallelism


@lru_cache(maxsize=1024)
def layer_recipe(cfg: TransformerConfig, act_bytes: int, recompute: Recompute,
                 residual_bytes: int | None = None, *, moe: bool = False, tp: int = 1) -> tuple[Item, ...]:
    """Tensors one layer keeps for backward: a dense layer, or (moe=True) one whose MLP is
    a mixture of experts. selective drops the attention core (softmax and its dropout over
    s x s), which is recomputed, as FlashAttention never stores it; full keeps only the
    layer's input and recomputes the rest. residual_bytes sizes the residual stream (layer
    and norm inputs), which stays in fp32 under autocast while matmul inputs are 16-bit;
    default act_bytes. tp sizes K and V when tensor ranks outnumber the key/value heads and
    each keeps a replica of one (Megatron-LM, vLLM)."""
    res = act_bytes if residual_bytes is None else residual_bytes
    if recompute == "full":
        return (Item("layer_input", cfg.d_model, 0, res, False),)
    core = 0 if recompute == "selective" else cfg.n_heads
    attention = _latent_attention if cfg.mla else _attention
    items = attention(cfg, act_bytes, res, _core(cfg, core, act_bytes), tp)
    if cfg.dropout:
        items.append(Item("attention/dropout_mask", cfg.d_model, 0, 1, False))
    items += _experts(cfg, act_bytes, res) if moe and cfg.moe else _mlp(cfg, act_bytes, res)
    items = _norm_layout(cfg, items, act_bytes, res, tp)
    return tuple(i for i in items if i.per_token or i.per_token_per_position)


def _norm_layout(cfg: TransformerConfig, items: list[Item], act_bytes: int, res: int,
                 tp: int) -> list[Item]:
    """The pre-norm items, changed for the block's norm layout and q/k norms (fused norms
    keep their input):
    - post: each norm reads its sublayer's output (matmul dtype), not the residual;
    - sandwich: two more norms, each keeping its sublayer's output;
    - parallel: both norms read the same residual, kept once; parallel_shared: one norm,
      whose output both sublayers read (one copy, or one 16-bit copy each under autocast);
    - q/k norms keep q and k as projected (the normalised ones are kept as before)."""
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
        if cfg.qk_norm != "none" and name == "attention/qkv_input":
            hkv = max(cfg.kv_heads, tp) * cfg.hd
            out.append(Item("attention/q_and_k_before_norm", cfg.n_heads * cfg.hd + hkv, 0, act_bytes, True))
    if layout == "sandwich":
        mlp = "moe" if any(i.name.startswith("moe/") for i in items) else "mlp"
        out.append(Item(f"{mlp}/post_norm_input", cfg.d_model, 0, act_bytes, False))
    return out


def _core(cfg: TransformerConfig, core: int, act_bytes: int) -> list[Item]:
    """The s x s softmax output (and its dropout), a per token per position; none when
    recomputed."""
    items = [Item("attention/softmax_output", 0, core, act_bytes, True)]
    if cfg.dropout:
        items += [Item("attention/softmax_dropout_mask", 0, core, 1, True),
                  Item("attention/softmax_dropout_output", 0, core, act_bytes, True)]
    return items


def _attention(cfg: TransformerConfig, act_bytes: int, res: int, core: list[Item], tp: int) -> list[Item]:
    h = cfg.d_model
    # Past n_kv_heads ranks each rank keeps one K/V head: max(kv, t) heads over t ranks.
    hq, hkv = cfg.n_heads * cfg.hd, max(cfg.kv_heads, tp) * cfg.hd
    return [
        Item("attention/norm_input", h, 0, res, False),
        Item("attention/qkv_input", h, 0, act_bytes, False),
        Item("attention/q_and_k", hq + hkv, 0, act_bytes, True),
        *core,
        Item("attention/v", hkv, 0, act_bytes, True),
        Item("attention/output_proj_input", hq, 0, act_bytes, True),
    ]


def _latent_attention(cfg: TransformerConfig, act_bytes: int, res: int, core: list[Item],
                      tp: int) -> list[Item]:
    """DeepSeek-V2/V3's attention as vLLM and Megatron-LM shard it: the down projections
    (and their norms) are replicated over tensor ranks, so their tensors split only with
    sequence parallelism; the per-head up projections are split like attention heads."""
    h, heads = cfg.d_model, cfg.n_heads
    q_latent, rope = cfg.q_lora_rank or 0, cfg.qk_rope_head_dim
    qk = cfg.qk_nope_head_dim + rope
    return [
        Item("attention/norm_input", h, 0, res, False),
        # x, read by the down projections (and by the query projection without a query latent)
        Item("attention/qkv_input", h, 0, act_bytes, False),
        # query latent, key/value latent and the one shared rotary key: the down projections'
        # output, which the latent norms keep as their inputs
        Item("attention/latent_down_output", q_latent + cfg.kv_lora_rank + rope, 0, act_bytes, False),
        # the normalised latents, inputs of the up projections
        Item("attention/latent_up_input", q_latent + cfg.kv_lora_rank, 0, act_bytes, False),
        # per head: q and k at nope + rope (the rotary key copied to every head), v at v_head_dim
        Item("attention/q_and_k", 2 * heads * qk, 0, act_bytes, True),
        *core,
        Item("attention/v", heads * cfg.v_head_dim, 0, act_bytes, True),
        Item("attention/output_proj_input", heads * cfg.v_head_dim, 0, act_bytes, True),
    ]


def _hidden(cfg: TransformerConfig, prefix: str, width: int, act_bytes: int) -> list[Item]:
    """An MLP's hidden tensors at `width`: gate and up outputs, the activation's output and
    the down projection's input when gated; the activation's input and output otherwise."""
    if cfg.gated:  # act(x W_gate) * (x W_up), then W_down
        act = "silu" if cfg.mlp == "swiglu" else "gelu"
        names = ("gate_output", "up_output", f"{act}_output", "down_input")
    else:
        names = ("activation_input", "down_input")
    return [Item(f"{prefix}{name}", width, 0, act_bytes, True) for name in names]


def _mlp(cfg: TransformerConfig, act_bytes: int, res: int) -> list[Item]:
    h = cfg.d_model
    items = [Item("mlp/norm_input", h, 0, res, False), Item("mlp/up_input", h, 0, act_bytes, False),
             *_hidden(cfg, "mlp/", cfg.ff, act_bytes)]
    if cfg.dropout:
        items.append(Item("mlp/dropout_mask", h, 0, 1, False))
    return items


def _experts(cfg: TransformerConfig, act_bytes: int, res: int) -> list[Item]:
    """A mixture-of-experts MLP as transformers routes (softmax over the experts in fp32,
    top_k, renormalised) and Megatron-LM dispatches (copies sorted by expert, each expert
    on its own, outputs weighted and summed back per token). Under tensor parallelism the
    router runs replicated on its tokens; experts' matrices split like an MLP's, so their
    hiddens divide by t, while the tokens gathered for them are whole on every rank."""
    h, e, k = cfg.d_model, cfg.n_experts, cfg.top_k
    items = [
        Item("moe/norm_input", h, 0, res, False),
        # the normalised tokens, read by the router and the shared experts
        Item("moe/router_input", h, 0, act_bytes, False),
        Item("moe/router_probs_fp32", e, 0, FP32, False),  # softmax's output
        # the top_k probabilities and their sum, which the renormalisation divides by
        Item("moe/top_k_probs_fp32", k + 1, 0, FP32, False),
        # the top_k expert ids (top-k's backward) and the permutation sorting copies by expert
        Item("moe/routing_indices", 2 * k, 0, INDEX_BYTES, False),
        Item("moe/expert_inputs", k * h, 0, act_bytes, False, True),
        *_hidden(cfg, "moe/expert_", k * cfg.ff_expert, act_bytes),
        # the combine: each copy's output times its routing weight
        Item("moe/expert_outputs", k * h, 0, act_bytes, False),
        Item("moe/combine_weights", k, 0, act_bytes, False),
    ]
    if cfg.ff_shared:
        items += _hidden(cfg, "moe/shared_", cfg.ff_shared, act_bytes)
    if cfg.shared_expert_gate:  # sigmoid(x w_gate) * shared output (Qwen2-MoE)
        items += [Item("moe/shared_expert_output", h, 0, act_bytes, False),
                  Item("moe/shared_expert_gate_sigmoid", 1, 0, act_bytes, False)]
    if cfg.dropout:
        items.append(Item("moe/dropout_mask", h, 0, 1, False))
    return items


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
