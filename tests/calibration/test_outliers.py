"""A device slower than its model's others (a power-capped GPU): a model-wide profile leaves its
runs out and says so, and a profile of its own, built with `device`, times it; a calculator's
`calibration` names either (app/measured/outliers.py)."""

import pytest

from app.probes import campaign
from tests.calibration.test_profiles import line
from tests.support.api import assert_names_field
from tests.support.bench_jobs import finished, matmul, matmul_point

GPUS = ("GPU-aaaa", "GPU-bbbb", "GPU-cccc")


def store_matmul_on(store, device: str, slower: float = 1.0) -> int:
    points = [matmul_point(m, k, n, "float32", slower * line(m, k, n), slower * line(m, k, n))
              for m, k, n in campaign.MATMUL_SHAPES["cpu"]]
    return finished(store, matmul(points), device=device)


def test_a_slow_device_is_left_out_of_its_models_profile_and_has_its_own(make_api):
    api = make_api()
    store = api.app.state.store
    fast = [store_matmul_on(store, gpu) for gpu in GPUS[:2]]
    slow = store_matmul_on(store, GPUS[2], slower=1.25)  # 20% below the others' rate: past the 10% rule
    model = api.post("/api/v1/calibration/profiles").json()
    assert model["device"] is None
    assert {j for s in model["matmul"] for j in s["jobs"]} == set(fast)
    said = f"matmul job {slow}: ran on {GPUS[2]}, 20% slower than its model's other devices"
    assert model["left_out"] == [said]
    assert any(f.startswith(f"device {GPUS[2]} ran its matmul shapes 20% slower") for f in model["flags"])
    first = model["matmul"][0]
    assert first["seconds"] == pytest.approx(line(first["m"], first["k"], first["n"]))

    own = api.post("/api/v1/calibration/profiles", params={"device": GPUS[2]})
    assert own.status_code == 201, own.text
    own = own.json()
    assert own["device"] == GPUS[2] and own["device_model"] == model["device_model"]
    assert own["version"] == 2 and {j for s in own["matmul"] for j in s["jobs"]} == {slow}
    assert own["matmul"][0]["seconds"] == pytest.approx(1.25 * first["seconds"])
    listed = {p["id"]: p["device"] for p in api.get("/api/v1/calibration/profiles").json()}
    assert listed == {model["id"]: None, own["id"]: GPUS[2]}

    # `calibration` by the model's name takes the model-wide profile; by the device's, its own (neither
    # has a train step fit, and the refusal names the profile it resolved).
    for name, expected in ((model["device_model"], model), (GPUS[2], own)):
        refused = api.post("/api/v1/time/step", {"model": "gpt2", "batch_size": 1, "seq_len": 64,
                                                 "calibration": name})
        assert_names_field(refused, "calibration")
        label = f"profile {expected['id']} ({model['device_model']}"
        assert label + (f", device {GPUS[2]}" if expected is own else ",") in refused.json()["message"]

def test_without_siblings_nothing_is_an_outlier_and_an_unknown_device_is_refused_naming_device(make_api):
    api = make_api()
    store = api.app.state.store
    only = store_matmul_on(store, GPUS[0], slower=3.0)
    profile = api.post("/api/v1/calibration/profiles").json()
    assert profile["left_out"] == [] and {j for s in profile["matmul"] for j in s["jobs"]} == {only}
    assert_names_field(api.post("/api/v1/calibration/profiles", params={"device": "GPU-none"}), "device")
