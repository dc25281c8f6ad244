"""FLOPs of one LoRA fine-tuning step: the frozen model's forward, the adapters' small matmuls
forward and backward, and only the input-gradient matmuls autograd runs through frozen weights.

Autograd computes a matmul operand's gradient only where that operand requires one. The base
weights never do, so a frozen nn.Linear costs its forward once more in backward (the input
gradient), and only where its input requires a gradient. The token embedding is frozen, so the
first layer's input does not: its frozen projections, and the attention products of operands
that no adapter feeds, cost nothing in backward. From the first adapted output on, the
residual stream requires gradients and every later matmul pays its input gradient.

An adapter on a matrix of (in, out) over t tokens (A: r x in, B: out x r) costs 2 t r (in + out)
forward, and in backward dB and the gradient through B (2 t r out each), dA (2 t r in), and the
input gradient through A (2 t r in) where its input requires one.
"""

from dataclasses import dataclass

from app.accounting.config import TransformerConfig
from app.accounting.errors import InvalidInput
from app.accounting.finetune.lora import lora_params
from app.accounting.flops import Causal, score_pairs_doubled, transformer_forward
from app.accounting.records import RECORD


@dataclass(slots=True)
class LoraFlops:
    """Matmul FLOPs of one LoRA step (FLOPs, a multiply-add counted as 2)."""

    forward: int
    """The frozen model's forward (flops.transformer_forward) plus the adapters'."""
    backward: int
    adapters_forward: int
    adapters_backward: int
    total: int
    full_fine_tune: int
    """The same step training every weight: 3 x the base forward."""

    __pydantic_config__ = RECORD


def _adapter(t: int, r: int, fan_in: int, fan_out: int, input_grad: bool) -> tuple[int, int]:
    forward = 2 * t * r * (fan_in + fan_out)
    return forward, 2 * t * r * (2 * fan_out + fan_in + (fan_in if input_grad else 0))


def lora_step_flops(cfg: TransformerConfig, *, batch_size: int, seq_len: int, rank: int,
                    targets: tuple[str, ...], causal: Causal = "full") -> LoraFlops:
    lora_params(cfg, rank=rank, targets=targets)  # refuses what peft could not wrap, naming it
    if cfg.mla:
        raise InvalidInput("model", "LoRA step FLOPs are counted for multi-head and grouped-query "
                                    "attention; latent attention's are not yet")
    base = transformer_forward(cfg, batch_size, seq_len, causal)
    t, d, r, wanted = batch_size * seq_len, cfg.d_model, rank, set(targets)
    kinds = cfg.layers
    back = adapt_fwd = adapt_back = 0

    def linear(fan_in: int, fan_out: int, target: str | None, x_grad: bool, count: int = 1) -> bool:
        """A (possibly adapted) frozen linear; whether its output requires a gradient."""
        nonlocal back, adapt_fwd, adapt_back
        if x_grad:
            back += 2 * t * fan_in * fan_out * count
        if target in wanted:
            f, b = _adapter(t, r, fan_in, fan_out, x_grad)
            adapt_fwd += f * count
            adapt_back += b * count
        return x_grad or target in wanted

    grad = False  # the token embedding is frozen
    for layer in range(cfg.n_layers):
        hd = cfg.hd
        qw, kvw = cfg.n_heads * hd, cfg.kv_heads * hd
        q = linear(d, qw, "q", grad)
        k = linear(d, kvw, "k", grad)
        v = linear(d, kvw, "v", grad)
        window = cfg.sliding_window if kinds.windowed[layer] else None
        pairs = batch_size * cfg.n_heads * hd * score_pairs_doubled(seq_len, window, causal)
        back += pairs * (q + k)  # dQ, dK of Q @ K^T
        weights = q or k
        back += pairs * (weights + v)  # d(probabilities), dV of P @ V
        out = linear(qw, d, "o", weights or v)
        grad = grad or out
        if kinds.moe[layer]:
            back += 2 * t * d * cfg.n_experts * grad  # the router's input gradient
            matrices = 3 if cfg.gated else 2
            back += 2 * t * cfg.top_k * d * cfg.ff_expert * matrices * grad
            mlp_out = grad
            if cfg.ff_shared:
                mlp_out = _mlp(linear, cfg.ff_shared, grad, cfg.gated, d) or mlp_out
                if cfg.shared_expert_gate:
                    linear(d, 1, None, grad)
        else:
            mlp_out = _mlp(linear, cfg.ff, grad, cfg.gated, d)
        grad = grad or mlp_out
    back += base.lm_head * grad  # the head's input gradient; the head itself is frozen
    forward = base.total + adapt_fwd
    backward = back + adapt_back
    return LoraFlops(forward=forward, backward=backward, adapters_forward=adapt_fwd,
                     adapters_backward=adapt_back, total=forward + backward, full_fine_tune=3 * base.total)


def _mlp(linear, width: int, x_grad: bool, gated: bool, d: int) -> bool:
    """A frozen MLP of `width`; whether its output requires a gradient."""
    if gated:
        hidden = linear(d, width, "gate", x_grad) | linear(d, width, "up", x_grad)
    else:
        hidden = linear(d, width, "up", x_grad)
    return linear(width, d, "down", hidden)
