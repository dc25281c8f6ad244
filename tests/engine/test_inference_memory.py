"""Serving memory and capacity: the budget vLLM's convention leaves for the KV cache, and what it
holds. Weights of a 16-bit model are 2 bytes per parameter (the count is transformers'); the
cache is kv_cache.py's (checked against transformers' own caches in
tests/oracles/test_kv_cache_hf.py)."""

import pytest

from app.accounting.units import GIB
from tests.support.api import assert_names_field
from tests.support.devices import A100_80GB_REPORTED_BYTES

MEMORY, CAPACITY = "/api/v1/inference/memory", "/api/v1/inference/capacity"
LLAMA2_7B_PARAMS = 6_738_415_616  # meta-llama/Llama-2-7b-hf, transformers' count
BODY = {"model": "llama2-7b", "gpu": "a100-80gb", "context": 4096, "concurrency": 8}


def test_memory_adds_up(api):
    answer = api.ok(MEMORY, BODY)
    assert answer["weights_bytes"] == 2 * LLAMA2_7B_PARAMS
    # 32 layers x 32 heads x 128 x (K and V) x 2 bytes per token, 8 sequences of 4096.
    assert answer["kv_cache_bytes"] == 8 * 4096 * 32 * 32 * 128 * 2 * 2
    # vLLM 0.19's own log on one H100: "non-torch forward increase memory: 0.25GiB" (engine_logs.md)
    assert answer["overhead_bytes"] == int(0.25 * GIB)
    parts = ("weights_bytes", "kv_cache_bytes", "workspace_bytes", "overhead_bytes")
    assert answer["total_bytes"] == sum(answer[p] for p in parts)
    assert answer["usable_bytes"] == -(-A100_80GB_REPORTED_BYTES * 9 // 10) and answer["fits"]
    # vLLM's defaults on an A100 (engine/arg_utils.py get_batch_defaults: not the >= 70 GiB non-A100 row)
    assert answer["engine"]["settings"] == {"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 2048,
                                            "max_num_seqs": 256, "block_size": 16, "cuda_graphs": True}


def test_the_memory_curve_crosses_the_capacity_where_capacity_says(api):
    memory, capacity = api.ok(MEMORY, BODY), api.ok(CAPACITY, BODY)
    most = capacity["max_sequences"]
    for point in memory["by_concurrency"]:
        assert (point["total_bytes"] <= memory["usable_bytes"]) == (point["concurrency"] <= most)
    assert memory["by_concurrency"][-1]["concurrency"] >= most


def test_capacity_is_the_edge_of_what_fits(api):
    capacity = api.ok(CAPACITY, BODY)
    most = capacity["max_sequences"]
    assert api.ok(MEMORY, BODY | {"concurrency": most})["fits"]
    assert not api.ok(MEMORY, BODY | {"concurrency": most + 1})["fits"]
    # 8 sequences of the model's whole 4096 positions fit; 40 do not.
    assert (capacity["max_context"], capacity["max_context_limited_by"]) == (4096, "max_seq_len")
    crowd = BODY | {"concurrency": 40}
    longest = api.ok(CAPACITY, crowd)["max_context"]
    assert api.ok(CAPACITY, crowd)["max_context_limited_by"] == "memory" and longest < 4096
    assert api.ok(MEMORY, crowd | {"context": longest})["fits"]
    assert not api.ok(MEMORY, crowd | {"context": longest + 1})["fits"]


def test_more_replicas_hold_more_sequences_and_tensor_parallel_frees_memory(api):
    one = api.ok(CAPACITY, BODY)["max_sequences"]
    assert api.ok(CAPACITY, BODY | {"num_gpus": 2})["max_sequences"] == 2 * one
    split = api.ok(CAPACITY, BODY | {"num_gpus": 2, "tensor_parallel": 2})
    assert split["max_sequences"] > 2 * one  # half the weights per GPU leave more for the cache


def test_a_model_too_big_for_the_gpu_fits_nothing(api):
    answer = api.ok(CAPACITY, {"model": "llama2-70b", "gpu": "l4", "context": 1024})
    assert answer["kv_budget_bytes_per_gpu"] < 0
    assert (answer["max_sequences"], answer["max_context"], answer["fits"]) == (0, 0, False)


def test_latent_cache_holds_far_more_sequences_than_decompressed(api):
    body = {"model": "deepseek-v2-lite", "gpu": "h100-sxm", "context": 8192}
    latent = api.ok(CAPACITY, body)
    full = api.ok(CAPACITY, body | {"mla_cache": "decompressed"})
    # 27 layers x (512 + 64) values against 16 heads x (128 + 64 + 128): 8.9 x fewer bytes.
    ratio = 16 * (128 + 64 + 128) / (512 + 64)
    assert latent["kv_bytes_per_sequence_per_gpu"] * ratio == pytest.approx(
        full["kv_bytes_per_sequence_per_gpu"], rel=0.01)


@pytest.mark.parametrize(("body", "field"), [
    (BODY | {"context": 1_000_000}, "context"),
    (BODY | {"weight_format": "q4"}, "weight_format"),
    (BODY | {"num_gpus": 2, "tensor_parallel": 4}, "tensor_parallel"),
    (BODY | {"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    (BODY | {"cache_dtype": "int4"}, "cache_dtype"),
    # Formats this model cannot take: GPTQ groups of 100 across 4096 inputs; GGUF blocks of 32 and
    # AWQ's 8 columns per int32 across a 36-wide model.
    (BODY | {"weight_format": "gptq_int4", "group_size": 100}, "group_size"),
    (BODY | {"weight_format": "gguf_q4_0", "model": {"n_layers": 2, "d_model": 48, "n_heads": 4,
                                                      "vocab_size": 100}, "context": 64}, "weight_format"),
    (BODY | {"weight_format": "awq_int4", "model": {"n_layers": 2, "d_model": 36, "n_heads": 4,
                                                     "vocab_size": 100}, "context": 64}, "weight_format"),
    (BODY | {"unquantized": ["experts"]}, "unquantized.0"),
])
def test_bad_memory_requests_name_the_field(api, body, field):
    assert_names_field(api.post(MEMORY, body), field)
    assert_names_field(api.post(CAPACITY, body), field)
