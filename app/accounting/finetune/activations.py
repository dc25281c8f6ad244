"""Activations a fine-tuning step keeps: the training recipe (app/accounting/training/activations.py),
less what no gradient needs, plus each adapter's own.

Autograd saves a tensor for backward only where some input of the op requires a gradient that
needs it (torch's generated derivatives check should_compute_output). So:
- a frozen nn.Linear keeps no input: its input gradient needs only the weight, held anyway;
  a trained one, or one an adapter reads, keeps it (lora_A saves the same tensor);
- norms, activations, softmax and attention keep their inputs wherever the stream through them
  requires a gradient, frozen or not;
- before the first trained or adapted weight (a frozen embedding, frozen first layers) nothing
  requires a gradient and nothing is kept; in a parallel block (GPT-NeoX, Falcon) the MLP reads
  the layer's input, not attention's output, so an adapter on attention leaves the MLP of the
  first layer keeping nothing;
- an adapter keeps A's output, tokens x r, for B's weight gradient (its input is the wrapped
  matrix's input, kept once);
- an adapter on routed experts (a 3-D parameter) is folded into a merged weight, W + B A per
  expert, which requires a gradient: the experts keep their inputs as trained ones do, and the
  merged weight itself, a copy of the layer's experts in the parameter dtype.
Attention (SDPA, FlashAttention) keeps q, k and v whenever any of them requires a gradient; a
state-space mixer's kernels (mamba_ssm's, fla's) keep their inputs wherever the layer's input requires
a gradient or the layer trains, and its in_proj and out_proj keep theirs only to train.
"""

from app.accounting import blocks
from app.accounting.finetune.lora import EXPERT_TARGETS, TARGETS
from app.accounting.finetune.spec import Graph, LayerGrad
from app.accounting.training import activations as act
from app.accounting.transformer import TransformerConfig

_ATTENTION_CORE = ("attention/q_and_k", "attention/v", "attention/softmax_output",
                   "attention/softmax_dropout_mask", "attention/softmax_dropout_output",
                   "attention/q_and_k_before_norm")


def _flags(layer: LayerGrad, frozen_keep_inputs: bool) -> dict[str, bool]:
    """Which of the layer's streams require gradients, and which matmul inputs are kept: for a
    weight gradient (trained or adapter), or, with frozen_keep_inputs (bitsandbytes' int8
    Linear8bitLt, which keeps its input whenever that input requires a gradient), for any."""
    x, whole, a, parallel = layer
    core = x or whole or bool(a & {"q", "k", "v", "qkv"})
    o_out = core or whole or "o" in a
    mid = x if parallel else x or o_out  # the MLP's input: the layer's, or x + attention(x)
    hidden = mid or whole or bool(a & {"gate", "up", "gate_up"})
    gate_up, down = "experts_gate_up" in a, "experts_down" in a
    k = frozen_keep_inputs
    return {"x": x, "whole": whole, "core": core, "o_out": o_out, "mid": mid, "hidden": hidden, "keep": k,
            # a state-space mixer's scan (no adapters there): its input requires a gradient or it trains
            "scan": x or whole,
            # routed experts, adapted through their merged weights
            "experts_in": whole or gate_up, "experts_down_in": whole or down,
            "experts": mid or whole or gate_up or down,
            "qkv_in": whole or bool(a & {"q", "k", "v", "qkv"}) or k and x,
            # attention keeps its output for its own backward (SDPA, FlashAttention: O and lse)
            "o_in": whole or "o" in a or core,
            "up_in": whole or bool(a & {"gate", "up", "gate_up"}) or k and mid,
            "down_in": whole or "down" in a or k and hidden}


def _kept(name: str, f: dict[str, bool], shared_experts: bool) -> bool:
    if name == "layer_input":  # full recompute: the layer's input, wherever backward enters it
        return f["x"] or f["hidden"]
    if name in _ATTENTION_CORE:
        return f["core"]
    mixer = name.split("/")[0] in ("mamba", "deltanet")
    if mixer:  # a state-space mixer: its projections keep inputs to train, its kernels to pass a gradient
        rules = {"/norm_input": f["x"], "/in_proj_input": f["whole"] or f["keep"] and f["x"],
                 "/out_proj_input": f["whole"] or f["keep"] and f["scan"]}
        return rules.get(name[name.index("/"):], f["scan"])
    rules = {
        "attention/norm_input": f["x"], "attention/qkv_input": f["qkv_in"],
        "attention/output_proj_input": f["o_in"], "attention/dropout_mask": f["o_out"],
        "attention/post_norm_input": f["o_out"],
        "mlp/norm_input": f["mid"], "mlp/up_input": f["up_in"], "mlp/down_input": f["down_in"],
        "moe/norm_input": f["mid"],
        # read by the router and the shared experts: kept for their weight gradients only
        "moe/router_input": f["whole"] or (shared_experts and f["up_in"]),
        # routed experts: their inputs kept where they train or carry adapters (the merged W + B A)
        "moe/expert_inputs": f["experts_in"], "moe/expert_down_input": f["experts_down_in"],
        "moe/shared_down_input": f["down_in"],
    }
    if name in rules:
        return rules[name]
    if name.startswith("mlp/"):  # hiddens, dropout mask, post-norm input
        return f["hidden"]
    if name.startswith("moe/expert_"):  # the routed experts' hiddens and outputs
        return f["experts"]
    return f["mid"] or f["whole"]  # router softmax and top-k, shared experts


def _adapter_items(layer: blocks.Layer, grad: LayerGrad, rank: int, act_bytes: int) -> list[act.Item]:
    """A's output (tokens x r) per adapter on a matrix the layer has (its attention's, its MLP's or
    its shared experts'); adapters on routed experts keep their merged weights instead."""
    present = {m.module for m in layer.linears()} & set(TARGETS)
    return [act.Item(f"lora/{t}_A_output", rank, 0, act_bytes, False)
            for t in sorted(grad.adapters & present - set(EXPERT_TARGETS))]


def _merged_experts(layer: blocks.Layer, adapters: frozenset[str]) -> dict[str, int]:
    """Elements of the merged expert weights (W + B A per expert) a layer's experts read, which
    their matmuls keep for the input gradients: a copy of the layer's adapted routed experts."""
    return {f"lora/{m.module}_merged": m.experts * m.fan_in * m.fan_out for m in layer.linears()
            if m.module in EXPERT_TARGETS and m.module in adapters}


def _copies(item: act.Item, layer: LayerGrad, autocast: bool) -> act.Item:
    """Under autocast (16-bit matmul inputs over an fp32 residual) each adapter's A casts its
    input itself, keeping its own 16-bit copy: autocast caches casts of leaf weights only. A
    trained fused projection casts once."""
    targets = {"attention/qkv_input": {"q", "k", "v", "qkv"},
               "mlp/up_input": {"gate", "up", "gate_up"}}.get(item.name)
    if not autocast or targets is None or layer.whole:
        return item
    return item._replace(per_token=item.per_token * max(1, len(layer.adapters & targets)))


def _mlp_alone_keeps_shared_norm(layer: blocks.Layer, f: dict[str, bool], act_bytes: int,
                                 residual_bytes: int, shared_experts: bool) -> list[act.Item]:
    """One norm feeding attention and the MLP (Falcon-7B's parallel_shared, no autocast): the
    training recipe keeps its output once, as attention's qkv_input (tokens x d_model). Where
    attention's projections keep nothing but the MLP's first matrices do (an adapter on up alone),
    the MLP keeps it: the recipe's copy is then its up_input (or router_input)."""
    cfg = layer.attention.cfg
    if cfg.norm_layout != "parallel_shared" or act_bytes != residual_bytes or f["qkv_in"]:
        return []
    return [item for item in layer.mlp.saved(act_bytes=act_bytes, residual_bytes=residual_bytes)
            if item.name in ("mlp/up_input", "moe/router_input") and _kept(item.name, f, shared_experts)]


def _layer(layer: blocks.Layer, grad: LayerGrad, *, rank: int, act_bytes: int, residual_bytes: int,
           recompute: act.Recompute, seq_len: int, batch_size: int, weight_bytes: int,
           frozen_keep_inputs: bool) -> dict[str, int]:
    """Bytes one layer keeps for backward, by saved tensor."""
    cfg, out = layer.attention.cfg, {}

    def add(items) -> None:
        for name, size in act.sized(tuple(items), s=seq_len, b=batch_size, t=1,
                                    sequence_parallel=False).items():
            out[name] = out.get(name, 0) + size

    recipe = act.layer_recipe(layer, act_bytes, recompute, residual_bytes)
    # The adapters this layer has: a hybrid's Mamba or DeltaNet layer has no q, k, v or o to wrap.
    grad = grad._replace(adapters=grad.adapters & {m.module for m in layer.linears()})
    f = _flags(grad, frozen_keep_inputs)
    autocast = act_bytes != residual_bytes
    add(_copies(item, grad, autocast) for item in recipe if _kept(item.name, f, bool(cfg.ff_shared)))
    if recompute != "full" and grad.adapters:
        add(_adapter_items(layer, grad, rank, act_bytes))
        add(_mlp_alone_keeps_shared_norm(layer, f, act_bytes, residual_bytes, bool(cfg.ff_shared)))
    if recompute != "full":
        for name, elements in _merged_experts(layer, grad.adapters).items():
            out[name] = out.get(name, 0) + elements * weight_bytes
    return out


def saved(cfg: TransformerConfig, plan: Graph, *, rank: int, act_bytes: int, residual_bytes: int,
          recompute: act.Recompute, seq_len: int, batch_size: int, weight_bytes: int,
          frozen_keep_inputs: bool = False) -> dict[str, int]:
    """Bytes kept for backward over the whole model, by saved tensor (summed over layers).
    weight_bytes sizes the merged expert weights (the base's parameter dtype)."""
    out: dict[str, int] = {}
    for layer, grad in zip(blocks.layers(cfg), plan.layers, strict=True):
        for name, size in _layer(layer, grad, rank=rank, act_bytes=act_bytes, residual_bytes=residual_bytes,
                                 recompute=recompute, seq_len=seq_len, batch_size=batch_size,
                                 weight_bytes=weight_bytes, frozen_keep_inputs=frozen_keep_inputs).items():
            out[name] = out.get(name, 0) + size
    if plan.embedding_trains:
        for name, size in act.sized(act.embedding_recipe(cfg), s=seq_len, b=batch_size, t=1,
                                    sequence_parallel=False).items():
            out[name] = out.get(name, 0) + size
    head = {"head/final_norm_input": plan.head_input_grad, "head/lm_head_input": plan.head_trains,
            "head/logits_fp32": True}
    kept = tuple(item for item in act.head_recipe(cfg, act_bytes, residual_bytes) if head[item.name])
    for name, size in act.sized(kept, s=seq_len, b=batch_size, t=1, sequence_parallel=False).items():
        out[name] = out.get(name, 0) + size
    return {name: size for name, size in out.items() if size}


def recomputed_layer(cfg: TransformerConfig, plan: Graph, *, rank: int, act_bytes: int, residual_bytes: int,
                     seq_len: int, batch_size: int, weight_bytes: int,
                     frozen_keep_inputs: bool = False) -> int:
    """Bytes the largest checkpointed layer keeps while backward reruns its forward and differentiates
    it (torch.utils.checkpoint): what it keeps unchecked, with no s x s scores (FlashAttention, SDPA)."""
    return max((sum(_layer(layer, grad, rank=rank, act_bytes=act_bytes, residual_bytes=residual_bytes,
                           recompute="selective", seq_len=seq_len, batch_size=batch_size,
                           weight_bytes=weight_bytes, frozen_keep_inputs=frozen_keep_inputs).values())
                for layer, grad in zip(blocks.layers(cfg), plan.layers, strict=True)), default=0)
