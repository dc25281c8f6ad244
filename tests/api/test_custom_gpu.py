"""A GPU outside the catalogue (issue 28, point 3): every calculator that takes a GPU takes one
described in the request, labels it by its name, takes units as people write them, and never
uses a figure it was not given (no catalogue part's peak, node, or power)."""

import json

import pytest

from app.cli import main
from tests.support.api import assert_names_field

# An RTX 3080 Ti as its owner reads it off NVIDIA's GA102 whitepaper: 12 GB GDDR6X at 912 GB/s,
# FP16/BF16 tensor with FP32 accumulate 68.2 TFLOPS dense (GeForce: half the FP16-accumulate rate).
MINE = {"name": "RTX 3080 Ti", "memory_bytes": "12GB", "memory_bandwidth_bytes_per_sec": "912GB/s",
        "peak_flop_per_sec": {"bfloat16": "68.2T"}}
PLAIN = {"name": "RTX 3080 Ti", "memory_bytes": 12e9, "memory_bandwidth_bytes_per_sec": 912e9,
         "peak_flop_per_sec": {"bfloat16": 68.2e12}}


@pytest.mark.parametrize(("path", "body", "echo"), [
    ("/api/v1/fit", {"model": "llama3.2-1b", "seq_len": 2048}, "gpu"),
    ("/api/v1/memory/training", {"model": "gpt2"}, "gpu"),
    ("/api/v1/memory/max-model", {"num_gpus": 1}, "gpu"),
    ("/api/v1/inference/memory", {"model": "llama3.2-1b", "weight_format": "bfloat16", "context": 4096}, None),
    ("/api/v1/inference/time", {"model": "llama3.2-1b", "weight_format": "bfloat16", "prompt_tokens": 512,
                                "output_tokens": 64}, None),
    ("/api/v1/finetune", {"model": "llama3.2-1b", "mode": "lora", "seq_len": 512}, None),
    ("/api/v1/time/training", {"params": "1b", "tokens": "20b", "num_gpus": 1}, None),
    ("/api/v1/plan/training", {"model": "gpt2", "num_gpus": 1, "seq_len": 1024, "global_batch_sequences": 8},
     "gpu"),
])
def test_every_calculator_that_takes_a_gpu_takes_a_custom_one(api, path, body, echo):
    answer = api.ok(path, body | {"gpu": MINE})
    assert answer == api.ok(path, body | {"gpu": PLAIN})  # "12GB", "912GB/s" and "68.2T" read exactly
    if echo:
        assert answer[echo] == "RTX 3080 Ti"


def test_its_figures_are_its_own(api):
    """The memory it was given decides what fits, and time runs at its bandwidth and peak."""
    fit = api.ok("/api/v1/fit", {"model": "llama3-8b", "gpu": MINE, "seq_len": 2048})
    assert fit["gpu_name"] == "RTX 3080 Ti" and fit["gpu_memory_bytes"] == 12e9
    served = {o["option"]: o for o in fit["options"]}
    assert not served["inference-bfloat16"]["fits"]  # 16 GB of bf16 weights on a 12 GB card
    assert "inference-fp8_e4m3" not in served  # no FP8 peak given: no FP8 serving offered
    time = api.ok("/api/v1/time/training", {"params": "1b", "tokens": "20b", "gpu": MINE, "num_gpus": 1})
    assert time["peak_flop_per_sec_per_gpu"] == 68.2e12


@pytest.mark.parametrize(("path", "body", "field", "words"), [
    ("/api/v1/time/mfu", {"flops": 1e15, "seconds": 100, "dtype": "fp8"}, "dtype",
     "RTX 3080 Ti lists no float8 peak (it lists bfloat16, float16); give one in gpu.peak_flop_per_sec"),
    ("/api/v1/energy", {"gpu_hours": 10}, "power_watts", "give power_watts, or gpu.board_power_watts"),
    ("/api/v1/plan/training", {"model": "gpt2", "num_gpus": 2, "seq_len": 1024, "global_batch_sequences": 8},
     "gpus_per_node", "give gpus_per_node"),
])
def test_a_figure_it_was_not_given_is_asked_for_never_borrowed(api, path, body, field, words):
    refused = assert_names_field(api.post(path, body | {"gpu": MINE}), field)
    assert words in refused["message"]


@pytest.mark.parametrize(("gpu", "field"), [
    ({k: v for k, v in MINE.items() if k != "name"}, "gpu.name"),
    (MINE | {"memory_bytes": "12B"}, "gpu.memory_bytes"),
    (MINE | {"memory_bandwidth_bytes_per_sec": "912GB"}, "gpu.memory_bandwidth_bytes_per_sec"),
    (MINE | {"peak_flop_per_sec": {}}, "gpu.peak_flop_per_sec.bfloat16"),
    (MINE | {"cores": 80}, "gpu.cores"),
    (42, "gpu"),
])
def test_a_bad_custom_gpu_names_its_field(api, gpu, field):
    assert_names_field(api.post("/api/v1/memory/training", {"model": "gpt2", "gpu": gpu}), field)


def test_overrides_do_not_mix_with_a_custom_gpu(api):
    assert_names_field(api.post("/api/v1/memory/training", {"model": "gpt2", "gpu": MINE,
                                                            "gpu_overrides": {"memory_bytes": "24GB"}}),
                       "gpu_overrides")


def test_the_cli_takes_one_as_json(capsys):
    status = main(["calc", "memory", "max-model", "--gpu", json.dumps(MINE), "--compact"])
    out, _ = capsys.readouterr()
    assert status == 0 and json.loads(out)["gpu"] == "RTX 3080 Ti"
