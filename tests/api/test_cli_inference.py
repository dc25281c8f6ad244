"""`tally calc inference memory|capacity|time` and `tally calc quantization list`: commands
made from the routes' request models, answering with the API's bytes and refusing with its
422, as tests/api/test_cli.py checks the training calculators."""

import json

import pytest

from tests.support.api import assert_names_field
from tests.support.cli import run_main

SERVING = ["--model", "llama3.1-70b", "--weight-format", "fp8_e4m3", "--gpu", "h100-sxm", "--num-gpus", "2",
           "--tensor-parallel", "2", "--concurrency", "16"]
BODY = {"model": "llama3.1-70b", "weight_format": "fp8_e4m3", "gpu": "h100-sxm", "num_gpus": 2,
        "tensor_parallel": 2, "concurrency": 16}

SAME_AS_API = [
    (["inference", "memory", *SERVING, "--context", "8k"], "POST", "/api/v1/inference/memory",
     BODY | {"context": "8k"}),
    (["inference", "capacity", *SERVING, "--context", "8192"], "POST", "/api/v1/inference/capacity",
     BODY | {"context": 8192}),
    (["inference", "time", *SERVING, "--prompt-tokens", "2048", "--output-tokens", "256",
      "--price-per-gpu-hour", "2.5", "--currency", "EUR"], "POST", "/api/v1/inference/time",
     BODY | {"prompt_tokens": 2048, "output_tokens": 256, "price_per_gpu_hour": 2.5, "currency": "EUR"}),
    (["inference", "time", "--json", json.dumps({"model": "llama2-7b", "gpu": "a100-80gb"}), "--unquantized",
      "embeddings,lm_head", "--weight-format", "gptq_int4"], "POST", "/api/v1/inference/time",
     {"model": "llama2-7b", "gpu": "a100-80gb", "unquantized": ["embeddings", "lm_head"],
      "weight_format": "gptq_int4"}),
    (["quantization", "list"], "GET", "/api/v1/quantization", None),
]


@pytest.mark.parametrize(("argv", "method", "path", "body"), SAME_AS_API, ids=lambda v: None)
def test_calc_inference_answers_as_the_api_does(capsys, api, argv, method, path, body):
    expected = api.request(method, path, json=body)
    assert expected.status_code == 200, expected.text
    status, out, err = run_main(capsys, "calc", *argv, "--compact")
    assert (status, err) == (0, "")
    assert out == expected.text + "\n"  # the API's bytes


def test_the_cache_is_the_published_327680_bytes_per_token(capsys):
    """Llama-2-70B in fp16: 80 layers x 2 x 8 KV heads x 128 x 2 bytes."""
    status, out, _ = run_main(capsys, "calc", "inference", "memory", "--model", "llama2-70b", "--gpu", "h200",
                              "--dtype", "float16", "--context", "4096")
    assert status == 0 and json.loads(out)["kv_cache"]["bytes_per_token"] == 327_680 == 80 * 2 * 8 * 128 * 2


REFUSED = [
    (["inference", "memory", "--model", "llama3.1-70b", "--gpu", "h100-sxm", "--num-gpus", "2",
      "--tensor-parallel", "3"], "/api/v1/inference/memory",
     {"model": "llama3.1-70b", "gpu": "h100-sxm", "num_gpus": 2, "tensor_parallel": 3}, "tensor_parallel"),
    (["inference", "capacity", "--model", "llama2-7b", "--gpu", "a100-80gb", "--context", "8192"],
     "/api/v1/inference/capacity", {"model": "llama2-7b", "gpu": "a100-80gb", "context": 8192}, "context"),
    (["inference", "time", "--model", "llama2-7b", "--gpu", "a100-80gb", "--weight-format", "fp9"],
     "/api/v1/inference/time", {"model": "llama2-7b", "gpu": "a100-80gb", "weight_format": "fp9"},
     "weight_format"),
    (["inference", "time", "--model", "llama2-7b"], "/api/v1/inference/time", {"model": "llama2-7b"}, "gpu"),
]


@pytest.mark.parametrize(("argv", "path", "body", "field"), REFUSED, ids=[r[3] for r in REFUSED])
def test_calc_inference_refuses_with_the_apis_422(capsys, api, argv, path, body, field):
    expected = assert_names_field(api.post(path, body), field)
    status, out, err = run_main(capsys, "calc", *argv, "--compact")
    assert (status, out) == (2, "")
    assert json.loads(err) == expected


def test_help_lists_the_serving_commands_and_their_fields(capsys):
    status, out, _ = run_main(capsys, "calc", "--help")
    flat = " ".join(out.split())
    assert status == 0
    for name in ("inference memory", "inference capacity", "inference time", "quantization list"):
        assert name in flat
    # A group named for no route module has its own line, its route's summary (issue 28, point 13).
    assert "quantization Every weight format" in flat
    _, out, _ = run_main(capsys, "calc", "inference", "time", "--help")
    flat = " ".join(out.split())
    options = ("--weight-format", "--cache-dtype", "--tensor-parallel", "--prompt-tokens", "--output-tokens",
               "--concurrency", "--price-per-gpu-hour", "--flops-efficiency", "fp8_e4m3")
    for option in options:
        assert option in flat, option


def test_table_prints_the_engines_reserved_items_and_the_time_breakdown(capsys, api):
    """Issue 30, point 5: --table prints what the JSON nests: the engine's reserved memory item by
    item with the KV cache's rest, and a pass's time kernel by kernel beside the roofline."""
    body = {"model": "llama3.1-8b", "gpu": "h100-sxm", "context": 8192}
    answer = api.ok("/api/v1/inference/capacity", body)
    status, out, err = run_main(capsys, "calc", "inference", "capacity", "--model", "llama3.1-8b", "--gpu",
                                "h100-sxm", "--context", "8192", "--table")
    flat = " ".join(out.split())
    assert (status, err) == (0, "")
    for item in answer["engine"]["reserved"]:
        assert item["kind"].replace("_", " ") in flat and f"{item['bytes'] / 2**30:,.2f}" in flat
    assert f"{answer['engine']['kv_cache_tokens']:,} tokens" in flat and "gpu_memory_utilization 0.9" in flat
    time = api.ok("/api/v1/inference/time", {"model": "llama3.1-8b", "gpu": "h100-sxm"})
    status, out, _ = run_main(capsys, "calc", "inference", "time", "--model", "llama3.1-8b", "--gpu",
                              "h100-sxm", "--table")
    flat = " ".join(out.split())
    assert status == 0 and "graph launch" in flat and "kernel floors" in flat
    for seconds in (time["decode_kernels"]["seconds"], time["decode"]["seconds"]):
        assert f"{seconds * 1e3:,.3f}" in flat
    # A command without a face has no --table.
    status, _, err = run_main(capsys, "calc", "flops", "transformer", "--model", "gpt2", "--table")
    assert status == 2 and "--table" in err
