"""Causal attention that keeps what a flash kernel keeps, for what SDPA's kernels do not take:
values narrower than queries on CPU (latent attention's v_head_dim), per-head sink logits
(gpt-oss) and chunked attention (Llama 4's local layers).

Flash kernels keep q, k and v, the output and each query's float32 log-sum-exp for backward, and
recompute the probabilities there; so does BlockwiseAttention, BLOCK queries at a time, so that
the saved tensors, and so the probe's memory, are what the calculators predict for a flash
kernel. Under FlopCounterMode the probe picks eager_attention instead (with SDPA's math backend),
whose matmuls score every (query, key) pair as FlopCounterMode counts eager attention.

Shapes: q (B, H, S, Dq); k (B, Hkv, S, Dq) and v (B, Hkv, S, Dv) with H a multiple of Hkv (grouped
queries read their group's key/value head, never a copy at H width); sinks (H,), one logit per
query head that joins each row's softmax and reads no value (gpt-oss: transformers'
eager_attention_forward concatenates it to the scores, unscaled); chunk C: a query reads the
keys of its own aligned chunk of C tokens up to itself (transformers' chunked_causal_mask_function).
"""

import torch


def _wide(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _allowed(queries: torch.Tensor, keys: torch.Tensor, chunk: int | None) -> torch.Tensor:
    """(len(queries), len(keys)) True where the query may read the key."""
    ok = keys[None, :] <= queries[:, None]
    if chunk is not None:
        ok &= keys[None, :] // chunk == queries[:, None] // chunk
    return ok


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor | None = None,
                    chunk: int | None = None, dropout: float = 0.0) -> torch.Tensor:
    """The same attention spelled out as eager code does: scores, mask, softmax (with the sink
    column), dropout, weighted values. It keeps the S x S probabilities."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    positions = torch.arange(q.shape[-2], device=q.device)
    scores = scores.masked_fill(~_allowed(positions, positions, chunk), float("-inf"))
    if sinks is not None:
        column = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.cat((scores, column), dim=-1).softmax(-1)[..., :-1]
    else:
        probs = scores.softmax(-1)
    return torch.nn.functional.dropout(probs, dropout) @ v


class BlockwiseAttention(torch.autograd.Function):
    BLOCK = 16

    @staticmethod
    def _scores(q: torch.Tensor, k: torch.Tensor, start: int, chunk: int | None) -> torch.Tensor:
        """Masked, scaled scores of queries start .. start + BLOCK, (B, Hkv, G, rows, S) in float32
        (or wider): each key/value head's G query heads stacked as one matmul's rows."""
        b, kv_heads, s, d = k.shape
        rows = q.unflatten(1, (kv_heads, -1))[..., start:start + BlockwiseAttention.BLOCK, :]
        g, n = rows.shape[2], rows.shape[3]
        scores = (rows.reshape(b, kv_heads, g * n, d) @ k.transpose(-1, -2)).to(_wide(q)) * d ** -0.5
        positions = torch.arange(s, device=q.device)
        allowed = _allowed(positions[start:start + n], positions, chunk)
        return scores.view(b, kv_heads, g, n, s).masked_fill(~allowed, float("-inf"))

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor | None,
                chunk: int | None) -> torch.Tensor:
        # (B, S, H, Dv) in memory, as flash kernels lay it out, so the output projection's
        # (B, S, H * Dv) input is a view of what is saved here, not a second copy.
        b, h, s, _ = q.shape
        kv_heads, dv = k.shape[1], v.shape[-1]
        out = v.new_empty(b, s, h, dv).transpose(1, 2)
        lse = q.new_empty(q.shape[:-1], dtype=_wide(q))
        grouped_out, grouped_lse = out.unflatten(1, (kv_heads, -1)), lse.unflatten(1, (kv_heads, -1))
        sink = None if sinks is None else sinks.to(_wide(q)).view(1, kv_heads, -1, 1)
        for i in range(0, s, BlockwiseAttention.BLOCK):
            scores = BlockwiseAttention._scores(q, k, i, chunk)  # (B, Hkv, G, n, S)
            g, n = scores.shape[2], scores.shape[3]
            row_lse = scores.logsumexp(-1)
            if sink is not None:
                row_lse = torch.logaddexp(row_lse, sink)
            grouped_lse[..., i:i + n] = row_lse
            p = (scores - row_lse[..., None]).exp().to(v.dtype).view(b, kv_heads, g * n, s)
            grouped_out[..., i:i + n, :] = (p @ v).view(b, kv_heads, g, n, dv)
        ctx.chunk = chunk
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        q, k, v, out, lse, sinks = ctx.saved_tensors
        b, h, s, dq_width = q.shape
        kv_heads, wide = k.shape[1], _wide(q)
        grad, scale = grad.to(wide), dq_width ** -0.5
        delta = (grad * out.to(wide)).sum(-1)  # (B, H, S): rowsum(dO * O)
        dq = torch.empty_like(q)
        dk, dv = torch.zeros_like(k, dtype=wide), torch.zeros_like(v, dtype=wide)
        kf, vf = k.to(wide), v.to(wide)
        grouped = [t.unflatten(1, (kv_heads, -1)) for t in (q, dq, grad, lse, delta)]
        gq, gdq, ggrad, glse, gdelta = grouped
        for i in range(0, s, BlockwiseAttention.BLOCK):
            scores = BlockwiseAttention._scores(q, k, i, ctx.chunk)
            g, n = scores.shape[2], scores.shape[3]
            p = (scores - glse[..., i:i + n, None]).exp().view(b, kv_heads, g * n, s)
            rows_grad = ggrad[..., i:i + n, :].reshape(b, kv_heads, g * n, -1)
            rows_delta = gdelta[..., i:i + n].reshape(b, kv_heads, g * n, 1)
            dv += p.transpose(-1, -2) @ rows_grad
            ds = p * (rows_grad @ vf.transpose(-1, -2) - rows_delta) * scale
            gdq[..., i:i + n, :] = (ds @ kf).view(b, kv_heads, g, n, dq_width)
            dk += ds.transpose(-1, -2) @ gq[..., i:i + n, :].reshape(b, kv_heads, g * n, dq_width).to(wide)
        dsinks = None
        if sinks is not None and ctx.needs_input_grad[3]:
            # The sink's probability exp(sink - lse) reads no value: its gradient is -p_sink x delta.
            dsinks = -((sinks.to(wide)[None, :, None] - lse).exp() * delta).sum((0, 2)).to(sinks.dtype)
        return dq, dk.to(k.dtype), dv.to(v.dtype), dsinks, None

