"""What the fused state-space kernels do for training, in plain torch: a region recomputed in
backward, and the gated RMSNorm that follows the scan.

mamba_ssm's mamba_split_conv1d_scan_combined (and fla's chunked gated-delta kernels) keep the
projection's output and recompute the convolution and the scan in backward, so their
activations cost the input and not the scan's intermediates; Recomputed does the same for any
function of one activation and some parameters. The gated norm out = w * rmsnorm(y * silu(z))
keeps y and z (z a view of the projection's output, already kept) and each group's rstd, as
the fused kernel (mamba_ssm's layernorm_gated) does, where eager autograd would keep four
inner-wide tensors.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F


def counting() -> bool:
    """True while the probe's FLOPs are being counted (SDPA's math backend chosen, as FlopCounterMode
    needs): the model is spelled out eagerly, so recomputation does not count a forward twice."""
    return not torch.backends.cuda.flash_sdp_enabled()


class Recomputed(torch.autograd.Function):
    """fn(x, *params) with only x (and the parameters) kept: backward runs fn again under the
    forward's autocast state and differentiates it. fn must treat each sequence (x's first
    dimension) on its own: both passes run one sequence at a time, so the scan's intermediates
    are one sequence's, as a fused kernel's workspace is a chunk's, not the batch's.

    fn may return (output, kept): tensors a kernel keeps beside its input for its own backward
    (mamba_ssm's MambaInnerFn keeps x_proj's output, B, C and the scan's output). They are kept
    here too, so the memory is the kernel's; this backward recomputes what it needs from x."""

    @staticmethod
    def forward(ctx, fn: Callable, batched: int, *tensors: torch.Tensor) -> torch.Tensor:
        """fn(*tensors): its first `batched` tensors have the batch first (sliced a sequence at a time),
        the others are parameters (whole each time, their gradients summed)."""
        ctx.fn, ctx.batched, ctx.inputs = fn, batched, len(tensors)
        ctx.device = tensors[0].device.type
        ctx.autocast = (torch.is_autocast_enabled(ctx.device), torch.get_autocast_dtype(ctx.device))
        with torch.no_grad():
            parts = [fn(*_sequence(tensors, batched, i)) for i in range(tensors[0].shape[0])]
        if isinstance(parts[0], tuple):
            kept = [torch.cat(pieces) for pieces in zip(*(p[1] for p in parts), strict=True)]
            parts = [p[0] for p in parts]
        else:
            kept = []
        ctx.save_for_backward(*tensors, *kept)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        tensors = ctx.saved_tensors[:ctx.inputs]
        enabled, dtype = ctx.autocast
        batched = tensors[:ctx.batched]
        weights = [p.detach().requires_grad_(p.requires_grad) for p in tensors[ctx.batched:]]
        wanted = [p for p in weights if p.requires_grad]
        grads_in = [torch.zeros_like(t) if t.requires_grad or i == 0 else None for i, t in enumerate(batched)]
        grad_params: list[torch.Tensor | None] = [None] * len(wanted)
        for i in range(batched[0].shape[0]):
            ones = [t[i:i + 1].detach().requires_grad_(g is not None) for t, g in zip(batched, grads_in,
                                                                                        strict=True)]
            with torch.enable_grad(), torch.autocast(ctx.device, dtype=dtype, enabled=enabled):
                out = ctx.fn(*ones, *weights)
            out = out[0] if isinstance(out, tuple) else out
            sought = [t for t in ones if t.requires_grad] + wanted
            found = iter(torch.autograd.grad(out, sought, grad[i:i + 1], allow_unused=True))
            for total in grads_in:
                if total is not None:
                    g = next(found)
                    if g is not None:
                        total[i:i + 1] = g
            grad_params = [g if total is None else total if g is None else total + g
                           for total, g in zip(grad_params, found, strict=True)]
        found = iter(grad_params)
        return (None, None, *grads_in, *(next(found) if p.requires_grad else None for p in weights))


def _sequence(tensors: tuple, batched: int, i: int) -> list:
    return [t[i:i + 1] if k < batched else t for k, t in enumerate(tensors)]


def recomputed(fn: Callable, *tensors: torch.Tensor, batched: int = 1) -> torch.Tensor:
    """fn(*tensors) (its output, if it returns what it keeps too), recomputed in backward, the first
    `batched` tensors a sequence at a time; eager while FLOPs are counted, or without grad."""
    if counting() or not torch.is_grad_enabled():
        out = fn(*tensors)
        return out[0] if isinstance(out, tuple) else out
    return Recomputed.apply(fn, batched, *tensors)


def causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """silu of the depthwise causal convolution of x (B, S, C) with weight (C, 1, K): padded K - 1
    on both sides and cut to S, as transformers' causal_conv1d_fn fallback does. -> (B, S, C)."""
    s, kernel = x.shape[1], weight.shape[-1]
    out = F.conv1d(x.transpose(1, 2), weight, bias, padding=kernel - 1, groups=weight.shape[0])
    return F.silu(out[..., :s]).transpose(1, 2)


def _silu_grad(z: torch.Tensor) -> torch.Tensor:
    sig = torch.sigmoid(z)
    return sig * (1 + z * (1 - sig))


class GatedNorm(torch.autograd.Function):
    """Over `groups` equal groups of the last dimension, gate_first: out = w * rmsnorm(y * silu(z))
    (transformers' MambaRMSNormGated, the gate before the norm), or y * silu(z) without w; else
    out = w * rmsnorm(y) * silu(z) (Qwen3NextRMSNormGated, fla's FusedRMSNormGated). float32 or
    wider inside; it keeps y, z and each group's rstd."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor | None, groups: int,
                eps: float, gate_first: bool = True) -> torch.Tensor:
        wide = torch.promote_types(y.dtype, torch.float32)
        gate = F.silu(z.to(wide))
        h = y.to(wide) * gate if gate_first else y.to(wide)
        rstd = None
        if weight is not None:
            grouped = h.unflatten(-1, (groups, -1))
            rstd = torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
            h = weight.to(wide) * (grouped * rstd).flatten(-2)
        if not gate_first:
            h = h * gate
        ctx.groups, ctx.gate_first = groups, gate_first
        ctx.save_for_backward(y, z, weight, rstd)
        return h.to(y.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        y, z, weight, rstd = ctx.saved_tensors
        wide = torch.promote_types(y.dtype, torch.float32)
        g, yf, zf = grad.to(wide), y.to(wide), z.to(wide)
        gate = F.silu(zf)
        grad_weight, grad_z = None, None
        if not ctx.gate_first:  # out = n w silu(z): the gate's gradient, then the norm's through g silu(z)
            normed = (yf.unflatten(-1, (ctx.groups, -1)) * rstd).flatten(-2) * weight.to(wide)
            grad_z = g * normed * _silu_grad(zf)
            g = g * gate
        h = yf * gate if ctx.gate_first else yf
        if weight is not None:
            normed = h.unflatten(-1, (ctx.groups, -1)) * rstd
            grad_weight = (g * normed.flatten(-2)).sum(tuple(range(g.dim() - 1))).to(weight.dtype)
            dn = (g * weight.to(wide)).unflatten(-1, (ctx.groups, -1))
            g = (rstd * (dn - normed * (dn * normed).mean(-1, keepdim=True))).flatten(-2)
        if ctx.gate_first:
            grad_z, g = g * yf * _silu_grad(zf), g * gate
        return g.to(y.dtype), grad_z.to(z.dtype), grad_weight, None, None, None
