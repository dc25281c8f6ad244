"""Mamba's selective scan mixer (Mamba-1: Jamba's mamba layers) as the probe trains it: the layout
of transformers' JambaMambaMixer (its sequential scan, RMSNorms on dt, B and C with
ssm_dt_bc_norms), run as mamba_ssm's MambaInnerFn runs it in training (checkpoint_lvl 1): from
in_proj's output xz it computes the convolution, x_proj, dt_proj, the scan, the gate and out_proj
in one function that keeps xz, x_proj's output, B and C (contiguous copies, normed for Jamba) and
the scan's output, and recomputes the rest in backward (mamba_ssm/ops/selective_scan_interface.py
at e9594ce). app/accounting/blocks/mamba1.py predicts those items.

Shapes: x (B, S, d) -> in_proj -> xz (B, S, 2I): x then the gate z; the depthwise causal
convolution (width K) and silu over x; x_proj -> (B, S, R + 2N): dt, B, C; dt_proj (I, R) ->
delta, softplus(delta + bias); the state (B, I, N) advanced token by token, h = exp(A delta) h +
delta B u, y = h C (one bmm a token, as FlopCounterMode counts transformers' loop); y + D u; y
silu(z); out_proj (d, I).
"""

import torch
import torch.nn.functional as F
from torch import nn

from app.accounting.models import TransformerConfig
from app.bench.recompute import causal_conv, counting, recomputed

SCAN_BLOCK = 16
"""Tokens between the states the scan keeps for backward (mamba_ssm's kernel keeps one every 2048,
its scan_intermediates): backward recomputes each block's states from the one before it."""


def _steps(u: torch.Tensor, delta: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
           h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence over u's tokens from state h (B, I, N): h = exp(a delta) h + delta b u, y = h c.
    u, delta (B, T, I); a (I, N); b, c (B, T, N). -> y (B, T, I) in u's dtype, the last state."""
    ys = []
    for t in range(u.shape[1]):
        push = (delta[:, t] * u[:, t].float())[..., None] * b[:, t, None].float()  # delta b u, (B, I, N)
        h = (a * delta[:, t, :, None]).exp() * h + push
        ys.append((h.to(u.dtype) @ c[:, t, :, None].to(u.dtype))[..., 0])  # (B, I, N) @ (B, N, 1): a bmm
    return torch.stack(ys, dim=1), h


class SelectiveScan(torch.autograd.Function):
    """The recurrence as a kernel runs it: no (tokens, I, N) tensor is ever whole. Forward keeps the
    state every SCAN_BLOCK tokens; backward walks the blocks last to first, recomputing each block's
    steps from its first state under autograd, the gradient of its last state carried back."""

    @staticmethod
    def forward(ctx, u, delta, a, b, c):
        h = torch.zeros(u.shape[0], a.shape[0], a.shape[1], device=u.device)
        starts, ys = [], []
        for t in range(0, u.shape[1], SCAN_BLOCK):
            starts.append(h)
            y, h = _steps(*(x[:, t:t + SCAN_BLOCK] for x in (u, delta)), a,
                          *(x[:, t:t + SCAN_BLOCK] for x in (b, c)), h)
            ys.append(y)
        ctx.save_for_backward(u, delta, a, b, c, *starts)
        return torch.cat(ys, dim=1)

    @staticmethod
    def backward(ctx, grad):
        u, delta, a, b, c, *starts = ctx.saved_tensors
        grads = [torch.zeros_like(x) for x in (u, delta, b, c)]
        grad_a, grad_h = torch.zeros_like(a), None
        for i in reversed(range(len(starts))):
            t = slice(i * SCAN_BLOCK, (i + 1) * SCAN_BLOCK)
            pieces = [x[:, t].detach().requires_grad_() for x in (u, delta, b, c)]
            block_a, h0 = a.detach().requires_grad_(), starts[i].detach().requires_grad_()
            with torch.enable_grad():
                y, h = _steps(pieces[0], pieces[1], block_a, pieces[2], pieces[3], h0)
                outs, dots = [y], [grad[:, t]]
                if grad_h is not None:
                    outs, dots = outs + [h], dots + [grad_h]
                found = torch.autograd.grad(outs, [*pieces, block_a, h0], dots)
            for total, g in zip(grads, found[:4], strict=True):
                total[:, t] = g
            grad_a += found[4]
            grad_h = found[5]
        return grads[0], grads[1], grad_a, grads[2], grads[3]


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """JambaRMSNorm: float32 inside, the weight times the normed input in its dtype."""
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    return weight * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class Mamba1Mixer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        d, self.inner, self.state = cfg.d_model, cfg.ssm_inner, cfg.ssm_state_size
        self.rank = cfg.ssm_dt_rank
        kernel = cfg.ssm_conv_kernel
        self.in_proj = nn.Linear(d, 2 * self.inner, bias=cfg.ssm_proj_bias)
        self.conv1d = nn.Conv1d(self.inner, self.inner, kernel, groups=self.inner, padding=kernel - 1,
                                bias=cfg.ssm_conv_bias)
        self.x_proj = nn.Linear(self.inner, self.rank + 2 * self.state, bias=False)
        self.dt_proj = nn.Linear(self.rank, self.inner, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, self.state + 1, dtype=torch.float32))
                                  .expand(self.inner, -1).contiguous())
        self.D = nn.Parameter(torch.ones(self.inner))
        self.out_proj = nn.Linear(self.inner, d, bias=cfg.ssm_proj_bias)
        if cfg.ssm_dt_bc_norms:
            self.dt_norm = nn.Parameter(torch.ones(self.rank))
            self.b_norm = nn.Parameter(torch.ones(self.state))
            self.c_norm = nn.Parameter(torch.ones(self.state))
        self.names = [n for n, _ in self.named_parameters() if not n.startswith("in_proj")]

    def _inner(self, xz: torch.Tensor, *params: torch.Tensor):
        """(B, S, 2I) -> (out_proj's output (B, S, d), what MambaInnerFn keeps)."""
        p = dict(zip(self.names, params, strict=True))
        x, z = xz.split(self.inner, dim=-1)
        u = causal_conv(x, p["conv1d.weight"], p.get("conv1d.bias"))
        x_dbl = F.linear(u, p["x_proj.weight"])
        dt, b, c = x_dbl.split((self.rank, self.state, self.state), dim=-1)
        if "dt_norm" in p:
            dt, b, c = _rms(dt, p["dt_norm"]), _rms(b, p["b_norm"]), _rms(c, p["c_norm"])
        else:
            b, c = b.contiguous(), c.contiguous()  # MambaInnerFn's rearranged copies
        delta = F.softplus((dt @ p["dt_proj.weight"].t()).float() + p["dt_proj.bias"].float())  # (B, S, I)
        a = -p["A_log"].float().exp()  # (I, N)
        if counting():  # transformers' loop, as FlopCounterMode counts it
            h = torch.zeros(u.shape[0], self.inner, self.state, device=u.device)
            ys = _steps(u, delta, a, b, c, h)[0]
        else:
            ys = SelectiveScan.apply(u, delta, a, b, c)
        y = ys + u * p["D"].to(u.dtype)
        out = F.linear(y * F.silu(z), p["out_proj.weight"], p.get("out_proj.bias"))
        return out, (x_dbl, b, c, y)

    def forward(self, x: torch.Tensor, rope=None, dropout: float = 0.0) -> torch.Tensor:
        params = [p for n, p in self.named_parameters() if n in self.names]
        return recomputed(self._inner, self.in_proj(x), *params)
