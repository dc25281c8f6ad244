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
    (MAX_MODEL, {"gpu": "H100_SXM"}, "gpu", "h100-sxm"),
    ("/api/v1/jobs", {"probe": "train_step", "params": {"model": "gpt-2"}}, "params.model", "gpt2"),
])
def test_near_misses_of_dtypes_gpus_and_presets(make_api, path, body, field, meant):
    refused = assert_names_field(make_api().post(path, body), field)
    assert f"did you mean {meant}" in refused["message"]


def test_h100_lists_exactly_the_h100_parts(api):
    body = assert_names_field(api.post(MAX_MODEL, {"gpu": "h100"}), "gpu")
    assert body["detail"][0]["msg"] == "'h100' names several parts: h100-sxm, h100-pcie; say which"


def test_a_family_with_one_part_resolves_to_it_and_the_answer_shows_which(api):
    """rtx names one catalogue part, the RTX 4090 (24 GB): the answer echoes its full id."""
    answer = api.ok(MAX_MODEL, {"gpu": "rtx", "num_gpus": 1})
    assert answer["gpu"] == "rtx-4090"
    assert answer == api.ok(MAX_MODEL, {"gpu": "rtx-4090", "num_gpus": 1}) | {
        "defaults_applied": answer["defaults_applied"]}
    assert api.get("/api/v1/hardware/rtx").json()["id"] == "rtx-4090"


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
