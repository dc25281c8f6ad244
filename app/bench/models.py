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
from app.bench.deltanet import GatedDeltaNetMixer
from app.bench.flash import BlockwiseAttention, eager_attention
from app.bench.mamba1 import Mamba1Mixer
from app.bench.mamba2 import Mamba2Mixer


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


def _norm(cfg: TransformerConfig, width: int | None = None) -> nn.Module:
    width = width or cfg.d_model
    if cfg.norm == "rmsnorm":
        return RMSNorm(width)
    if cfg.norm == "layernorm_no_affine":
        return nn.LayerNorm(width, elementwise_affine=False)
    return nn.LayerNorm(width, bias=cfg.bias)


def rope_tables(seq_len: int, head_dim: int, device: torch.device,
                start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, (seq_len, head_dim), for rotate-half RoPE with base 10000, at positions
    start .. start + seq_len - 1."""
    inv = 1.0 / 10000 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    positions = torch.arange(start, start + seq_len, device=device, dtype=torch.float32)
    angles = torch.outer(positions, inv)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def blocks(projection: nn.Module, x: torch.Tensor, widths: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """A fused projection's output cut into its column blocks (q, k, v or gate, up). A LoRA-adapted
    one (app/bench/lora.Adapted) returns its blocks itself, each with its own autograd history,
    as peft's separate q_proj, k_proj and v_proj would."""
    y = projection(x)
    return y if isinstance(y, tuple) else y.split(widths, dim=-1)


class Attention(nn.Module):
    """Multi-head, grouped-query or multi-query attention with one fused QKV projection."""

    def __init__(self, cfg: TransformerConfig, chunk: int | None = None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = cfg.n_heads, cfg.kv_heads, cfg.hd
        # gpt-oss's sinks: one logit per query head in each row's softmax; Llama 4's local layers
        # attend within aligned chunks of `chunk` tokens.
        self.sinks = nn.Parameter(torch.zeros(cfg.n_heads)) if cfg.attention_sinks else None
        self.chunk = chunk
        self.q_width, self.kv_width = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
        # Qwen3-Next's gated attention: a second q-wide block of the projection gates the output.
        self.gate_width = self.q_width if cfg.attn_output_gate else 0
        self.qkv = nn.Linear(cfg.d_model, self.q_width + 2 * self.kv_width + self.gate_width,
                             bias=cfg.has_qkv_bias)
        self.out = nn.Linear(self.q_width, cfg.d_model, bias=cfg.has_attn_bias)
        # q/k norms: one head_dim-wide weight shared by all heads (Qwen3, Gemma 3), or one over
        # the whole projection (OLMo 2).
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm == "head":
            self.q_norm, self.k_norm = _norm(cfg, cfg.hd), _norm(cfg, cfg.hd)
        elif cfg.qk_norm == "projection":
            self.q_norm, self.k_norm = _norm(cfg, self.q_width), _norm(cfg, self.kv_width)

    def project(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None):
        """q (B, heads, s, hd), k and v (B, kv_heads, s, hd), positions applied."""
        q, k, v, _ = self._project(x, rope)
        return q, k, v

    def _project(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None):
        """q, k and v as project() gives them, and the output gate's block (None without one)."""
        b, s, _ = x.shape
        # The gate sits beside q (q_proj's second half in Qwen3-Next), so an adapter on q wraps both.
        q, k, v = blocks(self.qkv, x, (self.q_width + self.gate_width, self.kv_width, self.kv_width))
        q, *gate = q.split((self.q_width, self.gate_width), dim=-1) if self.gate_width else (q,)
        # A fused q/k-norm kernel reads q and k alone: copies, so the norms do not keep the
        # whole projection (v included) alive.
        if self.qk_norm == "projection":
            q, k = self.q_norm(q.contiguous()), self.k_norm(k.contiguous())
        elif self.qk_norm == "head":
            q = self.q_norm(q.reshape(b, s, self.heads, self.hd).contiguous()).flatten(2)
            k = self.k_norm(k.reshape(b, s, self.kv_heads, self.hd).contiguous()).flatten(2)
        q = q.view(b, s, self.heads, self.hd).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = v.reshape(b, s, self.kv_heads, self.hd).transpose(1, 2)
        if rope is not None:
            # Rotated q and k are new tensors; a view v would keep the whole projection alive.
            q, k, v = _rotate(q, *rope), _rotate(k, *rope), v.contiguous()
        return q, k, v, (gate[0] if gate else None)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                dropout: float) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v, gate = self._project(x, rope)
        z = _attend(q, k, v, dropout, self.sinks, self.chunk)
        z = z.transpose(1, 2).reshape(b, s, self.q_width)
        if gate is not None:  # sigmoid(gate) * z: autograd keeps both operands, q wide each
            z = z * torch.sigmoid(gate)
        return self.out(z)


class Mlp(nn.Module):
    """x -> act(x W_up) W_down, or act(x W_gate) * (x W_up) W_down with gate and up fused in
    one projection, so autocast casts the input once."""

    def __init__(self, cfg: TransformerConfig, width: int, bias: bool) -> None:
        super().__init__()
        self.gated, self.width = cfg.gated, width
        self.act = {"swiglu": F.silu, "relu2": lambda x: F.relu(x).square()}.get(cfg.mlp, F.gelu)
        self.up = nn.Linear(cfg.d_model, (2 if self.gated else 1) * width, bias=bias)
        self.down = nn.Linear(width, cfg.d_model, bias=bias)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, up = blocks(self.up, y, (self.width, self.width))
            if torch.is_grad_enabled():
                return self.down(self.act(gate) * up)
            # Serving (vLLM's SiluAndMul): act(gate) * up written over act(gate), no second temporary.
            return self.down(self.act(gate).mul_(up))
        return self.down(self.act(self.up(y)))


class Experts(nn.Module):
    """A mixture-of-experts MLP as efficient training code runs it (Megatron-LM's token
    permutation and SequentialMLP): a bias-free router scores every token, softmax over the
    experts in fp32 and the top_k probabilities renormalised (transformers' Mixtral and
    Qwen3-MoE); each token's top_k copies are sorted by expert, each expert runs once on its
    contiguous slice (no expert computes a token not routed to it), and the outputs return
    to their tokens weighted by their probabilities. Shared experts, one MLP of width
    d_ff_shared (gated by sigmoid(x w) for Qwen2-MoE), see every token."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.k, self.n = cfg.top_k, cfg.n_experts
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=cfg.router_bias)  # gpt-oss biases both
        self.experts = nn.ModuleList(Mlp(cfg, cfg.ff_expert, bias=cfg.expert_bias) for _ in range(cfg.n_experts))
        self.shared = Mlp(cfg, cfg.ff_shared, bias=False) if cfg.ff_shared else None
        self.shared_gate = nn.Linear(cfg.d_model, 1, bias=False) if cfg.shared_expert_gate else None

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        shape = y.shape
        x = y.reshape(-1, shape[-1])  # (T, d)
        device = x.device.type
        if torch.is_autocast_enabled(device):  # one 16-bit copy for the router, experts and shared
            x = x.to(torch.get_autocast_dtype(device))
        probs = F.softmax(self.router(x).float(), dim=-1)  # (T, n_experts), kept for backward
        top, chosen = probs.topk(self.k, dim=-1)  # (T, k)
        weights = (top / top.sum(-1, keepdim=True)).to(x.dtype)
        order = chosen.flatten().argsort(stable=True)  # the T*k copies, sorted by expert
        sizes = chosen.flatten().bincount(minlength=self.n).tolist()
        copies = x.repeat_interleave(self.k, dim=0)[order]  # (T*k, d)
        parts = copies.split(sizes)
        outs = torch.cat([expert(part) for expert, part in zip(self.experts, parts, strict=True)])
        outs = outs.new_zeros(outs.shape).index_put((order,), outs)  # back in token order
        out = (outs.view(-1, self.k, shape[-1]) * weights.unsqueeze(-1)).sum(1)
        if self.shared is not None:
            shared = self.shared(x)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(x)) * shared
            out = out + shared
        return out.view(shape)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float,
            sinks: torch.Tensor | None = None, chunk: int | None = None) -> torch.Tensor:
    """Causal attention, (B, H, S, Dv), grouped queries reading their key/value head: SDPA's, or
    where its kernels cannot (sink logits, chunks, values narrower than queries on CPU's flash
    path) the same saved tensors by hand (app/bench/flash.py). With the math backend chosen (as
    FlopCounterMode needs) both spell it out as matmuls over every (query, key) pair."""
    special = sinks is not None or chunk is not None
    narrow = q.shape[-1] != v.shape[-1] and q.device.type == "cpu"
    if torch.backends.cuda.flash_sdp_enabled() and not dropout and (special or narrow):
        return BlockwiseAttention.apply(q, k, v, sinks, chunk)
    if special:
        return eager_attention(q, k, v, sinks, chunk, dropout)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1],
                                          dropout_p=dropout)


class LatentAttention(nn.Module):
    """DeepSeek-V2/V3's multi-head latent attention, with the down projections fused as vLLM
    fuses them: x to the query latent, the key/value latent and the one rotary key all heads
    share (without a query latent, x to the queries directly); a norm on each latent; up
    projections to per-head q (nope + rope), k (nope) and v; rotary positions on the rope
    parts, the rotary key copied to every head."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.heads, self.nope, self.rope, self.vd = (cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim,
                                                     cfg.v_head_dim)
        self.q_latent, self.kv_latent = cfg.q_lora_rank, cfg.kv_lora_rank
        q_out = cfg.q_lora_rank or cfg.n_heads * (self.nope + self.rope)
        bias, kv_width = cfg.has_attn_bias, self.kv_latent + self.rope
        # DeepSeek biases the query latent's projection, never the direct query projection.
        self.down = nn.Linear(cfg.d_model, q_out + kv_width, bias=bias and bool(self.q_latent))
        self.kv_bias = nn.Parameter(torch.zeros(kv_width)) if bias and not self.q_latent else None
        if self.q_latent:
            self.q_norm = _norm(cfg, self.q_latent)
            self.q_up = nn.Linear(self.q_latent, cfg.n_heads * (self.nope + self.rope), bias=False)
        self.kv_norm = _norm(cfg, self.kv_latent)
        self.kv_up = nn.Linear(self.kv_latent, cfg.n_heads * (self.nope + self.vd), bias=False)
        self.out = nn.Linear(cfg.n_heads * self.vd, cfg.d_model, bias=bias)

    def project(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
        """q (B, heads, s, nope + rope), its rope part rotated, and what a latent cache keeps:
        the normed key/value latent (B, s, kv_lora_rank) and the rotated key (B, s, rope)."""
        b, s, _ = x.shape
        h, nope, r = self.heads, self.nope, self.rope
        latent = self.down(x)
        if self.q_latent:
            q_latent, kv_latent, k_rope = latent.split((self.q_latent, self.kv_latent, r), dim=-1)
            q = self.q_up(self.q_norm(q_latent))
        else:
            q, kv = latent.split((h * (nope + r), self.kv_latent + r), dim=-1)
            # A tensor of its own, so the norm keeps the key/value latent alive, not the queries.
            kv = kv.contiguous() if self.kv_bias is None else kv + self.kv_bias.to(kv.dtype)
            kv_latent, k_rope = kv.split((self.kv_latent, r), dim=-1)
        kv_latent = self.kv_norm(kv_latent)
        q_nope, q_rope = q.view(b, s, h, nope + r).transpose(1, 2).split((nope, r), dim=-1)
        return torch.cat((q_nope, _rotate(q_rope, *rope)), dim=-1), kv_latent, _rotate(k_rope, *rope)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                dropout: float) -> torch.Tensor:
        return self.decompressed(*self.project(x, rope), dropout)

    def decompressed(self, q: torch.Tensor, kv_latent: torch.Tensor, k_rope: torch.Tensor,
                     dropout: float) -> torch.Tensor:
        """Causal attention with keys and values decompressed from the latent, per head."""
        b, s, _ = kv_latent.shape
        h, nope, r = self.heads, self.nope, self.rope
        kv = self.kv_up(kv_latent)
        k_nope, v = kv.view(b, s, h, nope + self.vd).transpose(1, 2).split((nope, self.vd), dim=-1)
        k = torch.cat((k_nope, k_rope.unsqueeze(1).expand(b, h, s, r)), dim=-1)
        z = _attend(q, k, v.contiguous(), dropout)
        return self.out(z.transpose(1, 2).reshape(b, s, h * self.vd))


class Beside(nn.Module):
    """Attention and a Mamba-2 mixer reading the same norm's output, their outputs summed (Falcon-H1;
    its scalar multipliers left out, as the calculators leave them)."""

    def __init__(self, cfg: TransformerConfig, chunk: int | None) -> None:
        super().__init__()
        self.attention, self.ssm = Attention(cfg, chunk), Mamba2Mixer(cfg)

    def forward(self, y: torch.Tensor, rope, dropout: float) -> torch.Tensor:
        return self.attention(y, rope, dropout) + self.ssm(y)


def _mixer(cfg: TransformerConfig, kind: str, chunk: int | None) -> nn.Module | None:
    """A layer's token mixer by its layer_mixers name; None for "none" (Nemotron-H's MLP layers)."""
    if kind == "mamba2":
        return Mamba2Mixer(cfg)
    if kind == "mamba":
        return Mamba1Mixer(cfg)
    if kind == "gated_delta_net":
        return GatedDeltaNetMixer(cfg)
    if kind == "attention_mamba2":
        return Beside(cfg, chunk)
    if kind == "none":
        return None
    return LatentAttention(cfg) if cfg.mla else Attention(cfg, chunk)


class Block(nn.Module):
    """One layer in its norm layout: pre (norm, sublayer, add), post (sublayer, norm, add),
    sandwich (norm, sublayer, norm, add), parallel (attention and MLP both read the residual,
    each through its norm) or parallel_shared (through one norm). In the pre layout a layer may
    lack its mixer or its MLP (Nemotron-H), and its norm with it."""

    def __init__(self, cfg: TransformerConfig, moe: bool = False, chunk: int | None = None,
                 mixer: str = "attention", has_mlp: bool = True) -> None:
        super().__init__()
        self.layout = cfg.norm_layout
        self.attn = _mixer(cfg, mixer, chunk)
        self.mlp = (Experts(cfg) if moe else Mlp(cfg, cfg.ff, cfg.has_mlp_bias)) if has_mlp else None
        if (self.attn is None or self.mlp is None) and self.layout != "pre":
            raise ValueError(f"a layer without its mixer or MLP is built in the pre layout only, not "
                             f"{self.layout}")
        self.norm1 = _norm(cfg) if self.attn is not None else None
        if self.layout != "parallel_shared" and self.mlp is not None:
            self.norm2 = _norm(cfg)
        if self.layout == "sandwich":
            self.post1, self.post2 = _norm(cfg), _norm(cfg)
        self.dropout = 0.1 if cfg.dropout else 0.0

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                attend=None, mlp=None) -> torch.Tensor:
        """`attend` and `mlp` (sublayer input -> output) stand in for self.attn and self.mlp: the
        generate probe's cached attention and served experts (app/bench/decode.py) go through
        the same layout."""
        p = self.dropout if self.training else 0.0
        attn = attend or (lambda y: self.attn(y, rope, p))
        mlp = mlp or self.mlp
        if self.layout in ("parallel", "parallel_shared"):
            a_in = self.norm1(x)
            m_in = a_in if self.layout == "parallel_shared" else self.norm2(x)
            return x + F.dropout(attn(a_in), p) + F.dropout(mlp(m_in), p)
        if self.layout == "post":
            x = x + F.dropout(self.norm1(attn(x)), p)
            return x + F.dropout(self.norm2(mlp(x)), p)
        if self.layout == "sandwich":
            x = x + F.dropout(self.post1(attn(self.norm1(x))), p)
            return x + F.dropout(self.post2(mlp(self.norm2(x))), p)
        if self.attn is not None:
            x = x + F.dropout(attn(self.norm1(x)), p)
        return x if self.mlp is None else x + F.dropout(mlp(self.norm2(x)), p)


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
        # Llama 4's rope and NoPE layers differ in their chunks; rope itself has no weights or
        # matmuls, and every layer here is rotated.
        free = set(cfg.mlp_free_layers)
        self.blocks = nn.ModuleList(
            Block(cfg, moe, cfg.attention_chunk_size if chunked else None, mixer, i not in free)
            for i, (moe, chunked, mixer) in enumerate(zip(cfg.moe_layers, cfg.chunked_layers, cfg.mixers,
                                                          strict=True)))
        self.norm = _norm(cfg)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.head.weight = self.tok.weight
        self.dropout = 0.1 if cfg.dropout else 0.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        x = self.tok(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(s, device=ids.device))
        # Latent attention rotates its rope part whatever the position embedding.
        rope = None
        if self.cfg.mla or self.pos is None:
            rope = rope_tables(s, self.cfg.qk_rope_head_dim if self.cfg.mla else self.cfg.hd, ids.device)
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x, rope)
        return self.head(self.norm(x))
