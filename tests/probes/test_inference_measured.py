"""flops_efficiency and memory_efficiency "measured": this device's best matmul (its MFU at the
compute dtype) and best bandwidth copy (its share of the catalogue's bandwidth), by the
calibration's rule, with the jobs they came from; refused, naming the field, until measured or
for another GPU. An H100's identity stands in for this CPU box, as test_jobs_api does."""

from app import device
from app.probes.results import Environment
from tests.support.api import assert_names_field
from tests.support.bench_jobs import matmul, matmul_point
from tests.support.jobs import H100
from tests.support.results import minimal, result_for

TIME = "/api/v1/inference/time"
BODY = {"model": "llama3-8b", "gpu": "h100-sxm", "prompt_tokens": 512, "output_tokens": 64,
        "flops_efficiency": "measured", "memory_efficiency": "measured"}


def _finish(store, result) -> int:
    job = store.submit(probe=result.probe, params={}, timeout_s=60, limit=10, device="cuda")
    store.claim(worker_id="w")
    store.finish(job.id, status="succeeded", result=result)
    return job.id


def test_measured_efficiencies_come_from_this_devices_probes(make_api, monkeypatch):
    api = make_api()
    assert_names_field(api.post(TIME, BODY), "flops_efficiency")  # not on an H100 at all
    monkeypatch.setattr(device, "describe", lambda index=0: H100)
    assert_names_field(api.post(TIME, BODY), "flops_efficiency")  # nothing measured yet
    store = api.app.state.store
    here = minimal(Environment, device="cuda", device_name=H100.name, catalogue_id="h100-sxm")
    point = matmul_point(8192, 8192, 8192, "bfloat16", 2e-3, 1.9e-3)
    point.mfu = point.flop_per_sec / 989.5e12  # 2 x 8192^3 / 2 ms = 550 TFLOP/s: 0.556 of the peak
    matmul_job = _finish(store, matmul([point], here))
    assert_names_field(api.post(TIME, BODY), "memory_efficiency")  # no bandwidth run yet
    copy = result_for("bandwidth", environment=here, gb_per_sec=2680.0, percent_of_catalogue=80.0)
    copy_job = _finish(store, copy)
    answer = api.ok(TIME, BODY)
    assert answer["flops_efficiency"] == point.mfu
    assert f"matmul job {matmul_job}" in answer["flops_efficiency_source"]
    assert answer["memory_efficiency"] == 0.8
    assert f"bandwidth job {copy_job}" in answer["memory_efficiency_source"]
    # The same request with the numbers given gives the same times.
    given = api.ok(TIME, BODY | {"flops_efficiency": point.mfu, "memory_efficiency": 0.8})
    assert given["inter_token_latency_s"] == answer["inter_token_latency_s"]
    assert given["flops_efficiency_source"] == "given"
    assert api.ok(TIME, {k: v for k, v in BODY.items() if "efficiency" not in k})[
        "memory_efficiency_source"] == "default"
    assert_names_field(api.post(TIME, BODY | {"gpu": "a100-80gb"}), "flops_efficiency")
