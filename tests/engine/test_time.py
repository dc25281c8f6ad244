"""Training time and MFU against the course's worked example."""

import pytest

from tests.support.api import assert_names_field

TRAINING = "/api/v1/time/training"


def test_course_70b_on_15t_tokens_with_1024_h100(api):
    body = api.ok(TRAINING, {"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm", "dtype": "bf16",
                             "num_gpus": 1024, "mfu": 0.5})
    total_flops = 6 * 70e9 * 15e12
    h100_flop_per_sec = 1979e12 / 2
    flops_per_day = h100_flop_per_sec * 0.5 * 1024 * 60 * 60 * 24
    assert body["flops"] == total_flops == 6.3e24
    assert body["days"] == pytest.approx(total_flops / flops_per_day, rel=1e-12)
    assert round(body["days"], 1) == 143.9
    assert body["gpu_hours"] == pytest.approx(body["days"] * 24 * 1024, rel=1e-12)
    assert body["cost"] is None


def test_given_flops_and_price(api):
    body = api.ok(TRAINING, {"flops": 1e21, "gpu": "a100-80gb", "dtype": "bf16", "num_gpus": 8,
                             "mfu": 0.4, "price_per_gpu_hour": 2.0})
    seconds = 1e21 / (312e12 * 8 * 0.4)
    assert body["seconds"] == pytest.approx(seconds, rel=1e-12)
    assert body["cost"] == pytest.approx(seconds * 8 / 3600 * 2.0, rel=1e-12)
    assert body["flops_source"] == "given"


def test_overridden_peak(api):
    body = api.ok(TRAINING, {"flops": 1e20, "gpu": "h100-sxm", "dtype": "bf16", "mfu": 1.0,
                             "gpu_overrides": {"peak_flop_per_sec": {"bfloat16": 1e15}}})
    assert body["seconds"] == pytest.approx(1e5)


def test_mfu_from_a_measured_step(api):
    # 6 x 124M params x 0.5M tokens done in 10 s on 8 H100s.
    flops = 6 * 124_439_808 * 524_288
    body = api.ok("/api/v1/time/mfu", {"flops": flops, "seconds": 10, "gpu": "h100-sxm",
                                       "dtype": "bf16", "num_gpus": 8})
    assert body["achieved_flop_per_sec"] == flops / 10
    assert body["promised_flop_per_sec"] == 989.5e12 * 8
    assert body["mfu"] == pytest.approx(flops / 10 / (989.5e12 * 8))
    assert body["warnings"] == []
    direct = api.ok("/api/v1/time/mfu", {"flops": 2e15, "seconds": 1, "peak_flop_per_sec": 1e15})
    assert direct["mfu"] == 2 and direct["warnings"]  # impossible against a dense peak: flagged


def test_time_rejections_name_their_field(api):
    assert_names_field(api.post(TRAINING, {"gpu": "h100-sxm"}), "params")  # the pair a form shows
    both = {"flops": 1e20, "params": 1e9, "tokens": 1e9, "gpu": "h100-sxm"}
    assert_names_field(api.post(TRAINING, both), "flops")
    assert_names_field(api.post(TRAINING, {"flops": 1e20, "gpu": "tpu-v5e", "dtype": "fp32"}), "dtype")
    assert_names_field(api.post(TRAINING, {"flops": 1e20, "gpu": "h100-sxm", "mfu": 1.5}), "mfu")
    assert_names_field(api.post(TRAINING, {"flops": 1e20, "gpu": "h100-sxm", "mfu": 0}), "mfu")
    assert_names_field(api.post(TRAINING, {"flops": 1e20, "gpu": "h100"}), "gpu")
    assert_names_field(api.post("/api/v1/time/mfu", {"flops": 1e9, "seconds": 1}), "gpu")
    instant = {"flops": 1e9, "seconds": 0, "peak_flop_per_sec": 1e12}
    assert_names_field(api.post("/api/v1/time/mfu", instant), "seconds")
