"""Generation with a key/value cache, for the generate probe: the probe's Transformer
(app/bench/models.py) prefills a prompt into a preallocated cache, then decodes one token
per step reading it.

The cache is what app/accounting/inference/kv_cache.py counts, unpaged, to the byte:
- per layer K and V, (B, n_kv_heads, slots, head_dim) each; latent attention keeps one
  (B, slots, kv_lora_rank + qk_rope_head_dim) tensor, the normed latent beside the rotated
  rope key (vLLM's and FlashMLA's layout);
- slots = the context in a full-attention layer, min(context, sliding_window) in a windowed
  one: a ring, position p in slot p % slots, so it holds exactly the window - 1 tokens the
  next query reads back plus the one being written.

Decode reads the cache without copying it: grouped-query heads attend as rows of their
key/value head's query block, (B, n_kv_heads, group, head_dim), through SDPA; latent attention
runs absorbed (DeepSeek-V2, section 2.1.3): W_UK folds into the query and W_UV into the
output, so each head scores the latent and rope key directly and no key or value is
decompressed, the form roofline.decode_flops(mla_cache="latent") counts. Prefill attends to
the prompt's own keys and values (latent attention decompressed, as training does) and
writes them. The sampler is greedy over fp32 probabilities, as a serving sampler keeps them.
"""

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from app.accounting.transformer import TransformerConfig
from app.bench.models import Attention, Experts, LatentAttention, Transformer, rope_tables


@dataclass
class LayerCache:
    tensors: tuple[torch.Tensor, ...]
    """(K, V), each (B, n_kv_heads, slots, head_dim); or (latent,), (B, slots, kv_lora_rank + rope)."""
    window: int | None
    """The layer's sliding window in tokens; None attends to the whole sequence."""

    @property
    def slots(self) -> int:
        return self.tensors[0].shape[-2]


@dataclass
class Cache:
    layers: list[LayerCache]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for layer in self.layers for t in layer.tensors)

    def tensors(self) -> list[torch.Tensor]:
        return [t for layer in self.layers for t in layer.tensors]

    def row(self, i: int) -> "Cache":
        """Sequence i's cache, a view."""
        return Cache([LayerCache(tuple(t[i:i + 1] for t in layer.tensors), layer.window)
                      for layer in self.layers])


def allocate(cfg: TransformerConfig, *, batch: int, context: int, dtype: torch.dtype,
             device: torch.device) -> Cache:
    """Zeroed caches for `batch` sequences of up to `context` tokens."""
    layers = []
    for windowed in cfg.layers.windowed:
        window = cfg.sliding_window if windowed else None
        slots = min(context, window) if window else context
        if cfg.mla:
            shape = (batch, slots, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
            tensors: tuple[torch.Tensor, ...] = (torch.zeros(shape, dtype=dtype, device=device),)
        else:
            shape = (batch, cfg.kv_heads, slots, cfg.hd)
            tensors = (torch.zeros(shape, dtype=dtype, device=device),
                       torch.zeros(shape, dtype=dtype, device=device))
        layers.append(LayerCache(tensors, window))
    return Cache(layers)


def _write(cache: torch.Tensor, new: torch.Tensor, start: int, dim: int) -> None:
    """Positions start .. start + s - 1 of `new` (s along `dim`) into their ring slots
    (p % slots); only the last `slots` of them when more come at once."""
    slots, s = cache.shape[dim], new.shape[dim]
    keep = min(s, slots)
    new = new.narrow(dim, s - keep, keep)
    lo = (start + s - keep) % slots
    head = min(keep, slots - lo)
    cache.narrow(dim, lo, head).copy_(new.narrow(dim, 0, head))
    if head < keep:  # wrapped past the last slot
        cache.narrow(dim, 0, keep - head).copy_(new.narrow(dim, head, keep - head))


def _band(s: int, window: int, device: torch.device) -> torch.Tensor:
    """(s, s) True where query i may read key j: i - window < j <= i (s^2 bytes, nothing wider)."""
    return torch.ones(s, s, dtype=torch.bool, device=device).tril_().triu_(1 - window)


def _kv_attention(attn: Attention, layer: LayerCache, x: torch.Tensor, rope, start: int) -> torch.Tensor:
    b, s, _ = x.shape
    q, k, v = attn.project(x, rope)  # (B, h, s, hd), (B, kv_heads, s, hd) x 2
    kc, vc = layer.tensors
    _write(kc, k, start, 2)
    _write(vc, v, start, 2)
    if s == 1:  # the new token reads every slot written so far: the window holds no older one
        n = min(start + 1, layer.slots)
        group = q.reshape(b, attn.kv_heads, attn.heads // attn.kv_heads, attn.hd)
        z = F.scaled_dot_product_attention(group, kc[:, :, :n], vc[:, :, :n])  # (B, kv_heads, group, hd)
        return attn.out(z.reshape(b, 1, attn.q_width))
    assert start == 0, "a prompt is prefilled from position 0"
    gqa = attn.kv_heads != attn.heads
    if layer.window is not None and s > layer.window:
        band = _band(s, layer.window, x.device)
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=gqa)
    else:
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return attn.out(z.transpose(1, 2).reshape(b, s, attn.q_width))


def _latent_attention(attn: LatentAttention, layer: LayerCache, x: torch.Tensor, rope,
                      start: int) -> torch.Tensor:
    b, s, _ = x.shape
    h, nope, rank = attn.heads, attn.nope, attn.kv_latent
    q, latent, k_rope = attn.project(x, rope)  # (B, h, s, nope + rope), (B, s, rank), (B, s, rope)
    (cache,) = layer.tensors
    _write(cache[..., :rank], latent, start, 1)
    _write(cache[..., rank:], k_rope, start, 1)
    if s > 1:
        assert start == 0, "a prompt is prefilled from position 0"
        return attn.decompressed(q, latent, k_rope, 0.0)
    n = min(start + 1, layer.slots)
    keys = cache[:, :n]  # (B, n, rank + rope)
    w = attn.kv_up.weight.view(h, nope + attn.vd, rank)  # per head: W_UK (nope, rank) over W_UV (vd, rank)
    q_nope, q_rope = q[:, :, 0].split((nope, attn.rope), dim=-1)  # (B, h, nope), (B, h, rope)
    q_latent = (q_nope.transpose(0, 1) @ w[:, :nope]).transpose(0, 1)  # (B, h, rank): W_UK absorbed
    # (B, h, n) scores, at the decompressed form's scale 1 / sqrt(nope + rope), in fp32: the
    # scores and their softmax live at once, 8 bytes per head per cached token.
    scores = (torch.cat((q_latent, q_rope), dim=-1) @ keys.transpose(1, 2)).float()
    probs = scores.mul_((nope + attn.rope) ** -0.5).softmax(-1).to(keys.dtype)
    del scores
    z = probs @ keys[..., :rank]  # (B, h, rank)
    out = z.transpose(0, 1) @ w[:, nope:].transpose(1, 2)  # (h, B, vd): W_UV absorbed
    return attn.out(out.transpose(0, 1).reshape(b, 1, h * attn.vd))


def _attend(attn, layer: LayerCache, y: torch.Tensor, *, rope, start: int) -> torch.Tensor:
    if isinstance(attn, LatentAttention):
        return _latent_attention(attn, layer, y, rope, start)
    return _kv_attention(attn, layer, y, rope, start)


def _experts(moe: Experts, y: torch.Tensor) -> torch.Tensor:
    """A mixture-of-experts MLP laid out as vLLM's fused_moe lays it (intermediate caches 1 to 3,
    allocated up front): every routed copy's up projection in one (T*k, up width) buffer, the
    activations in one (T*k, ff), the outputs in one (T*k, d), each expert filling its sorted
    slice; then weighted into their tokens. The shared expert runs first and waits, as in
    vLLM's DeepSeek and Qwen MoE blocks. Routing as training's (Experts)."""
    shape = y.shape
    x = y.reshape(-1, shape[-1])  # (T, d)
    shared = None
    if moe.shared is not None:
        shared = moe.shared(x)
        if moe.shared_gate is not None:
            shared = torch.sigmoid(moe.shared_gate(x)) * shared
    probs = F.softmax(moe.router(x).float(), dim=-1)  # (T, n_experts)
    top, chosen = probs.topk(moe.k, dim=-1)  # (T, k)
    weights = (top / top.sum(-1, keepdim=True)).to(x.dtype).flatten()
    order = chosen.flatten().argsort(stable=True)  # the T*k copies, sorted by expert
    sizes = chosen.flatten().bincount(minlength=moe.n).tolist()
    rows = order // moe.k  # each sorted copy's token
    first = moe.experts[0]
    up = x.new_empty(rows.numel(), first.up.out_features)
    hidden = x.new_empty(rows.numel(), first.width)
    out = x.new_empty(rows.numel(), shape[-1])
    lo = 0
    for expert, size in zip(moe.experts, sizes, strict=True):
        if size:
            torch.matmul(x[rows[lo:lo + size]], expert.up.weight.t(), out=up[lo:lo + size])
        lo += size
    act_ = torch.ops.aten.silu_ if first.act is F.silu else torch.ops.aten.gelu_  # in place, as fused kernels
    if first.gated:
        gate, value = up.split(first.width, dim=-1)
        torch.mul(act_(gate), value, out=hidden)
    else:
        act_(hidden.copy_(up))
    lo = 0
    for expert, size in zip(moe.experts, sizes, strict=True):
        if size:
            torch.matmul(hidden[lo:lo + size], expert.down.weight.t(), out=out[lo:lo + size])
        lo += size
    mixed = x.new_zeros(x.shape).index_add_(0, rows, out.mul_(weights[order, None]))
    return (mixed if shared is None else mixed + shared).view(shape)


@torch.no_grad()
def forward(model: Transformer, ids: torch.Tensor, cache: Cache, start: int) -> torch.Tensor:
    """ids (B, s) at positions start .. start + s - 1, their keys and values written to the
    cache; fp32 logits (B, vocab) of the last position only (the LM head runs on no other)."""
    cfg = model.cfg
    s = ids.shape[1]
    x = model.tok(ids)
    if model.pos is not None:
        x = x + model.pos(torch.arange(start, start + s, device=ids.device))
    rope = None
    if cfg.mla or model.pos is None:
        rope = rope_tables(s, cfg.qk_rope_head_dim if cfg.mla else cfg.hd, ids.device, start)
    for block, layer in zip(model.blocks, cache.layers, strict=True):
        served = partial(_experts, block.mlp) if isinstance(block.mlp, Experts) else None
        x = block(x, rope, attend=partial(_attend, block.attn, layer, rope=rope, start=start), mlp=served)
    return model.head(model.norm(x[:, -1])).float()


def sample(logits: torch.Tensor) -> torch.Tensor:
    """Greedy: (B, vocab) fp32 logits -> the likeliest token of each sequence, (B, 1), from
    the probabilities a sampler keeps beside the logits."""
    return logits.softmax(-1).argmax(-1, keepdim=True)


def prefill(model: Transformer, prompt: torch.Tensor, cache: Cache) -> torch.Tensor:
    """The prompt (B, s) into an empty cache; each sequence's first generated token (B, 1)."""
    return sample(forward(model, prompt, cache, 0))


def decode(model: Transformer, ids: torch.Tensor, cache: Cache, start: int, steps: int) -> torch.Tensor:
    """`steps` tokens per sequence, the first fed `ids` (B, 1) at position `start`; the last (B, 1)."""
    for i in range(steps):
        ids = sample(forward(model, ids, cache, start + i))
    return ids
