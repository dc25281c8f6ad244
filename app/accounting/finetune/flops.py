"""FLOPs of one fine-tuning step: the model's forward, the adapters' small matmuls forward and
backward, and only the gradient matmuls autograd runs.

Autograd computes a matmul operand's gradient only where that operand requires one. A trained
nn.Linear of (in, out) over t tokens pays 2 t in out for its weight gradient; every nn.Linear,
trained or frozen, pays as much again for its input gradient, but only where its input requires
one (spec.graph: a frozen token embedding leaves the first layers' inputs without). The
attention products pay per operand: dQ and dK of Q K^T where K and Q require gradients, dP and
dV of P V where V and P do.

An adapter on a matrix of (in, out) (A: r x in, B: out x r) costs 2 t r (in + out) forward, and
in backward dB and the gradient through B (2 t r out each), dA (2 t r in), and the input
gradient through A (2 t r in) where its input requires one.

A parallel block (GPT-NeoX, Falcon) feeds its MLP a norm of the layer's input, not of x +
attention(x): behind a frozen embedding, the first layer's MLP input requires no gradient even
where attention carries adapters, and its up and down skip their input gradients (4 t d f).

A state-space or linear-attention mixer (Mamba, Mamba-2, gated DeltaNet) carries no adapters (its
in_proj, x_proj, dt_proj and out_proj are not LoRA targets here): frozen, it passes an input
gradient through its projections and its scan wherever its input requires one (the scan's
backward, less its depthwise convolution's weight gradient); a layer without a mixer (Nemotron-H's
MLP layers) passes the stream to its MLP.

Routed experts are 3-D parameters (E, in, out): peft cannot factor the token out of B A x there,
so it folds the adapters into the weight, W + B A per expert (2 E r in out), and backward
computes the merged weight's gradient like a trained expert's (2 t k in out) and from it dB and
dA (2 E r in out each). r is the target's own rank: 2 lora_rank where peft stacks gate and up
into the experts' gate_up_proj (lora.wrapped).
"""

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from app.accounting import blocks
from app.accounting.finetune import spec as ft
from app.accounting.finetune.lora import lora_params, wrapped
from app.accounting.flops import Causal, transformer_forward
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig

PEFT_EXPERT_MERGES = 2
"""Times peft 0.21's ParamWrapper computes each merged expert weight in one forward (baddbmm):
one for its parametrization's cache and one more, discarded (FlopCounterMode counts both;
tests/oracles/test_lora_flops.py)."""


@dataclass(slots=True)
class FineTuneFlops:
    """Matmul FLOPs of one step (FLOPs: a multiply-add counted as 2)."""

    forward: int
    """The model's forward (flops.transformer_forward) plus the adapters'."""
    backward: int
    adapters_forward: int
    adapters_backward: int
    total: int
    full_fine_tune: int
    """The same step training every weight: 3 x the model's forward."""

    __pydantic_config__ = RECORD


def _adapter(t: int, r: int, fan_in: int, fan_out: int, input_grad: bool) -> tuple[int, int]:
    forward = 2 * t * r * (fan_in + fan_out)
    return forward, 2 * t * r * (2 * fan_out + fan_in + (fan_in if input_grad else 0))


def step_flops(cfg: TransformerConfig, spec: ft.FineTune, *, batch_size: int, seq_len: int,
               causal: Causal = "full") -> FineTuneFlops:
    ft.check(cfg, spec)
    if spec.adapted:  # refuses what peft could not wrap, naming it
        lora_params(cfg, rank=spec.rank, targets=spec.targets)
    base = transformer_forward(cfg, batch_size, seq_len, causal)
    if spec.mode == "full":  # every weight's gradient and every input's: 2 x forward
        return FineTuneFlops(forward=base.total, backward=2 * base.total, adapters_forward=0,
                             adapters_backward=0, total=3 * base.total, full_fine_tune=3 * base.total)
    walk = _walk(cfg, spec, base, batch_size, seq_len, causal)
    forward = base.total + walk.adapters_forward
    backward = walk.backward + walk.adapters_backward
    return FineTuneFlops(forward=forward, backward=backward, adapters_forward=walk.adapters_forward,
                         adapters_backward=walk.adapters_backward, total=forward + backward,
                         full_fine_tune=3 * base.total)


def frozen_weights_in_backward(cfg: TransformerConfig, spec: ft.FineTune) -> int:
    """Elements of the frozen matrices backward computes an input gradient through: those F.linear
    keeps its (autocast's 16-bit) weight for. 0 in mode full."""
    if spec.mode == "full":
        return 0
    return _walk(cfg, spec, transformer_forward(cfg, 1, 1, "full"), 1, 1, "full").frozen_read


class _Walk(NamedTuple):
    backward: int
    adapters_forward: int
    adapters_backward: int
    frozen_read: int


QKV = {"q": "q", "k": "k", "v": "v", "qkv": "qkv"}
"""Which of the attention core's operands each input projection makes (a fused qkv makes all three)."""
ROUTED = ("experts_gate_up", "experts_down")
READ_HIDDEN = ("down", "experts_down")
"""Matrices whose input is the MLP's hidden, not the normed input."""


def _walk(cfg: TransformerConfig, spec: ft.FineTune, base, batch_size: int, seq_len: int,
          causal: Causal) -> _Walk:
    """Each layer's modules (its blocks' linears) in forward order: attention's q/k/v projections, its
    core, its output; then the MLP's, whose inputs are the normed stream and whose down
    projections read the hidden."""
    plan = ft.graph(cfg, spec)
    t = batch_size * seq_len
    # each wrapped target's rank: lora_rank times its multiple (peft's rank_pattern)
    ranks = {m: spec.rank * times for m, times in wrapped(cfg, ft.targets_of(cfg, spec)).items()} \
        if spec.adapted else {}
    back = adapt_fwd = adapt_back = frozen_read = 0

    def linear(m: blocks.Linear, x_grad: bool, whole: bool, adapters: frozenset[str]) -> bool:
        """A linear layer; whether its output requires a gradient."""
        nonlocal back, adapt_fwd, adapt_back, frozen_read
        back += 2 * t * m.fan_in * m.fan_out * (x_grad + whole)
        frozen_read += m.fan_in * m.fan_out * (x_grad and not whole)
        adapted = m.module in adapters
        if adapted:
            f, b = _adapter(t, ranks[m.module], m.fan_in, m.fan_out, x_grad)
            adapt_fwd += f
            adapt_back += b
        return x_grad or whole or adapted

    for layer, (grad, whole, adapters, parallel) in zip(blocks.layers(cfg), plan.layers, strict=True):
        lin = partial(linear, whole=whole, adapters=adapters)
        mlp = layer.mlp.linears()

        mixer = layer.attention
        parts = (mixer.attention, mixer.ssm) if isinstance(mixer, blocks.ParallelMixers) else (mixer,)
        out = False
        for part in parts:  # Falcon-H1: attention and Mamba-2 on one norm
            b, flows = _mixer(part, lin, grad, whole, batch_size, seq_len, causal)
            back, out = back + b, out or flows
        mid = grad if parallel else grad or out  # the MLP reads norm(x), or norm(x + attention(x))
        # gate/up (or gate_up), the router, the shared experts' gate: their outputs require a
        # gradient wherever the stream or their weights do; down reads that hidden.
        hidden = False
        for m in mlp:
            if m.module not in READ_HIDDEN and m.module not in ROUTED:
                hidden = lin(m, mid) or hidden
        for m in mlp:
            if m.module == "down":
                lin(m, hidden)
        routed = {m.module: m for m in mlp if m.module in ROUTED}
        if routed:
            b, a, f = _routed(routed["experts_gate_up"], routed["experts_down"], layer.mlp.top_k * t, mid,
                              whole, adapters, ranks)
            back, adapt_back, adapt_fwd = back + b, adapt_back + a, adapt_fwd + f
            frozen_read += _routed_frozen(routed["experts_gate_up"], routed["experts_down"], mid, whole,
                                          adapters)
    back += base.lm_head * (plan.head_input_grad + plan.head_trains)
    frozen_read += cfg.vocab_size * cfg.d_model * (plan.head_input_grad and not plan.head_trains)
    return _Walk(back, adapt_fwd, adapt_back, frozen_read)


def _mixer(part: blocks.Attention, lin, grad: bool, whole: bool, batch_size: int, seq_len: int,
           causal: Causal) -> tuple[int, bool]:
    """One token mixer's backward FLOPs beyond its linears' (lin counts those), and whether its output
    requires a gradient."""
    attention = part.linears()
    if not part.present:  # Nemotron-H's MLP layers: no mixer
        return 0, False
    if not part.mixes_by_attention:
        flow = grad or whole  # the scan's input and output require gradients (no adapters there)
        for m in attention:  # in_proj(s) read the layer's input; x_proj, dt_proj and out_proj the scan's
            lin(m, grad if m.module.startswith("in_proj") else flow)
        if not flow:
            return 0, False
        # every operand of the scan derives from the input; the conv's weight trains whole only
        scan = part.backward_flops(batch=batch_size, seq_len=seq_len, causal=causal)["mixer_scan"]
        return scan - (0 if whole else part.conv_flops(batch=batch_size, seq_len=seq_len)), True
    made = dict.fromkeys("qkv", False)
    for m in attention:
        if m.module in QKV:
            flows = lin(m, grad)
            made |= {operand: made[operand] or flows for operand in QKV[m.module]}
    q, k, v = made["q"], made["k"], made["v"]
    core = part.forward_flops(batch=batch_size, seq_len=seq_len, causal=causal)
    weights = q or k
    # dQ, dK of Q @ K^T; d(probabilities), dV of P @ V
    back = core["attention_scores"] * (q + k) + core["attention_values"] * (weights + v)
    return back, lin(next(m for m in attention if m.module == "o"), weights or v)


def _routed(gate_up: blocks.Linear, down: blocks.Linear, copies: int, mid: bool, whole: bool,
            adapters: frozenset[str], ranks: dict[str, int]) -> tuple[int, int, int]:
    """(backward, adapters' backward, adapters' forward) of the routed experts: `copies` = tokens x
    top_k rows over all experts (dropless), whatever their spread; `ranks` each adapted target's r."""
    gu, dn = gate_up.module in adapters, down.module in adapters
    back = 2 * copies * gate_up.fan_in * gate_up.fan_out * (mid + (whole or gu))
    back += 2 * copies * down.fan_in * down.fan_out * ((mid or whole or gu) + (whole or dn))
    adapt_fwd = adapt_back = 0
    for m, on in ((gate_up, gu), (down, dn)):
        if on:  # the merged weight W + B A per expert, forward; dB and dA from dW, backward
            merge = 2 * m.experts * ranks[m.module] * m.fan_in * m.fan_out
            adapt_fwd += PEFT_EXPERT_MERGES * merge
            adapt_back += 2 * merge
    return back, adapt_back, adapt_fwd


def _routed_frozen(gate_up: blocks.Linear, down: blocks.Linear, mid: bool, whole: bool,
                   adapters: frozenset[str]) -> int:
    """Elements of frozen expert weights backward passes an input gradient through."""
    gu, dn = gate_up.module in adapters, down.module in adapters
    return (gate_up.experts * gate_up.fan_in * gate_up.fan_out * (mid and not (whole or gu))
            + down.experts * down.fan_in * down.fan_out * ((mid or gu) and not (whole or dn)))
