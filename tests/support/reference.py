"""A plain PyTorch decoder-only transformer, the oracle for parameter counts
(sum of p.numel()) and FLOPs (FlopCounterMode). Written from the architecture,
not from Tally's formulas: attention is spelled out as q @ k^T and softmax @ v.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, *, d, heads, kv_heads, head_dim, d_ff, mlp, norm, bias, qkv_bias):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        make_norm = (lambda: nn.LayerNorm(d, bias=bias)) if norm == "layernorm" else (lambda: nn.RMSNorm(d))
        self.norm1, self.norm2 = make_norm(), make_norm()
        self.q = nn.Linear(d, heads * head_dim, bias=qkv_bias)
        self.k = nn.Linear(d, kv_heads * head_dim, bias=qkv_bias)
        self.v = nn.Linear(d, kv_heads * head_dim, bias=qkv_bias)
        self.o = nn.Linear(heads * head_dim, d, bias=bias)
        self.gated = mlp == "swiglu"
        if self.gated:
            self.gate = nn.Linear(d, d_ff, bias=bias)
        self.up = nn.Linear(d, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d, bias=bias)

    def forward(self, x):
        B, S, _ = x.shape
        y = self.norm1(x)
        q = self.q(y).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(y).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(y).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        mask = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        attn = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        z = (attn @ v).transpose(1, 2).reshape(B, S, self.heads * self.head_dim)
        x = x + self.o(z)
        y = self.norm2(x)
        hidden = F.silu(self.gate(y)) * self.up(y) if self.gated else F.gelu(self.up(y))
        return x + self.down(hidden)


class LM(nn.Module):
    def __init__(self, *, vocab, d, layers, heads, kv_heads=None, head_dim=None, d_ff=None,
                 mlp="gelu", norm="layernorm", bias=True, qkv_bias=None, tied=True,
                 position="learned", max_seq_len=1024):
        super().__init__()
        kv_heads = kv_heads or heads
        head_dim = head_dim or d // heads
        d_ff = d_ff or 4 * d
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_seq_len, d) if position == "learned" else None
        self.blocks = nn.ModuleList(
            Block(d=d, heads=heads, kv_heads=kv_heads, head_dim=head_dim, d_ff=d_ff, mlp=mlp,
                  norm=norm, bias=bias, qkv_bias=bias if qkv_bias is None else qkv_bias)
            for _ in range(layers))
        self.norm = nn.LayerNorm(d, bias=bias) if norm == "layernorm" else nn.RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tied:
            self.head.weight = self.tok.weight

    def forward(self, ids):
        x = self.tok(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_from_config(cfg: dict, device="meta") -> LM:
    """Build the reference model from a Tally TransformerConfig as JSON. Its biases follow
    `bias` (and `qkv_bias`); separate attention and MLP switches are checked against
    transformers instead (tests/oracles/test_hf_import.py), so a config that splits them is refused here."""
    for key in ("attn_bias", "mlp_bias"):
        if cfg.get(key) not in (None, cfg.get("bias", True)):
            raise ValueError(f"the reference model has one bias switch; {key} differs from bias")
    with torch.device(device):
        return LM(vocab=cfg["vocab_size"], d=cfg["d_model"], layers=cfg["n_layers"],
                  heads=cfg["n_heads"], kv_heads=cfg.get("n_kv_heads"), head_dim=cfg.get("head_dim"),
                  d_ff=cfg.get("d_ff"), mlp=cfg.get("mlp", "gelu"), norm=cfg.get("norm", "layernorm"),
                  bias=cfg.get("bias", True), qkv_bias=cfg.get("qkv_bias"),
                  tied=cfg.get("tied_embeddings", True), position=cfg.get("position", "learned"),
                  max_seq_len=cfg.get("max_seq_len", 1024))


def n_params(model: nn.Module) -> int:
    """Distinct parameters; a tied weight is one Parameter and counts once."""
    return sum(p.numel() for p in model.parameters())
