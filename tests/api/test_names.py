"""A refused name says what was meant ("did you mean llama3-8b?"), a GPU family resolves to
its one part or lists its parts, and messages carry no framework prefix."""

import json

import pytest

from app.cli import main
from tests.support.api import assert_names_field

MEMORY = "/api/v1/memory/training"
MAX_MODEL = "/api/v1/memory/max-model"


def test_a_near_miss_preset_is_answered_with_the_name_meant(api):
    body = assert_names_field(api.post(MEMORY, {"model": "llama-3-8b"}), "model")
    assert body["message"] == "model: unknown preset 'llama-3-8b': did you mean llama3-8b?"


def test_a_far_miss_points_at_the_listing_instead_of_dumping_it(api):
    body = assert_names_field(api.post(MEMORY, {"model": "qwerty"}), "model")
    assert "GET /api/v1/models" in body["message"] and "gpt2" not in body["message"]


@pytest.mark.parametrize("path,body,field,meant", [
    ("/api/v1/flops/matmul", {"m": 8, "k": 8, "n": 8, "dtype": "bf-16"}, "dtype", "bf16"),
    ("/api/v1/tensors/memory", {"shape": [4], "dtype": "bfloat"}, "dtype", "bfloat16"),
    (MAX_MODEL, {"gpu": "h10-sxm"}, "gpu", "h100-sxm"),
    ("/api/v1/jobs", {"probe": "train_step", "params": {"model": "gpt-2"}}, "params.model", "gpt2"),
])
def test_near_misses_of_dtypes_gpus_and_presets(make_api, path, body, field, meant):
    refused = assert_names_field(make_api().post(path, body), field)
    assert f"did you mean {meant}" in refused["message"]


def test_h100_lists_exactly_the_h100_parts(api):
    body = assert_names_field(api.post(MAX_MODEL, {"gpu": "h100"}), "gpu")
    assert body["detail"][0]["msg"] == "'h100' names several parts: h100-sxm, h100-pcie; say which"


@pytest.mark.parametrize(("hint", "part"), [
    ("H100 80GB", "h100-sxm"),  # what nvidia-smi shows: "NVIDIA H100 80GB HBM3"
    ("rtx3090", "rtx-3090"), ("4090", "rtx-4090"), ("RTX 4090", "rtx-4090"), ("NVIDIA H20", "h20"),
    ("A6000", "rtx-a6000"), ("5090", "rtx-5090"), ("mi300", "mi300x"), ("tpu-v5", None),
])
def test_name_hints_find_the_part(api, hint, part):
    """Names as people write them (issue 28, point 3): the answer echoes the part's full id."""
    if part is None:  # a family of two
        assert "names several parts: tpu-v5e, tpu-v5p" in assert_names_field(
            api.post(MAX_MODEL, {"gpu": hint}), "gpu")["message"]
        return
    answer = api.ok(MAX_MODEL, {"gpu": hint, "num_gpus": 1})
    assert answer["gpu"] == part
    assert answer == api.ok(MAX_MODEL, {"gpu": part, "num_gpus": 1}) | {
        "defaults_applied": answer["defaults_applied"]}
    assert api.get(f"/api/v1/hardware/{hint}").json()["id"] == part


@pytest.mark.parametrize(("hint", "parts"), [
    ("rtx", "rtx-4090, rtx-3090, rtx-5090, rtx-a6000"), ("80GB", "h100-sxm, h100-pcie, a100-80gb, h800, a800-80gb"),
])
def test_a_hint_of_several_parts_lists_them(api, hint, parts):
    body = assert_names_field(api.post(MAX_MODEL, {"gpu": hint}), "gpu")
    assert body["detail"][0]["msg"] == f"{hint!r} names several parts: {parts}; say which"


def test_the_cli_shows_the_same_message(capsys):
    status = main(["calc", "memory", "training", "--model", "llama-3-8b", "--compact"])
    _, err = capsys.readouterr()
    assert status == 2
    assert json.loads(err)["message"] == "model: unknown preset 'llama-3-8b': did you mean llama3-8b?"


def test_messages_carry_no_framework_prefix(api):
    body = assert_names_field(api.post(MAX_MODEL, {"gpu": "h100-sxm", "usable_memory_fraction": 2}),
                              "usable_memory_fraction")
    assert body["message"] == "usable_memory_fraction: must be <= 1"
    assert "Value error" not in body["detail"][0]["msg"]
