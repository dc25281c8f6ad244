"""A state-space layer's state in the serving calculators: held once per sequence whatever its length,
read and written by every decode step, and not a per-token cost."""

import pytest

from app.accounting.inference.kv_cache import kv_cache, sequence_bytes_per_gpu
from app.accounting.models import preset

CAPACITY = {
    "weight_format": "fp8_e4m3",
    "gpu": "h100-sxm",
    "num_gpus": 2,
    "tensor_parallel": 2,
    "context": "8k",
    "concurrency": 16,
}


@pytest.mark.parametrize("name", ["nemotron-nano-9b-v2", "qwen3-next-80b-a3b", "jamba-v0.1", "falcon-h1-7b"])
def test_concurrency_counts_each_sequences_state_once(api, name):
    body = api.ok("/api/v1/inference/capacity", {"model": name, **CAPACITY})
    cfg = preset(name)
    with_state = sequence_bytes_per_gpu(cfg, context=8192, tensor_parallel=2, cache_dtype="auto")[0]
    attention = sequence_bytes_per_gpu(cfg, context=8192, tensor_parallel=2, state_included=False)[0]
    assert with_state > attention
    # The budget over one sequence's bytes, its state included: fewer than the attention layers alone allow.
    assert body["max_concurrency"] == pytest.approx(body["kv_budget_bytes_per_gpu"] / with_state, rel=1e-9)
    assert body["max_concurrency"] < body["kv_budget_bytes_per_gpu"] / attention


def test_the_state_does_not_grow_with_context_and_the_attention_cache_does():
    cfg = preset("nemotron-nano-9b-v2")
    short, long = (kv_cache(cfg, context=c, block_size=None) for c in (1024, 65536))
    assert short.state_bytes_per_sequence == long.state_bytes_per_sequence > 0
    grown = long.bytes_per_sequence - short.bytes_per_sequence
    assert grown == (65536 - 1024) * long.bytes_per_token  # 4 attention layers' K and V per token
    assert long.bytes_per_token == 4 * 2 * 8 * 128 * 2


def test_vllm_pages_a_hybrids_state_with_its_attention_blocks():
    """HybridAttentionMambaModelConfig (vllm/model_executor/models/config.py): the attention block grows to
    the least multiple of 16 tokens whose page holds one layer's state, each state is padded to that page,
    and the pages join the KV cache groups (27 Mamba-2 layers beside 4 attention layers: groups of 4)."""
    cfg = preset("nemotron-nano-9b-v2")
    state_page = (
        3 * (128 * 80 + 2 * 8 * 128) + 128 * 80 * 128
    ) * 2  # conv (K - 1) x channels, SSM state; bf16
    token_page = 2 * 8 * 128 * 2  # one attention layer's K and V for one token
    assert state_page == 2_695_168 and -(-state_page // (16 * token_page)) * 16 == 672
    cache = kv_cache(cfg, context=8192)
    assert cache.block_size == 672
    page = 672 * token_page
    assert cache.state_bytes_per_sequence == 28 * page  # 27 state layers padded to whole groups of 4
    assert cache.bytes_per_sequence == 4 * -(-8192 // 672) * page + 28 * page
    # A larger block asked for is kept; unpaged, the state is its own size.
    assert kv_cache(cfg, context=8192, block_size=1024).block_size == 1024
    assert kv_cache(cfg, context=8192, block_size=None).state_bytes_per_sequence == 27 * state_page
