"""The burn-in probe on the CPU and the comparison of a campaign's GPUs: medians, shortfalls
and flags worked by hand, the reason NVML gave, and the models' leaderboard."""

import pytest

from app.bench import burn_in
from app.measured.burn_in import METRICS, Reading, compare, leaderboard, reading
from app.probes.burn_in import BURN_IN_SIZES, BurnInParams, parts
from app.probes.registry import PROBES, RESULTS
from tests.support.api import assert_names_field

T = 1e12
QUICK = {"device": "cpu", "warmup_s": 0.01, "measure_s": 0.02, "min_iters": 2, "max_iters": 3,
         "sustain_s": 0.2}


def gpu(name: str, matmul: float, bandwidth: float = 4.2e12, step: float = 168 * T, *,
        model: str = "NVIDIA H200", slowdowns: dict | None = None) -> Reading:
    return Reading(
        job_id=len(name), host="box", gpu=name, model=model, catalogue_id="h200", finished_at=None,
        metrics={"matmul_flop_per_sec": matmul, "bandwidth_bytes_per_sec": bandwidth,
                 "train_step_flop_per_sec": step},
        watts={}, joules_per_iteration={}, flop_per_sec_per_watt={"matmul": matmul / 690},
        slowdowns={"matmul": [], "bandwidth": [], "train_step": []} | (slowdowns or {}),
        matmul_burst_flop_per_sec=matmul * 1.1, matmul_peak_flop_per_sec=989.5 * T,
        bandwidth_catalogue_bytes_per_sec=4.8e12, train_step_peak_flop_per_sec=989.5 * T)


def test_the_gpu_14_percent_below_its_models_median_is_flagged_with_its_reason():
    fleet = [gpu("a", 650 * T), gpu("b", 655 * T), gpu("c", 560 * T, slowdowns={"matmul": ["power_cap"]}),
             gpu("d", 652 * T)]
    rows = compare(fleet)
    median = (650 + 652) / 2 * T  # four values: the mean of the middle two
    assert all(r.median["matmul_flop_per_sec"] == median for r in rows)
    c = rows[2]
    assert c.flagged and c.worst == "matmul_flop_per_sec" and c.reasons == ["power_cap"] and c.siblings == 4
    assert c.shortfall == pytest.approx(1 - 560 / 651)
    assert [r.flagged for r in rows] == [False, False, True, False]
    assert compare(fleet, outlier_fraction=0.15)[2].flagged is False  # 14% is within 15%


def test_the_worst_metric_names_the_run_and_its_reason():
    fleet = [gpu("a", 650 * T), gpu("b", 650 * T, bandwidth=3.3e12, slowdowns={"bandwidth": ["thermal"],
                                                                                "matmul": ["power_cap"]}),
             gpu("c", 650 * T)]
    b = compare(fleet)[1]
    assert b.worst == "bandwidth_bytes_per_sec" and b.reasons == ["thermal"]
    assert b.ratio["bandwidth_bytes_per_sec"] == pytest.approx(3.3 / 4.2)
    assert b.ratio["matmul_flop_per_sec"] == 1.0


def test_a_model_alone_is_never_flagged_and_models_compare_apart():
    fleet = [gpu("a", 650 * T), gpu("b", 640 * T), gpu("h100", 400 * T, model="NVIDIA H100 80GB HBM3")]
    rows = compare(fleet)
    assert [r.flagged for r in rows] == [False, False, False]
    assert rows[2].siblings == 1 and rows[2].median["matmul_flop_per_sec"] == 400 * T
    assert rows[0].median["matmul_flop_per_sec"] == 645 * T


def test_a_missing_figure_is_left_out_of_the_median():
    fleet = [gpu("a", 650 * T), gpu("b", 600 * T), gpu("c", 640 * T)]
    fleet[2].metrics["bandwidth_bytes_per_sec"] = None
    rows = compare(fleet)
    assert rows[0].median["bandwidth_bytes_per_sec"] == 4.2e12
    assert rows[2].ratio["bandwidth_bytes_per_sec"] is None


def test_the_leaderboard_puts_each_model_beside_the_catalogue():
    board = leaderboard(compare([gpu("a", 650 * T), gpu("b", 660 * T), gpu("c", 500 * T),
                                 gpu("h100", 400 * T, bandwidth=3.0e12, model="NVIDIA H100")]))
    h200, h100 = board
    assert (h200.model, h200.gpus, h200.flagged) == ("NVIDIA H200", 3, 1)
    assert h200.matmul_flop_per_sec == 650 * T and h200.matmul_fraction_of_peak == pytest.approx(650 / 989.5)
    assert h200.matmul_burst_flop_per_sec == pytest.approx(650 * T * 1.1)
    assert h200.bandwidth_fraction_of_catalogue == pytest.approx(4.2 / 4.8)
    assert h200.train_step_mfu == pytest.approx(168 / 989.5)
    assert h100.model == "NVIDIA H100" and h100.matmul_flop_per_sec == 400 * T


def test_the_burn_in_probe_runs_the_three_sustained_on_the_cpu():
    r = RESULTS.validate_python(burn_in.run(QUICK, lambda *_: None))
    assert r.probe == "burn_in" and r.gpu_uuid is None
    assert r.matmul.best["float32"] and r.matmul.sustained.seconds >= 0.2
    assert r.bandwidth.sustained.bytes_per_sec > 0 and r.train_step.sustained.flop_per_sec > 0
    assert r.train_step.model == "cruncher"
    got = reading(r, job_id=7, host="box-3", finished_at=1.0)
    assert got.gpu == "box-3:cpu" and got.model == r.environment.device_name
    assert got.metrics == {"matmul_flop_per_sec": r.matmul.sustained.flop_per_sec,
                           "bandwidth_bytes_per_sec": r.bandwidth.sustained.bytes_per_sec,
                           "train_step_flop_per_sec": r.train_step.sustained.flop_per_sec}
    assert set(got.metrics) == set(METRICS)


def test_every_gpu_runs_the_same_parts():
    p = BurnInParams.model_validate({"sustain_s": 12})
    cuda = parts(p, "cuda")
    assert cuda.matmul.dtypes == ["bfloat16"] and cuda.matmul.sweep == "quick" and cuda.matmul.sustain_s == 12
    assert cuda.train_step.precision == "bf16_autocast" and cuda.bandwidth.sustain_s == 12
    assert parts(BurnInParams(), "cpu").matmul.sustain_s == BURN_IN_SIZES["cpu"].sustain_s
    seconds, name = PROBES["burn_in"].least_seconds(p, "cuda")
    assert seconds >= 3 * 12 and name == "params.sustain_s"


@pytest.mark.parametrize(("field", "value"), [("sustain_s", 0), ("sustain_s", -1), ("dtype", "int4")])
def test_bad_burn_in_params_are_refused_by_name(make_api, field, value):
    response = make_api().post("/api/v1/jobs", {"probe": "burn_in", "params": {field: value}})
    assert_names_field(response, f"params.{field}")


def test_tally_probe_burn_in_prints_the_three_sustained_runs(tmp_path):
    from tests.support.cli import tally

    done = tally("probe", "burn_in", "--sustain-s", "0.1", "--warmup-s", "0.01", "--measure-s", "0.02",
                 cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "burn_in on" in out and "device copy" in out and "train step cruncher" in out
    assert out.count("no NVML") == 3 and "TFLOP/s" in out and "GB/s" in out
