"""The models train_step trains: the course's Cruncher, and a transformer built from
any TransformerConfig the calculators accept.

The transformer is written the way efficient training code is, because that is
what the calculators' activation model assumes: one fused QKV projection (and one
gate+up projection for SwiGLU), so autocast casts each input once; attention through
scaled_dot_product_attention with enable_gqa, which keeps K and V at n_kv_heads width
and never stores the s x s scores; the residual stream in the parameters' dtype.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from app.accounting.models import TransformerConfig


class Linear(nn.Module):
    """The course's bias-free linear layer: W ~ N(0, 1/d_in), y = x @ W."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_in, d_out) / math.sqrt(d_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class Cruncher(nn.Module):
    """num_layers (dim x dim) layers, then a dim -> 1 head: (B, T, D) -> (B, T)."""

    def __init__(self, dim: int, num_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Linear(dim, dim) for _ in range(num_layers))
        self.final = Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.final(x).squeeze(-1)


class _RMSNormFn(torch.autograd.Function):
    """y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps), keeping only x and rstd for
    backward, as fused kernels do (PyTorch's composite RMSNorm also keeps x * rstd)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        rstd = torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        normed = x * rstd
        grad_weight = (grad * normed).sum(dim=tuple(range(grad.dim() - 1)))
        g = grad * weight
        # d/dx of x * rstd: rstd * (g - normed * mean(g * normed))
        grad_x = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFn.apply(x, self.weight, self.eps)


def _norm(cfg: TransformerConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.d_model)
    return nn.LayerNorm(cfg.d_model, bias=cfg.bias)


def rope_tables(seq_len: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, (seq_len, head_dim), for rotate-half RoPE with base 10000."""
    inv = 1.0 / 10000 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = cfg.n_heads, cfg.kv_heads, cfg.hd
        self.q_width, self.kv_width = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
        self.norm1, self.norm2 = _norm(cfg), _norm(cfg)
        self.qkv = nn.Linear(cfg.d_model, self.q_width + 2 * self.kv_width, bias=cfg.has_qkv_bias)
        self.out = nn.Linear(self.q_width, cfg.d_model, bias=cfg.has_attn_bias)
        self.gated = cfg.mlp == "swiglu"
        self.ff = cfg.ff
        self.up = nn.Linear(cfg.d_model, (2 if self.gated else 1) * cfg.ff, bias=cfg.has_mlp_bias)
        self.down = nn.Linear(cfg.ff, cfg.d_model, bias=cfg.has_mlp_bias)
        self.dropout = 0.1 if cfg.dropout else 0.0

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split((self.q_width, self.kv_width, self.kv_width), dim=-1)
        q = q.view(b, s, self.heads, self.hd).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = v.reshape(b, s, self.kv_heads, self.hd).transpose(1, 2)
        if rope is not None:
            # Rotated q and k are new tensors; a view v would keep the whole projection alive.
            q, k, v = _rotate(q, *rope), _rotate(k, *rope), v.contiguous()
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads,
                                           dropout_p=self.dropout if self.training else 0.0)
        z = z.transpose(1, 2).reshape(b, s, self.q_width)
        x = x + F.dropout(self.out(z), self.dropout, self.training)
        y = self.up(self.norm2(x))
        if self.gated:
            gate, up = y.split(self.ff, dim=-1)
            y = F.silu(gate) * up
        else:
            y = F.gelu(y)
        return x + F.dropout(self.down(y), self.dropout, self.training)


class Transformer(nn.Module):
    """ids (B, S) -> logits (B, S, vocab)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.position == "learned" else None
        for table in (self.tok, self.pos):
            if table is not None:  # GPT-2's 0.02, so the first loss is near ln(vocab)
                nn.init.normal_(table.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = _norm(cfg)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.head.weight = self.tok.weight
        self.dropout = 0.1 if cfg.dropout else 0.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        x = self.tok(ids)
        rope = None
        if self.pos is not None:
            x = x + self.pos(torch.arange(s, device=ids.device))
        else:
            rope = rope_tables(s, self.cfg.hd, ids.device)
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x, rope)
        return self.head(self.norm(x))
