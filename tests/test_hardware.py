"""The accelerator catalogue: a data file with dense peaks and sources."""

import tomllib
from importlib import resources

from tests.conftest import assert_names_field

IDS = ["h100-sxm", "h100-pcie", "h200", "b200", "a100-40gb", "a100-80gb", "l40s", "l4", "a10g",
       "rtx-4090", "mi300x", "tpu-v5e", "tpu-v5p"]


def test_catalogue_lists_every_required_accelerator(api):
    body = api.get("/api/v1/hardware").json()
    assert [g["id"] for g in body["data"]] == IDS and body["count"] == len(IDS)
    for g in body["data"]:
        assert g["source"].startswith("https://") and g["memory_bytes"] > 0
        assert g["memory_bandwidth_bytes_per_sec"] > 0
        assert set(g["peak_flop_per_sec"]) <= {"float64", "float32", "tfloat32", "bfloat16",
                                               "float16", "float8", "int8"}


def test_h100_bf16_is_the_dense_half_of_the_datasheet(api):
    h100 = api.get("/api/v1/hardware/h100-sxm").json()
    # The datasheet's 1,979 TFLOP/s assumes 2:4 sparsity; the course divides by 2.
    assert h100["peak_flop_per_sec"]["bfloat16"] == 1979e12 / 2
    assert h100["memory_bytes"] == 80e9


def test_catalogue_is_served_from_the_data_file(api):
    text = resources.files("app.accounting").joinpath("data/hardware.toml").read_text()
    rows = {row["id"]: row for row in tomllib.loads(text)["accelerator"]}
    for g in api.get("/api/v1/hardware").json()["data"]:
        assert g["peak_flop_per_sec"] == rows[g["id"]]["peak_flop_per_sec"]
        assert g["memory_bytes"] == rows[g["id"]]["memory_bytes"]


def test_unknown_gpu_is_404(api):
    assert_names_field(api.get("/api/v1/hardware/h100"), "gpu_id", status=404)
