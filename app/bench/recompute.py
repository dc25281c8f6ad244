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
    def forward(ctx, fn: Callable, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        ctx.fn, ctx.device, ctx.params = fn, x.device.type, len(params)
        ctx.autocast = (torch.is_autocast_enabled(ctx.device), torch.get_autocast_dtype(ctx.device))
        with torch.no_grad():
            parts = [fn(x[i:i + 1], *params) for i in range(x.shape[0])]
        if isinstance(parts[0], tuple):
            kept = [torch.cat(pieces) for pieces in zip(*(p[1] for p in parts), strict=True)]
            parts = [p[0] for p in parts]
        else:
            kept = []
        ctx.save_for_backward(x, *params, *kept)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, *params = ctx.saved_tensors[:1 + ctx.params]
        enabled, dtype = ctx.autocast
        weights = [p.detach().requires_grad_(p.requires_grad) for p in params]
        wanted = [p for p in weights if p.requires_grad]
        grad_x = torch.empty_like(x)
        grad_params: list[torch.Tensor | None] = [None] * len(wanted)
        for i in range(x.shape[0]):
            one = x[i:i + 1].detach().requires_grad_()
            with torch.enable_grad(), torch.autocast(ctx.device, dtype=dtype, enabled=enabled):
                out = ctx.fn(one, *weights)
            out = out[0] if isinstance(out, tuple) else out
            found = torch.autograd.grad(out, [one, *wanted], grad[i:i + 1], allow_unused=True)
            grad_x[i:i + 1] = found[0]
            grad_params = [g if total is None else total if g is None else total + g
                           for total, g in zip(grad_params, found[1:], strict=True)]
        found = iter(grad_params)
        return (None, grad_x, *(next(found) if p.requires_grad else None for p in weights))


def recomputed(fn: Callable, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
    """fn(x, *params) (its output, if it returns what it keeps too), recomputed in backward; eager
    while FLOPs are counted, or without grad."""
    if counting() or not torch.is_grad_enabled():
        out = fn(x, *params)
        return out[0] if isinstance(out, tuple) else out
    return Recomputed.apply(fn, x, *params)


def _silu_grad(z: torch.Tensor) -> torch.Tensor:
    sig = torch.sigmoid(z)
    return sig * (1 + z * (1 - sig))


class GatedNorm(torch.autograd.Function):
    """out = w * rmsnorm(y * silu(z)) over `groups` equal groups of the last dimension (transformers'
    MambaRMSNormGated: the gate before the norm, float32 or wider inside), or y * silu(z) without w."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor | None, groups: int,
                eps: float) -> torch.Tensor:
        wide = torch.promote_types(y.dtype, torch.float32)
        h = y.to(wide) * F.silu(z.to(wide))
        rstd = None
        if weight is not None:
            grouped = h.unflatten(-1, (groups, -1))
            rstd = torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
            h = weight.to(wide) * (grouped * rstd).flatten(-2)
        ctx.groups = groups
        ctx.save_for_backward(y, z, weight, rstd)
        return h.to(y.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        y, z, weight, rstd = ctx.saved_tensors
        wide = torch.promote_types(y.dtype, torch.float32)
        g, yf, zf = grad.to(wide), y.to(wide), z.to(wide)
        gate = F.silu(zf)
        grad_weight = None
        if weight is not None:
            normed = (yf * gate).unflatten(-1, (ctx.groups, -1)) * rstd
            grad_weight = (g * normed.flatten(-2)).sum(tuple(range(g.dim() - 1))).to(weight.dtype)
            dn = (g * weight.to(wide)).unflatten(-1, (ctx.groups, -1))
            g = (rstd * (dn - normed * (dn * normed).mean(-1, keepdim=True))).flatten(-2)
        return (g * gate).to(y.dtype), (g * yf * _silu_grad(zf)).to(z.dtype), grad_weight, None, None
