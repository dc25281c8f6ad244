"""Each engine's memory conventions against its published start-up logs.

The expected numbers are the engines' own log lines (bench/published/serving_memory.toml names each
log; engine_logs.md quotes them): vLLM 0.19.0's "GPU KV cache size" and "torch peak memory
increase" on H100s, SGLang's max_total_num_tokens, llama.cpp's KV-cache and compute-buffer lines.
bench/published_serving.py prints the same cases side by side."""

import tomllib
from pathlib import Path

import pytest

from app.accounting import models
from app.accounting.inference.engines import llamacpp
from app.accounting.transformer import TransformerConfig
from app.accounting.units import GIB, MIB
from tests.support.api import assert_names_field

CAPACITY, MEMORY = "/api/v1/inference/capacity", "/api/v1/inference/memory"
CASES = tomllib.loads((Path(__file__).parents[2] / "bench/published/serving_memory.toml").read_text())["case"]
BODY_KEYS = ("model", "gpu", "num_gpus", "tensor_parallel", "engine", "weight_format", "dtype", "cache_dtype",
             "gpu_memory_utilization", "mem_fraction_static", "max_num_batched_tokens", "max_num_seqs",
             "free_memory_bytes", "context")


def _body(case: dict) -> dict:
    return {k: case[k] for k in BODY_KEYS if k in case}


def _reserved(answer: dict, kind: str) -> int:
    return sum(r["bytes"] for r in answer["engine"]["reserved"] if r["kind"] == kind)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_kv_cache_tokens_are_the_logs_within_5_percent(api, case):
    answer = api.ok(CAPACITY, _body(case))
    published = case["published"]
    assert answer["engine"]["kv_cache_tokens"] == pytest.approx(published["kv_cache_tokens"], rel=0.05)
    if "activation_gib" in published:  # the profile run's peak, from its mechanism (engines/vllm.py)
        assert _reserved(answer, "activations") / GIB == pytest.approx(published["activation_gib"], rel=0.01)
    if "max_concurrency" in published:
        assert answer["max_concurrency"] == pytest.approx(published["max_concurrency"], rel=0.05)


def test_vllm_sizes_its_cache_by_the_batched_tokens_not_the_model_length(api):
    """Two logs of one model at max_model_len 8192 and 32768 report the same 476,016 tokens."""
    short, long = (api.ok(CAPACITY, _body(c)) for c in CASES if c["id"].startswith("vllm-llama3.1-8b-tp1"))
    assert short["engine"]["kv_cache_tokens"] == long["engine"]["kv_cache_tokens"]
    body = _body(CASES[0])
    more = api.ok(CAPACITY, body | {"max_num_batched_tokens": 16384, "max_num_seqs": 2048})
    assert _reserved(more, "activations") > _reserved(short, "activations")
    assert more["engine"]["kv_cache_tokens"] < short["engine"]["kv_cache_tokens"]


def test_vllm_keeps_the_context_and_graphs_outside_its_share(api):
    body = _body(CASES[0])
    graphs = api.ok(CAPACITY, body)
    eager = api.ok(CAPACITY, body | {"cuda_graphs": False})
    outside = {r["kind"] for r in graphs["engine"]["reserved"] if not r["in_budget"]}
    assert outside == {"cuda_context", "cuda_graphs"}
    # enforce_eager: no graph pool, and less outside torch (vLLM 0.15-0.17 and eager logs: 0.13 GiB)
    assert "cuda_graphs" not in {r["kind"] for r in eager["engine"]["reserved"]}
    assert _reserved(eager, "non_torch") < _reserved(graphs, "non_torch")
    assert eager["engine"]["kv_cache_tokens"] > graphs["engine"]["kv_cache_tokens"]
    # at 0.99 of the total the 0.8 GiB left cannot hold the context and the graphs: vLLM would not start
    tight = api.ok(CAPACITY, body | {"gpu_memory_utilization": 0.99})
    assert any("would not start" in n for n in tight["engine"]["engine_notes"])


def test_sglang_takes_its_fraction_of_what_is_free(api):
    case = next(c for c in CASES if c["id"] == "sglang-llama3.1-8b-pr4760")
    answer = api.ok(CAPACITY, _body(case))
    assert answer["usable_bytes"] == int(case["free_memory_bytes"] * case["mem_fraction_static"])
    # what another process holds is not SGLang's to take: less free memory, a smaller pool
    busy = api.ok(CAPACITY, _body(case) | {"free_memory_bytes": case["free_memory_bytes"] - 4 * GIB})
    assert busy["engine"]["kv_cache_tokens"] < answer["engine"]["kv_cache_tokens"]
    # a slot a token: the pool's bytes are its tokens x one token's bytes, no blocks
    per_token = answer["kv_bytes_per_sequence_per_gpu"] // case["context"]
    assert answer["engine"]["kv_cache_tokens"] == answer["kv_budget_bytes_per_gpu"] // per_token


# llama.cpp's own lines. Phi-3-mini Q4_K_M on an RTX 3070, n_ctx 4096, n_ubatch 256, flash attention
# off: "llama_kv_cache_unified: size = 1536.00 MiB (4096 cells, 32 layers, 1 seqs)", "CUDA0 compute
# buffer size = 150.00 MiB". Mistral-7B-Instruct-v0.2 Q4_K_S (fedora-copr/logdetective PR #106), n_ctx
# 2048 and 32768: "KV self size = 256.00 MiB" / "4096.00 MiB", compute 164.00 / 2144.00 MiB. Qwen2.5-7B
# Q5_K_M (llama.cpp issue 9530), n_ctx 2048: KV 112.00 MiB, compute 304.00 MiB. Qwen3-4B Q4_K_M, n_ctx
# 4096, flash attention on: "llama_kv_cache: size = 576.00 MiB", compute 301.75 MiB.
MISTRAL_V02 = {"n_layers": 32, "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336, "vocab_size": 32000,
               "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "tied_embeddings": False, "position": "rope",
               "max_seq_len": 32768}
QWEN25_7B = {"n_layers": 28, "d_model": 3584, "n_heads": 28, "n_kv_heads": 4, "d_ff": 18944, "vocab_size": 152064,
             "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "qkv_bias": True, "tied_embeddings": False,
             "position": "rope", "max_seq_len": 32768}
QWEN3_4B = {"n_layers": 36, "d_model": 2560, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "d_ff": 9728,
            "vocab_size": 151936, "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "tied_embeddings": True,
            "position": "rope", "max_seq_len": 40960, "qk_norm": "head"}
LLAMA_CPP_LOGS = [  # (model, n_ctx, n_ubatch, flash attention, KV MiB, compute buffer MiB)
    ("phi-3-mini", 4096, 256, False, 1536.0, 150.0),
    (MISTRAL_V02, 2048, 512, False, 256.0, 164.0),
    (MISTRAL_V02, 32768, 512, False, 4096.0, 2144.0),
    (QWEN25_7B, 2048, 512, False, 112.0, 304.0),
    (QWEN3_4B, 4096, 512, True, 576.0, 301.75),
]


@pytest.mark.parametrize(("model", "n_ctx", "ubatch", "flash", "kv_mib", "compute_mib"), LLAMA_CPP_LOGS)
def test_llama_cpp_kv_cache_and_compute_buffer_are_its_logs(api, model, n_ctx, ubatch, flash, kv_mib, compute_mib):
    body = {"model": model, "gpu": "rtx-4090", "engine": "llama.cpp", "weight_format": "gguf_q4_k_m",
            "context": n_ctx, "max_num_batched_tokens": ubatch}
    answer = api.ok(MEMORY, body)
    assert answer["kv_cache_bytes"] == kv_mib * MIB  # f16 cells, exactly
    cfg = models.preset(model) if isinstance(model, str) else TransformerConfig(**model)
    predicted = llamacpp.compute_buffer_bytes(cfg, context=n_ctx, ubatch=ubatch, flash_attention=flash)
    # the dominant tensor, and the graph's small tensors beside it (the logs sit 5 to 32 MiB above)
    assert predicted <= compute_mib * MIB <= predicted + 35 * MIB


def test_transformers_has_no_budget_but_the_device(api):
    body = {"model": "llama3.1-8b", "gpu": "h100-sxm", "engine": "transformers", "context": 4096}
    answer = api.ok(CAPACITY, body)
    assert answer["usable_bytes"] < 85_057_317_582  # the total less a CUDA context
    assert answer["engine"]["settings"] == {"prefill_tokens": 2048, "batch": 1}
    one = answer["kv_bytes_per_sequence_per_gpu"] // 4096  # unpaged: exactly the tokens
    assert answer["engine"]["kv_cache_tokens"] == answer["kv_budget_bytes_per_gpu"] // one


@pytest.mark.parametrize(("body", "field"), [
    ({"engine": "sglang", "gpu_memory_utilization": 0.9}, "gpu_memory_utilization"),
    ({"engine": "vllm", "mem_fraction_static": 0.85}, "mem_fraction_static"),
    ({"engine": "llama.cpp", "block_size": 32}, "block_size"),
    ({"engine": "transformers", "overhead_bytes": "1GiB"}, "overhead_bytes"),
    ({"engine": "tgi"}, "engine"),
])
def test_another_engines_setting_is_refused_by_name(api, body, field):
    assert_names_field(api.post(CAPACITY, {"model": "llama3.1-8b", "gpu": "h100-sxm", "context": 4096} | body), field)
