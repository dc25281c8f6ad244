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

Routed experts are 3-D parameters (E, in, out): peft cannot factor the token out of B A x there,
so it folds the adapters into the weight, W + B A per expert (2 E r in out), and backward
computes the merged weight's gradient like a trained expert's (2 t k in out) and from it dB and
dA (2 E r in out each).
"""

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from app.accounting.finetune import spec as ft
from app.accounting.finetune.lora import lora_params
from app.accounting.flops import Causal, score_pairs_doubled, transformer_forward
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig

PEFT_EXPERT_MERGES = 2
"""Times peft 0.21's ParamWrapper computes each merged expert weight in one forward (baddbmm):
one for its parametrization's cache and one more, discarded (FlopCounterMode counts both;
tests/test_lora_flops.py)."""


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


def _walk(cfg: TransformerConfig, spec: ft.FineTune, base, batch_size: int, seq_len: int,
          causal: Causal) -> _Walk:
    plan = ft.graph(cfg, spec)
    t, d, r = batch_size * seq_len, cfg.d_model, spec.rank
    kinds = cfg.layers
    back = adapt_fwd = adapt_back = frozen_read = 0

    def linear(fan_in: int, fan_out: int, target: str | None, x_grad: bool, whole: bool,
               adapters: frozenset[str], count: int = 1) -> bool:
        """A linear layer; whether its output requires a gradient."""
        nonlocal back, adapt_fwd, adapt_back, frozen_read
        back += 2 * t * fan_in * fan_out * count * (x_grad + whole)
        frozen_read += fan_in * fan_out * count * (x_grad and not whole)
        adapted = target in adapters
        if adapted:
            f, b = _adapter(t, r, fan_in, fan_out, x_grad)
            adapt_fwd += f * count
            adapt_back += b * count
        return x_grad or whole or adapted

    for i, (grad, whole, adapters) in enumerate(plan.layers):
        lin = partial(linear, whole=whole, adapters=adapters)
        qw, kvw = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
        if cfg.fused_qkv:
            q = k = v = lin(d, qw + 2 * kvw, "qkv", grad)
        else:
            q, k, v = lin(d, qw, "q", grad), lin(d, kvw, "k", grad), lin(d, kvw, "v", grad)
        window = cfg.sliding_window if kinds.windowed[i] else None
        pairs = batch_size * cfg.n_heads * cfg.hd * score_pairs_doubled(seq_len, window, causal)
        back += pairs * (q + k)  # dQ, dK of Q @ K^T
        weights = q or k
        back += pairs * (weights + v)  # d(probabilities), dV of P @ V
        out = lin(qw, d, "o", weights or v)
        mid = grad or out
        if kinds.moe[i]:
            lin(d, cfg.n_experts, None, mid)  # the router
            up = (2 if cfg.gated else 1) * cfg.ff_expert
            routed = t * cfg.top_k  # token copies over all experts
            gate_up, down = "experts_gate_up" in adapters, "experts_down" in adapters
            back += 2 * routed * d * up * (mid + (whole or gate_up))
            back += 2 * routed * cfg.ff_expert * d * ((mid or whole or gate_up) + (whole or down))
            experts = cfg.n_experts * d * cfg.ff_expert
            frozen_read += experts * (up // cfg.ff_expert) * (mid and not (whole or gate_up))
            frozen_read += experts * ((mid or gate_up) and not (whole or down))
            for fan_in, fan_out, on in ((d, up, gate_up), (cfg.ff_expert, d, down)):
                if on:  # the merged weight W + B A per expert, forward; dB and dA from dW, backward
                    merge = 2 * cfg.n_experts * r * fan_in * fan_out
                    adapt_fwd += PEFT_EXPERT_MERGES * merge
                    adapt_back += 2 * merge
            if cfg.ff_shared:
                _mlp(lin, cfg.ff_shared, mid, cfg, d)
                if cfg.shared_expert_gate:
                    lin(d, 1, None, mid)
        else:
            _mlp(lin, cfg.ff, mid, cfg, d)
    back += base.lm_head * (plan.head_input_grad + plan.head_trains)
    frozen_read += cfg.vocab_size * d * (plan.head_input_grad and not plan.head_trains)
    return _Walk(back, adapt_fwd, adapt_back, frozen_read)


def _mlp(lin, width: int, x_grad: bool, cfg: TransformerConfig, d: int) -> bool:
    """An MLP of `width`; whether its output requires a gradient."""
    if cfg.fused_gate_up:
        hidden = lin(d, 2 * width, "gate_up", x_grad)
    elif cfg.gated:
        hidden = lin(d, width, "gate", x_grad) | lin(d, width, "up", x_grad)
    else:
        hidden = lin(d, width, "up", x_grad)
    return lin(width, d, "down", hidden)
