"""Mamba-2's mixer (Bamba, Nemotron-H, Falcon-H1) as the probe trains it: the layout of
transformers' BambaMixer, the convolution and chunked scan recomputed in backward as mamba_ssm's
fused training kernel does (app/bench/recompute.py), so the layer keeps what
app/accounting/blocks/mamba.py predicts: the projection's output and the gated norm's input and
output.

Shapes: x (B, S, d) -> in_proj -> (B, S, I + C + H): the gate z (I), the convolution's input xBC
(C = I + 2 G N) and dt (H); the depthwise causal convolution (width K) and silu over xBC, split
into x (H heads of P), B and C (G groups of N); the SSD scan in chunks of Q tokens (Dao and Gu
2024, arXiv:2405.21060, section 6; transformers' mamba2_chunk_scan, the sequence zero-padded to
whole chunks) with its five einsums, in float32; y + D x; the gated norm; out_proj (d, I).
"""

import torch
import torch.nn.functional as F
from torch import nn

from app.accounting.models import TransformerConfig
from app.bench.recompute import GatedNorm, causal_conv, recomputed


def _segment_sum(x: torch.Tensor) -> torch.Tensor:
    """(..., T) -> (..., T, T): entry [i, j] = x[j+1] + ... + x[i] for j <= i, -inf above."""
    t = x.shape[-1]
    x = x[..., None].expand(*x.shape, t)
    x = x.masked_fill(~torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device), -1), 0)
    sums = x.cumsum(-2)
    return sums.masked_fill(~torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device)), -torch.inf)


def chunk_scan(x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
               chunk: int) -> torch.Tensor:
    """The SSD scan from a zero state: x (B, S, H, P), dt (B, S, H) (positive), a (H,) (negative),
    b and c (B, S, H, N), all float32 -> y (B, S, H, P) without D's skip."""
    s = x.shape[1]
    pad = (chunk - s % chunk) % chunk

    def chunks(t: torch.Tensor) -> torch.Tensor:  # (B, S, ...) -> (B, c, Q, ...)
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        return t.unflatten(1, (-1, chunk))

    x, a, b, c = chunks(x * dt[..., None]), chunks(a * dt), chunks(b), chunks(c)
    a = a.permute(0, 3, 1, 2)  # (B, H, c, Q)
    a_cum = a.cumsum(-1)
    # Within each chunk: scores C B^T, masked by the decays, against x.
    scores = torch.einsum("bclhn,bcshn->bclsh", c, b) * _segment_sum(a).exp().permute(0, 2, 3, 4, 1)
    y = torch.einsum("bclsh,bcshp->bclhp", scores, x)
    # Each chunk's final state, then the states passed from chunk to chunk.
    decay = (a_cum[..., -1:] - a_cum).exp()
    states = torch.einsum("bclhn,bclhp->bchpn", b * decay.permute(0, 2, 3, 1)[..., None], x)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    passing = _segment_sum(F.pad(a_cum[..., -1], (1, 0))).exp().transpose(1, 3)
    states = torch.einsum("bzch,bzhpn->bchpn", passing, states)[:, :-1]
    # Each position reads its chunk's starting state.
    y = y + torch.einsum("bclhn,bchpn->bclhp", c, states) * a_cum.exp().permute(0, 2, 3, 1)[..., None]
    return y.flatten(1, 2)[:, :s]


class Mamba2Mixer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.heads, self.head_dim = cfg.ssm_heads, cfg.ssm_head_dim
        self.groups, self.state, self.chunk = cfg.ssm_groups, cfg.ssm_state_size, cfg.ssm_chunk_size
        self.inner = self.heads * self.head_dim
        self.channels = self.inner + 2 * self.groups * self.state
        self.in_proj = nn.Linear(cfg.d_model, self.inner + self.channels + self.heads, bias=cfg.ssm_proj_bias)
        kernel = cfg.ssm_conv_kernel
        self.conv1d = nn.Conv1d(self.channels, self.channels, kernel, groups=self.channels,
                                padding=kernel - 1, bias=cfg.ssm_conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(self.heads))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, self.heads + 1, dtype=torch.float32)))
        self.D = nn.Parameter(torch.ones(self.heads))
        self.norm = nn.Parameter(torch.ones(self.inner)) if cfg.ssm_norm else None
        out_bias = cfg.ssm_proj_bias if cfg.ssm_out_bias is None else cfg.ssm_out_bias
        self.out_proj = nn.Linear(self.inner, cfg.d_model, bias=out_bias)

    def _scan(self, projected: torch.Tensor, weight: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        """(B, S, I + C + H) -> y (B, S, I) in the projection's dtype: convolution, silu, scan, skip."""
        bias, dt_bias, a_log, d = params if len(params) == 4 else (None, *params)
        _, xbc, dt = projected.split((self.inner, self.channels, self.heads), dim=-1)
        xbc = causal_conv(xbc, weight, bias)
        x, b, c = xbc.float().split((self.inner, self.groups * self.state, self.groups * self.state), dim=-1)
        x = x.unflatten(-1, (self.heads, self.head_dim))
        per_group = self.heads // self.groups
        b, c = (t.unflatten(-1, (self.groups, self.state)).repeat_interleave(per_group, dim=2)
                for t in (b, c))
        dt = F.softplus(dt.float() + dt_bias.float())
        y = chunk_scan(x, dt, -a_log.float().exp(), b, c, self.chunk) + d.float()[:, None] * x
        return y.flatten(-2).to(projected.dtype)

    def forward(self, x: torch.Tensor, rope=None, dropout: float = 0.0) -> torch.Tensor:
        projected = self.in_proj(x)
        params = [self.conv1d.weight] + ([self.conv1d.bias] if self.conv1d.bias is not None else [])
        y = recomputed(self._scan, projected, *params, self.dt_bias, self.A_log, self.D)
        z = projected[..., :self.inner]
        return self.out_proj(GatedNorm.apply(y, z, self.norm, self.groups, 1e-6))
