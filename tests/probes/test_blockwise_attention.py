"""app/bench/flash.py: the probe's attention for what SDPA's kernels do not take (sinks, chunks,
narrow values on CPU) computes, forward and backward, what eager attention computes, and eager
attention computes what transformers' does (gpt-oss's sinks, Llama 4's chunk mask)."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from app.bench.flash import BlockwiseAttention, _allowed, eager_attention

CASES = list(itertools.product(
    [16, 37],  # tokens: a whole block, and a last block of 5 queries
    [(4, 4), (4, 2), (6, 1)],  # query heads, key/value heads: MHA, GQA, MQA
    [False, True],  # sinks
    [None, 8, 5],  # chunk: none, one dividing the block, one that does not
    [24, 8],  # value width: the queries' or narrower (latent attention's)
))


@pytest.mark.parametrize(("s", "heads", "sinks", "chunk", "dv"), CASES)
def test_blockwise_attention_is_eager_attention_forward_and_backward(s, heads, sinks, chunk, dv):
    torch.manual_seed(s + dv)
    h, kv = heads
    q = torch.randn(2, h, s, 24, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, kv, s, 24, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, kv, s, dv, dtype=torch.float64, requires_grad=True)
    sink = torch.randn(h, dtype=torch.float64, requires_grad=True) if sinks else None
    inputs = [q, k, v] + ([sink] if sinks else [])
    grad = torch.randn(2, h, s, dv, dtype=torch.float64)
    ours = BlockwiseAttention.apply(q, k, v, sink, chunk)
    expected = eager_attention(q, k, v, sink, chunk)
    torch.testing.assert_close(ours, expected)
    theirs = torch.autograd.grad(expected, inputs, grad)
    for mine, their in zip(torch.autograd.grad(ours, inputs, grad), theirs, strict=True):
        torch.testing.assert_close(mine, their)
    if not sinks and chunk is None:  # and both are SDPA's causal attention
        torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                        enable_gqa=kv != h))


def test_blockwise_attention_keeps_what_a_flash_kernel_keeps():
    """q, k, v (at key/value width), the output and a float32 log-sum-exp per query; no S x S."""
    q = torch.randn(2, 4, 40, 16, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(2, 2, 40, 16, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    sink = torch.zeros(4, requires_grad=True)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        BlockwiseAttention.apply(q, k, v, sink, 12)
    shapes = sorted((tuple(t.shape), t.dtype) for t in kept)
    assert shapes == sorted([((2, 4, 40, 16), torch.bfloat16), ((2, 2, 40, 16), torch.bfloat16),
                             ((2, 2, 40, 16), torch.bfloat16), ((2, 4, 40, 16), torch.bfloat16),
                             ((2, 4, 40), torch.float32), ((4,), torch.float32)])


def test_eager_sinks_are_gpt_oss_attention():
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import (
        GptOssAttention,
        GptOssRotaryEmbedding,
        apply_rotary_pos_emb,
    )
    torch.manual_seed(0)
    hf = GptOssConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      vocab_size=100, layer_types=["full_attention"], num_hidden_layers=1)
    hf._attn_implementation = "eager"
    ref = GptOssAttention(hf, 0).double()
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 24, 64, dtype=torch.float64)
    cos, sin = GptOssRotaryEmbedding(hf)(x, torch.arange(24)[None])
    mask = torch.full((24, 24), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    expected = ref(x, (cos.double(), sin.double()), mask)[0]
    # Only the core is ours: transformers' own projections and rotation feed it, its o_proj reads it.
    q = ref.q_proj(x).view(2, 24, 4, 16).transpose(1, 2)
    k = ref.k_proj(x).view(2, 24, 2, 16).transpose(1, 2)
    v = ref.v_proj(x).view(2, 24, 2, 16).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos.double(), sin.double())
    z = eager_attention(q, k, v, ref.sinks, None)
    ours = ref.o_proj(z.transpose(1, 2).reshape(2, 24, 64))
    torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize(("s", "chunk"), [(20, 8), (33, 16), (9, 12)])
def test_the_chunk_mask_is_transformers_chunked_causal_mask(s, chunk):
    from transformers.masking_utils import chunked_causal_mask_function
    allowed = chunked_causal_mask_function(chunk, torch.zeros(1, dtype=torch.long))
    positions = torch.arange(s)
    zero = torch.zeros((), dtype=torch.long)
    expected = allowed(zero, zero, positions[:, None], positions[None, :])
    assert torch.equal(_allowed(positions, positions, chunk), expected)
