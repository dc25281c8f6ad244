"""A state-space layer's state in the serving calculators: held once per sequence whatever its length,
read and written by every decode step, and not a per-token cost."""

import pytest

from app.accounting.inference.kv_cache import kv_cache, sequence_bytes_per_gpu
from app.accounting.models import preset

CAPACITY = {"weight_format": "fp8_e4m3", "gpu": "h100-sxm", "num_gpus": 2, "tensor_parallel": 2, "context": "8k",
            "concurrency": 16}


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
