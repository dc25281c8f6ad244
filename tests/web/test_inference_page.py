"""The Inference page (issue 14) answers as POST /api/v1/inference/time, /memory and /capacity
do for the same inputs (memory at prompt + output tokens unless a context is given), charts
the answers' own curves, and shows each refusal beside the field the API names. Cache sizes
are checked against published figures and the standard 2 x layers x kv_heads x head_dim x
bytes per token."""

import html
import math
import json
import re
from urllib.parse import urlencode

import pytest

from app.numbers import money, sig
from app.web.calculators import CALCULATORS
from tests.support.devices import H100_REPORTED_BYTES

EXAMPLE = {"model": "llama3.1-70b", "weight_format": "fp8_e4m3", "gpu": "h100-sxm", "num_gpus": 2,
           "tensor_parallel": 2, "concurrency": 16, "prompt_tokens": 512, "output_tokens": 128,
           "price_per_gpu_hour": 2.5}
MEMORY_FIELDS = ("model", "weight_format", "gpu", "num_gpus", "tensor_parallel", "concurrency")


def _fragment(api, form: dict) -> str:
    response = api.get("/ui/inference?" + urlencode({k: str(v) for k, v in form.items()}))
    assert response.status_code == 200
    return response.text


def _testid(page: str, name: str) -> str:
    found = re.search(rf'data-testid="{name}">([^<]*)<', page)
    assert found, name
    return " ".join(html.unescape(found.group(1)).split())


def _errors(page: str) -> dict[str, str]:
    found = re.search(r"<template data-errors='([^']*)'>", page)
    return json.loads(html.unescape(found.group(1))) if found else {}


def _chart(page: str, kind: str) -> dict:
    specs = [json.loads(html.unescape(s)) for s in re.findall(r"data-chart='([^']*)'", page)]
    (spec,) = [s for s in specs if s["type"] == kind]
    return spec


def _memory_body(form: dict, context: int) -> dict:
    return {k: form[k] for k in MEMORY_FIELDS} | {"context": context}


def test_the_cards_are_the_three_routes_answers(api):
    page = _fragment(api, EXAMPLE | {"context": 8192})
    time = api.ok("/api/v1/inference/time", EXAMPLE)
    memory = api.ok("/api/v1/inference/memory", _memory_body(EXAMPLE, 8192))
    capacity = api.ok("/api/v1/inference/capacity", _memory_body(EXAMPLE, 8192))
    assert _testid(page, "fits") == ("yes" if memory["fits"] else "no")
    assert _testid(page, "max-sequences") == f"{capacity['max_sequences']:,}"
    assert _testid(page, "max-context") == f"{capacity['max_context']:,}"
    assert _testid(page, "ttft") == f"{sig(time['time_to_first_token_s'] * 1e3)} ms"
    assert _testid(page, "itl") == f"{sig(time['inter_token_latency_s'] * 1e3)} ms"
    assert _testid(page, "tokens-per-user") == sig(time["tokens_per_sec_per_user"])
    assert _testid(page, "tokens-total") == sig(time["output_tokens_per_sec"])
    assert _testid(page, "cost-input") == money(time["cost_per_million_input_tokens"], "USD")
    assert _testid(page, "cost-output") == money(time["cost_per_million_output_tokens"], "USD")
    for row, key in (("weights", "weights_bytes"), ("KV cache", "kv_cache_bytes"), ("total", "total_bytes"),
                     ("usable", "usable_bytes")):
        assert re.search(rf'data-row="{row}"><th scope="row">{row}</th><td>{memory[key]:,}</td>', page), row
    # vLLM's budget: 0.9 of the total the H100 reports (79.22 GiB in vLLM's own log), not of 80e9
    assert memory["usable_bytes"] == math.ceil(0.9 * H100_REPORTED_BYTES)  # vLLM request_memory
    for line in time["conventions"]:
        assert html.escape(line, quote=False) in page.replace("&#39;", "'")


def test_memory_defaults_to_prompt_plus_output_tokens(api):
    """Llama-2-7B, one sequence of 512 + 32 tokens in fp16: 285,212,672 bytes of cache (32 layers
    x 2 x 4096 x 2 bytes = 524,288 per token, x 544; llm-analysis gives the same). 544 tokens
    are 34 whole blocks of 16, so paging adds nothing."""
    form = {"model": "llama2-7b", "gpu": "a100-80gb", "prompt_tokens": 512, "output_tokens": 32,
            "dtype": "float16"}
    page = _fragment(api, form)
    assert re.search(r'data-row="KV cache"><th scope="row">KV cache</th><td>285,212,672</td>', page)
    memory = api.ok("/api/v1/inference/memory", {"model": "llama2-7b", "gpu": "a100-80gb", "context": 544,
                                                 "dtype": "float16"})
    assert memory["kv_cache_bytes"] == 285_212_672 == 32 * 2 * 4096 * 2 * 544
    assert "Bytes on each GPU: 1 × 544 tokens" in page  # the context the page took
    given = _fragment(api, form | {"context": 4096})
    assert re.search(rf'<td>{32 * 2 * 4096 * 2 * 4096:,}</td>', given)  # 4096 tokens: 256 whole blocks


def test_llama2_70b_caches_its_published_bytes_per_token(api):
    """Grouped-query attention: 80 layers x 2 x 8 KV heads x 128 x 2 bytes = 327,680 per token."""
    page = _fragment(api, {"model": "llama2-70b", "gpu": "h100-sxm", "num_gpus": 2, "tensor_parallel": 2,
                           "weight_format": "fp8_e4m3"})
    assert "327,680 bytes per token (163,840 on each GPU)" in _testid(page, "memory-detail")


def test_the_charts_are_the_answers_curves(api):
    form = EXAMPLE | {"concurrency": 12, "context": 8192}
    page = _fragment(api, form)
    memory = api.ok("/api/v1/inference/memory", _memory_body(form, 8192))
    capacity = api.ok("/api/v1/inference/capacity", _memory_body(form, 8192))
    time = api.ok("/api/v1/inference/time", EXAMPLE | {"concurrency": 12})
    stack = _chart(page, "memory_stack")
    # The powers of two of by_concurrency, and this request's 12 (no power of two) among them, marked.
    shown = sorted({p["concurrency"] for p in memory["by_concurrency"]} | {12})
    assert [b["label"] for b in stack["bars"]] == [f"{c:,}" for c in shown]
    assert stack["bars"][stack["current"]]["label"] == "12"
    assert stack["kinds"] == ["weights", "kv_cache", "workspace", "overhead"]
    for bar in stack["bars"]:
        assert sum(bar[k] for k in stack["kinds"]) == pytest.approx(bar["total"], rel=1e-12)
    assert stack["capacity_gb"] == memory["usable_bytes"] / 1e9
    decode = _chart(page, "decode_curve")
    assert [(p["x"], p["y"], p["bound"]) for p in decode["points"]] == [
        (p["batch"], p["tokens_per_sec"], p["bound"]) for p in time["decode_curve"]]
    assert decode["knee"] == time["compute_bound_batch"] is not None
    assert decode["most"] == capacity["max_sequences"] // capacity["replicas"]
    assert decode["current"]["x"] == time["sequences_per_replica"] == 12
    assert f"batch {time['compute_bound_batch']:,}" in _testid(page, "decode-chart-caption")
    # The overhead line: the roofline's tokens/s at each batch, never below the kernel-level curve.
    assert [(p["x"], p["y"]) for p in decode["roofline"]] == [
        (p["batch"], p["batch"] / p["roofline_seconds"]) for p in time["decode_curve"]]
    assert all(r["y"] >= p["y"] for r, p in zip(decode["roofline"], decode["points"], strict=True))
    assert decode["launch"] == time["launch"] == "graph"  # vLLM's CUDA graphs
    assert "Continuous batching" in _testid(page, "batching") and time["batching"] == "continuous"
    table = page.split('data-testid="kernel-table"')[1].split("</table>")[0]
    step = time["decode_kernels"]
    assert f"<td>{step['kernels']:,}</td>" in table and "graph launch" in table


def test_a_long_context_says_decode_stays_memory_bound(api):
    """Llama-3.1-8B in bf16, 8k-token prompts: each sequence reads 8,256 x 131,072 bytes of cache
    per step (1.08 GB at 3.35 TB/s: ~320 us) for ~16 GFLOPs (~20 us at 990 TFLOP/s x 0.7)."""
    page = _fragment(api, {"model": "llama3.1-8b", "gpu": "h100-sxm", "prompt_tokens": 8192,
                           "output_tokens": 128})
    assert _chart(page, "decode_curve")["knee"] is None
    assert "Decode stays memory-bound" in _testid(page, "memory-bound")


REFUSALS = [
    ({"num_gpus": 2, "tensor_parallel": 3}, "/api/v1/inference/memory", "tensor_parallel"),
    ({"context": 999_999}, "/api/v1/inference/memory", "context"),
    ({"output_tokens": 200_000}, "/api/v1/inference/time", "output_tokens"),  # not context: time first
    ({"weight_format": "fp9"}, "/api/v1/inference/time", "weight_format"),
    ({"gpu_memory_utilization": 2}, "/api/v1/inference/memory", "gpu_memory_utilization"),
    ({"cache_dtype": "float64"}, "/api/v1/inference/memory", "cache_dtype"),
    ({"concurrency": 0}, "/api/v1/inference/time", "concurrency"),
]


@pytest.mark.parametrize(("bad", "route", "field"), REFUSALS, ids=[r[2] for r in REFUSALS])
def test_bad_input_shows_the_apis_422_beside_its_field(api, bad, route, field):
    base = {"model": "llama3.1-8b", "gpu": "h100-sxm"}
    refused = api.post(route, base | bad)
    assert refused.status_code == 422
    (item,) = [i for i in refused.json()["detail"] if i["field"] == field]
    page = _fragment(api, base | bad)
    assert _errors(page) == {field: item["msg"]}
    assert 'data-testid="fits"' not in page


def test_a_pasted_config_json_is_served_as_the_api_serves_it(api):
    """A Llama config.json: 2 layers x 2 x 2 KV heads x 64 (256 / 4 heads) x 2 bytes = 1,024 bytes
    of cache per token."""
    config = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512,
              "max_position_embeddings": 2048}
    page = _fragment(api, {"model": "custom", "config": json.dumps(config), "gpu": "l4"})
    assert "1,024 bytes per token" in _testid(page, "memory-detail")
    imported = api.ok("/api/v1/models/import", config)["config"]
    time = api.ok("/api/v1/inference/time", {"model": imported, "gpu": "l4"})
    assert _testid(page, "itl") == f"{sig(time['inter_token_latency_s'] * 1e3)} ms"
    refused = _fragment(api, {"model": "custom", "config": json.dumps(config | {"num_key_value_heads": 3}),
                              "gpu": "l4"})
    assert "num_key_value_heads" in _errors(refused)["config"]


def test_the_weight_formats_offered_are_the_quantization_listing(api):
    listed = [f["id"] for f in api.get("/api/v1/quantization").json()["data"]]
    offered = {i.name: i.choices for i in CALCULATORS["inference"].inputs}["weight_format"]
    assert list(offered) == listed  # fp8_e4m3 too, though it is also a dtype's alias
    page = api.get("/inference").text
    assert re.findall(r'<option value="([^"]+)"[^>]*>[^<]*</option>', page.split('id="weight_format"')[1]
                      .split("</select>")[0]) == listed


def test_the_page_says_which_defaults_it_used(api):
    page = _fragment(api, {"model": "llama2-7b", "gpu": "a100-80gb"})
    applied = api.ok("/api/v1/inference/time", {"model": "llama2-7b", "gpu": "a100-80gb"})["defaults_applied"]
    shown = _testid(page, "defaults-applied")
    for name in ("weight_format", "prompt_tokens", "output_tokens", "memory_efficiency"):
        assert f"{name.replace('_', ' ')} {applied[name]}" in shown
    assert "engine vllm" in shown
    # A null default shapes the answer by a rule the page states beside it: the GEMMs at the part's
    # MAMF, and the all-reduce latency NCCL's (not used here: one GPU).
    assert applied["flops_efficiency"] is None and "flops efficiency" not in shown
    roofline = _testid(page, "roofline")
    assert "Maximum Achievable Matmul FLOPS" in roofline and "86.9%" in roofline  # stas00: 271.2 / 312


def test_the_nav_and_the_overview_lead_to_it(api):
    for path in ("/", "/memory"):
        assert '<a href="/inference">Inference</a>' in api.get(path).text
    assert 'href="/inference"' in api.get("/").text.split('aria-label="Tools"')[1]


def test_two_gpus_split_the_model_over_both_and_a_setup_that_does_not_fit_shows_no_latency(api):
    """Issue 28, point 5: Llama-3.1-70B in bf16 (141 GB) on two L40S with tensor parallel left
    out is one replica over both GPUs, as Will it run? splits it, not two replicas that cannot
    hold it; it still does not fit (70.6 GB of weights a GPU of 43.5 GB usable: 0.9 of the 46,068
    MiB an L40S reports), so no latency is shown and the answer says what would fit."""
    asked = {"model": "llama3.1-70b", "gpu": "l40s", "num_gpus": 2, "weight_format": "bfloat16",
             "prompt_tokens": 512, "output_tokens": 128}
    time = api.ok("/api/v1/inference/time", asked)
    assert time["tensor_parallel"] == 2 and time["replicas"] == 1 and not time["fits"]
    assert time["advice"] == "fits in FP8 E4M3 (weight_format fp8_e4m3, tensor_parallel 2)"
    followed = api.ok("/api/v1/inference/time", asked | {"weight_format": "fp8_e4m3", "tensor_parallel": 2})
    assert followed["fits"] and followed["advice"] is None
    page = _fragment(api, asked)
    assert 'data-testid="ttft"' not in page and 'data-testid="itl"' not in page
    assert _testid(page, "advice") == "Fits in FP8 E4M3 (weight_format fp8_e4m3, tensor_parallel 2)."
    fitting = _fragment(api, asked | {"weight_format": "fp8_e4m3"})
    assert 'data-testid="ttft"' in fitting and 'data-testid="advice"' not in fitting


def test_tensor_parallel_left_out_is_the_fewest_gpus_that_hold_the_model(api):
    """Llama-3.1-8B on eight H100s: eight replicas of one GPU; 405B in FP8 needs all eight."""
    small = api.ok("/api/v1/inference/memory", {"model": "llama3.1-8b", "gpu": "h100-sxm", "num_gpus": 8,
                                                "context": 8192})
    assert (small["tensor_parallel"], small["replicas"]) == (1, 8)
    big = api.ok("/api/v1/inference/memory", {"model": "llama3.1-405b", "gpu": "h100-sxm", "num_gpus": 8,
                                              "weight_format": "fp8_e4m3", "context": 8192})
    assert (big["tensor_parallel"], big["replicas"]) == (8, 1) and big["fits"]
