"""The calibration's stated rule (app/measured/calibration.py): the best of the last 5 succeeded
runs on this device, with the run it came from; shown on the overview with a link."""

from app import device
from app.jobs.store import Store
from app.measured import calibration
from tests.support.bench_jobs import finished, here, matmul, matmul_point
from tests.support.results import result_for

# 2 * 256^3 = 33,554,432 FLOPs per 256-cube matmul. At a median of 0.3258 ms that is
# 0.103 TFLOP/s; at 4.112 ms it is 0.00816 TFLOP/s (the good and noisy runs).
CUBE = 256
GOOD_S, NOISY_S, OLD_FAST_S = 0.3258e-3, 4.112e-3, 0.03355e-3  # the old one: 1.00 TFLOP/s


def cube(median_s: float):
    return matmul([matmul_point(CUBE, CUBE, CUBE, "float32", median_s, median_s * 0.9)])


def test_the_best_of_the_last_five_runs_not_the_latest_nor_an_older_one(tmp_path):
    store = Store(tmp_path / "tally.db")
    old = finished(store, cube(OLD_FAST_S))  # fastest of all, but six runs ago: out of the window
    good = finished(store, cube(GOOD_S))
    for _ in range(4):
        finished(store, cube(NOISY_S))  # the newest four: a busy box
    peak = calibration.calibration(store, device.describe()).matmul["float32"]
    assert peak.job_id == good != old
    assert round(peak.flop_per_sec / 1e12, 3) == 0.103
    assert peak.runs_considered == 5 and (peak.m, peak.k, peak.n) == (CUBE, CUBE, CUBE)


def test_train_step_takes_the_best_recent_run_too(tmp_path):
    store = Store(tmp_path / "tally.db")
    step = {"environment": here(), "precision": "fp32", "model": "cruncher", "mfu": None}
    good = finished(store, result_for("train_step", achieved_flop_per_sec=2e11, tokens_per_sec=900.0, **step))
    finished(store, result_for("train_step", achieved_flop_per_sec=1e10, tokens_per_sec=45.0, **step))
    measured = calibration.calibration(store, device.describe()).train_step["fp32"]
    assert measured.job_id == good and measured.tokens_per_sec == 900.0


def test_a_fine_tunes_step_does_not_calibrate_training(tmp_path):
    """A LoRA step skips the frozen weights' gradients: its MFU is not a full training step's."""
    store = Store(tmp_path / "tally.db")
    step = {"environment": here(), "precision": "fp32", "model": "custom", "mfu": None}
    full = finished(store, result_for("train_step", achieved_flop_per_sec=1e10, **step))
    finished(store, result_for("train_step", achieved_flop_per_sec=2e11, mode="lora", **step))
    assert calibration.calibration(store, device.describe()).train_step["fp32"].job_id == full


def test_the_api_states_the_rule_and_the_overview_links_the_run(make_api):
    api = make_api()
    store = api.app.state.store
    good = finished(store, cube(GOOD_S))
    noisy = finished(store, cube(NOISY_S))
    calib = api.get("/api/v1/calibration").json()
    assert calib["matmul"]["float32"]["job_id"] == good
    assert "best of the last 5" in calib["rule"]
    schema = api.get("/openapi.json").json()["components"]["schemas"]["Calibration"]
    assert "best of the last 5" in schema["description"]
    page = api.get("/").text
    assert "0.103" in page and "0.00816" not in page
    assert f'href="/benchmarks/jobs/{good}"' in page and f'href="/benchmarks/jobs/{noisy}"' not in page
    assert "best of the last 5" in page
