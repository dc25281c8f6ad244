"""Bad input gets a 4xx naming the field: never a 500, never an unencodable echo."""

import json
import time

import pytest

from tests.support.api import assert_names_field

RAW = {"content-type": "application/json"}


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused_without_echo(api, token):
    raw = f'{{"flops": {token}, "gpu": "h100-sxm"}}'
    response = api.post("/api/v1/time/training", content=raw, headers=RAW)
    body = assert_names_field(response, "flops")
    json.loads(response.text)  # strict JSON: no NaN or Infinity tokens inside
    assert "NaN" not in response.text and "Infinity" not in response.text
    assert all("input" not in item for item in body["detail"])


def test_malformed_json_names_the_body(api):
    response = api.post("/api/v1/flops/matmul", content=b'{"m": 1, "k": ', headers=RAW)
    assert_names_field(response, "body")
    assert "malformed JSON" in response.json()["message"]


@pytest.mark.parametrize("path,body,field", [
    ("/api/v1/flops/matmul", {"m": -1, "k": 2, "n": 3}, "m"),
    ("/api/v1/flops/matmul", {"m": 0, "k": 2, "n": 3}, "m"),
    ("/api/v1/flops/matmul", {"m": "four", "k": 2, "n": 3}, "m"),
    ("/api/v1/flops/matmul", {"m": 1.5, "k": 2, "n": 3}, "m"),
    ("/api/v1/flops/matmul", {"m": True, "k": 2, "n": 3}, "m"),
    ("/api/v1/flops/matmul", {"m": 1, "k": 2, "n": 3, "batchsize": 4}, "batchsize"),
    ("/api/v1/flops/matmul", {"k": 2, "n": 3}, "m"),
    ("/api/v1/tensors/memory", {"shape": [4, -2]}, "shape.1"),
    ("/api/v1/tensors/memory", {"shape": [4], "dtype": "float128"}, "dtype"),
    ("/api/v1/flops/transformer", {"model": "llama9"}, "model"),
    ("/api/v1/flops/transformer", {"model": {"n_layers": 2}}, "model.d_model"),
    ("/api/v1/flops/transformer", {"model": {"n_layers": 2, "d_model": 8, "n_heads": 2,
                                             "vocab_size": 5, "mlp": "relu"}}, "model.mlp"),
    ("/api/v1/memory/training", {"model": "gpt2", "precision": "fp64"}, "precision"),
    ("/api/v1/memory/max-model", {"gpu": "h100-sxm", "num_gpus": 0}, "num_gpus"),
    ("/api/v1/memory/max-model", {"gpu": "h100-sxm", "gpu_overrides": {"memory_bytes": -5}},
     "gpu_overrides.memory_bytes"),
    ("/api/v1/time/training", {"flops": -1, "gpu": "h100-sxm"}, "flops"),
    ("/api/v1/time/training", {"params": -1, "tokens": 5, "gpu": "h100-sxm"}, "params"),
    ("/api/v1/memory/training", {"model": -1}, "model"),
    ("/api/v1/dtypes/encode", {"value": "12abc", "dtype": "fp16"}, "value"),
    ("/api/v1/dtypes/encode", {"value": "nan", "dtype": "fp4"}, "value"),
])
def test_out_of_bounds_fields_are_named(api, path, body, field):
    assert_names_field(api.post(path, body), field)


def test_no_route_answers_500_to_garbage(api):
    for path in ("/api/v1/flops/matmul", "/api/v1/memory/training", "/api/v1/models/import",
                 "/api/v1/dtypes/encode", "/api/v1/time/mfu", "/api/v1/tensors/layout"):
        for raw in (b"", b"null", b"[]", b'"x"', b"{}", b"\xff\xfe", b'{"a":' * 50):
            response = api.post(path, content=raw, headers=RAW)
            assert 400 <= response.status_code < 500, (path, raw, response.text)
            assert response.json()["message"]


def test_unknown_route_is_a_json_404(api):
    response = api.get("/api/v1/nothing")
    assert response.status_code == 404 and response.json()["message"] == "Not Found"


def test_oversized_body_is_413_naming_the_body(api):
    huge = b'{"model_type": "llama", "pad": "' + b"x" * (2 << 20) + b'"}'
    assert_names_field(api.post("/api/v1/models/import", content=huge, headers=RAW), "body", status=413)

    async def chunks():  # no Content-Length: counted as it streams
        for _ in range(3):
            yield b"x" * (1 << 19)

    streamed = api.post("/api/v1/models/import", content=chunks(), headers=RAW)
    assert_names_field(streamed, "body", status=413)


def test_many_problems_are_capped_and_counted(api):
    body = {"m": 1, "k": 2, "n": 3} | {f"unknown{i}": 1 for i in range(500)}
    response = api.post("/api/v1/flops/matmul", body)
    detail = assert_names_field(response, "unknown0")["detail"]
    assert len(detail) == 21, len(detail)
    assert detail[-1]["type"] == "too_many_errors" and "480 more" in detail[-1]["msg"]
    assert len(response.content) < 5000


def test_a_megabyte_of_unknown_keys_gets_a_small_cheap_answer(api):
    raw = json.dumps({f"{i:x}": 1 for i in range(90_000)}).encode()
    assert len(raw) < 1 << 20
    started = time.perf_counter()
    response = api.post("/api/v1/flops/matmul", content=raw, headers=RAW)
    assert time.perf_counter() - started < 1.0
    assert_names_field(response, "body")
    assert len(response.content) < 1000 and "90000 keys" in response.json()["message"]


@pytest.mark.parametrize("raw,field", [
    (b'{"m": 1, "k": 2, "n": 3, "m": 4}', "m"),
    (b'{"m": 1, "k": 2, "n": 3, "dtype": {"a": 1, "a": 2}}', "a"),
])
def test_duplicate_keys_are_refused_naming_the_key(api, raw, field):
    body = assert_names_field(api.post("/api/v1/flops/matmul", content=raw, headers=RAW), field)
    assert body["detail"][0]["type"] == "duplicate_key"
