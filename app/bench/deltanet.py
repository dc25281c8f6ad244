"""Gated DeltaNet (Qwen3-Next's linear-attention layers) as the probe trains it: the layout of
transformers' Qwen3NextGatedDeltaNet, run as it runs with fla's kernels: causal_conv1d_fn keeps
the convolution's input and recomputes it, and fla's chunk_gated_delta_rule (use_qk_l2norm_in_kernel,
fla/ops/gated_delta_rule/chunk.py at bc3b101) keeps its q, k (normed) and v, the decay, beta and
the WY matrix A, recomputing the chunk states in backward. Here the chunked rule is transformers'
torch_chunk_gated_delta_rule, its inputs kept and the rest recomputed a sequence at a time
(app/bench/recompute.py); app/accounting/blocks/deltanet.py predicts those items.

Shapes, Hk key heads of dk, Hv value heads of dv (kd = Hk dk, vd = Hv dv): x (B, S, d) ->
in_proj_qkvz (B, S, 2 kd + 2 vd) in Qwen3-Next's per-key-head order, in_proj_ba (B, S, 2 Hv);
q, k, v concatenated (cd = 2 kd + vd) through the depthwise causal convolution and silu; beta =
sigmoid(b), the decay g = -exp(A_log) softplus(a + dt_bias); the chunked rule over chunks of 64
tokens -> o (B, S, Hv, dv); the gated norm w * rmsnorm(o) * silu(z) per head; out_proj (d, vd).
"""

import torch
import torch.nn.functional as F
from torch import nn

from app.accounting.models import TransformerConfig
from app.bench.recompute import GatedNorm, causal_conv, recomputed

CHUNK = 64  # torch_chunk_gated_delta_rule's and fla's chunk_size


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def chunk_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor):
    """transformers' torch_chunk_gated_delta_rule from a zero state, q and k l2-normed: q, k (B, S, Hk,
    dk), v (B, S, Hv, dv), g and beta (B, S, Hv) -> (o (B, S, Hv, dv) in v's dtype, the UT system
    (B, Hv, chunks, C, C), float32)."""
    dtype, s = v.dtype, v.shape[1]
    per = v.shape[2] // k.shape[2]
    q, k = q.repeat_interleave(per, dim=2), k.repeat_interleave(per, dim=2)
    q, k, v, beta, g = (x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
                        for x in (q, k, v, beta, g))
    q, k = _l2norm(q), _l2norm(k)
    q = q * q.shape[-1] ** -0.5
    pad = (CHUNK - s % CHUNK) % CHUNK
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    beta, g = (F.pad(x, (0, pad)) for x in (beta, g))
    v_beta, k_beta = v * beta[..., None], k * beta[..., None]
    q, k, k_beta, v_beta = (x.unflatten(2, (-1, CHUNK)) for x in (q, k, k_beta, v_beta))
    g = g.unflatten(2, (-1, CHUNK)).cumsum(-1)  # (B, H, n, C)
    upper = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).triu(1)
    pairwise = (g[..., :, None] - g[..., None, :]).masked_fill(upper, float("-inf")).exp()
    ut = (k_beta @ k.transpose(-1, -2)) * pairwise
    intra = (q @ k.transpose(-1, -2)) * pairwise
    new_values = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
    k_cumdecay = torch.linalg.solve_triangular(ut, k_beta * g.exp()[..., None], upper=False,
                                               unitriangular=True)
    state = new_values.new_zeros(*new_values.shape[:2], k.shape[-1], v.shape[-1])
    q, k = q * g.exp()[..., None], k * (g[..., -1:] - g).exp()[..., None]
    chunk_decay = g[..., -1].exp()[..., None, None]
    out = []
    for i in range(q.shape[2]):
        v_new = new_values[:, :, i] - k_cumdecay[:, :, i] @ state
        out.append(q[:, :, i] @ state + intra[:, :, i] @ v_new)
        state = state * chunk_decay[:, :, i] + k[:, :, i].transpose(-1, -2) @ v_new
    o = torch.stack(out, dim=2).flatten(2, 3)[:, :, :s]
    return o.transpose(1, 2).to(dtype, memory_format=torch.contiguous_format), ut


class GatedDeltaNetMixer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.hk, self.hv = cfg.linear_key_heads, cfg.linear_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.kd, self.vd = self.hk * self.dk, self.hv * self.dv
        self.channels = 2 * self.kd + self.vd
        self.in_proj_qkvz = nn.Linear(cfg.d_model, 2 * self.kd + 2 * self.vd, bias=False)
        self.in_proj_ba = nn.Linear(cfg.d_model, 2 * self.hv, bias=False)
        kernel = cfg.linear_conv_kernel
        self.conv1d = nn.Conv1d(self.channels, self.channels, kernel, groups=self.channels,
                                padding=kernel - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.hv).uniform_(1, 16)))
        self.norm = nn.Parameter(torch.ones(self.dv))
        self.out_proj = nn.Linear(self.vd, cfg.d_model, bias=False)

    def _split(self, qkvz: torch.Tensor, ba: torch.Tensor):
        """Qwen3-Next's order: per key head, its q, k, then its value heads' v and z; b then a."""
        b_, s, _ = qkvz.shape
        per = self.hv // self.hk
        q, k, v, z = qkvz.view(b_, s, self.hk, -1).split((self.dk, self.dk, per * self.dv, per * self.dv), -1)
        b, a = ba.view(b_, s, self.hk, -1).split((per, per), -1)
        return (q.reshape(b_, s, self.kd), k.reshape(b_, s, self.kd), v.reshape(b_, s, self.vd),
                z.reshape(b_, s, self.hv, self.dv), b.reshape(b_, s, self.hv), a.reshape(b_, s, self.hv))

    def _rule(self, conv_out: torch.Tensor, g: torch.Tensor, beta: torch.Tensor):
        b_, s, _ = conv_out.shape
        q, k, v = conv_out.split((self.kd, self.kd, self.vd), dim=-1)
        o, ut = chunk_rule(q.reshape(b_, s, self.hk, self.dk), k.reshape(b_, s, self.hk, self.dk),
                           v.reshape(b_, s, self.hv, self.dv), g, beta)
        # fla keeps A, the solved (I + A)^-1, (B, S, Hv, 64) in k's dtype: the UT system's size.
        return o, (ut.to(conv_out.dtype),)

    def forward(self, x: torch.Tensor, rope=None, dropout: float = 0.0) -> torch.Tensor:
        q, k, v, z, b, a = self._split(self.in_proj_qkvz(x), self.in_proj_ba(x))
        conv_out = recomputed(causal_conv, torch.cat((q, k, v), dim=-1), self.conv1d.weight)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        o = recomputed(self._rule, conv_out, g, beta, batched=3)
        return self.out_proj(GatedNorm.apply(o, z, self.norm, 1, 1e-6, False).flatten(-2))
