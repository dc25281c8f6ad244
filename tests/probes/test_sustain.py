"""A probe's sustained run (sustain_s) and the NVML window it reads: the reasons' bits against
pynvml's own constants, the window's arithmetic on samples written by hand, the run's rates on
the CPU (where NVML is absent), its admission floor, and refusals that name the field."""

import pynvml
import pytest

from app import device
from app.bench import bandwidth, matmul, nvml, sustain, train_step
from app.probes.matmul import MatmulParams
from app.probes.registry import PROBES
from tests.support.api import assert_names_field

QUICK = {"device": "cpu", "warmup_s": 0.0, "measure_s": 0.005, "min_iters": 2, "max_iters": 3}


def quiet(*_):
    return None


def test_reason_bits_are_nvmls():
    assert nvml.reasons(pynvml.nvmlClocksEventReasonSwPowerCap) == ["power_cap"]
    assert nvml.reasons(pynvml.nvmlClocksEventReasonSwThermalSlowdown) == ["thermal"]
    assert nvml.reasons(pynvml.nvmlClocksEventReasonHwThermalSlowdown) == ["hw_thermal"]
    assert nvml.reasons(pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown) == ["power_brake"]
    assert nvml.reasons(pynvml.nvmlClocksEventReasonApplicationsClocksSetting) == ["applications_clocks"]
    assert nvml.reasons(pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonSyncBoost) == [
        "idle", "sync_boost"]
    assert "idle" not in nvml.SLOWDOWNS and {"power_cap", "thermal", "hw_slowdown"} <= nvml.SLOWDOWNS


def test_a_window_summarises_its_samples():
    """Four samples by hand: power cap in two of them, thermal in one, idle in one."""
    cap, hot, idle = (pynvml.nvmlClocksEventReasonSwPowerCap, pynvml.nvmlClocksEventReasonSwThermalSlowdown,
                      pynvml.nvmlClocksEventReasonGpuIdle)
    w = nvml.Window(seconds=2.0, energy_joules=1200.0, energy_source="counter", samples=[
        nvml.Sample(0.0, 1980, 3201, 40, 500.0, idle), nvml.Sample(0.5, 1500, 3201, 60, 700.0, cap),
        nvml.Sample(1.0, 1400, 3201, 70, 700.0, cap | hot), nvml.Sample(1.5, 1600, None, 65, 600.0, 0)])
    s = w.summary()
    assert s["average_power_watts"] == 600.0  # 1200 J over 2 s
    assert s["power_watts"] == {"mean": 625.0, "min": 500.0, "max": 700.0}
    assert s["sm_clock_mhz"] == {"mean": 1620.0, "min": 1400, "max": 1980}
    assert s["memory_clock_mhz"] == {"mean": 3201.0, "min": 3201, "max": 3201}  # the missing reading left out
    assert s["reasons"] == pytest.approx({"idle": 0.25, "power_cap": 0.5, "thermal": 0.25})
    assert s["slowdowns"] == ["power_cap", "thermal"] and s["samples"] == 4


def test_power_integrates_by_the_trapezoid_rule_where_the_counter_is_missing():
    samples = [nvml.Sample(0.0, None, None, None, 100.0, 0), nvml.Sample(1.0, None, None, None, 200.0, 0),
               nvml.Sample(3.0, None, None, None, None, 0), nvml.Sample(4.0, None, None, None, 300.0, 0)]
    assert nvml._integral(samples) == 150.0 + 3 * 250.0  # (100+200)/2 x 1 s, then (200+300)/2 x 3 s
    assert nvml._integral(samples[:1]) is None


def test_without_nvml_a_window_is_none_and_the_inventory_empty():
    """This machine has no NVIDIA driver: the probes must run on as before."""
    with nvml.window("GPU-00000000-0000-0000-0000-000000000000") as w:
        assert w is None
    assert device.inventory() == []


def test_a_sustained_run_counts_every_iteration_it_times():
    calls = []
    s = sustain.run(device=__import__("torch").device("cpu"), work=lambda: calls.append(1), seconds=0.05,
                    flops=1000, bytes_moved=10)
    assert s.iterations == len(calls) - 1  # the first call paces the chunks, outside the window
    assert s.seconds >= 0.05 and s.seconds_per_iteration == s.seconds / s.iterations
    assert s.flop_per_sec == 1000 * s.iterations / s.seconds
    assert s.bytes_per_sec == 10 * s.iterations / s.seconds
    assert s.energy_joules is None and s.flop_per_sec_per_watt is None and s.samples == 0


@pytest.mark.parametrize("probe", ["matmul", "bandwidth", "train_step"])
def test_the_burn_in_probes_sustain_their_main_work(probe):
    shapes = [{"m": 64, "k": 64, "n": 64}, {"m": 128, "k": 64, "n": 64}]
    extra = {"matmul": {"sweep": "custom", "shapes": shapes, "dtypes": ["float32"]}, "bandwidth": {},
             "train_step": {"model": {"kind": "cruncher", "dim": 32, "num_layers": 2}, "batch_size": 2,
                            "seq_len": 8, "steps": 1, "warmup_steps": 1}}[probe]
    run = {"matmul": matmul.run, "bandwidth": bandwidth.run, "train_step": train_step.run}[probe]
    r = run(QUICK | extra | {"sustain_s": 0.05}, quiet)
    s = r["sustained"]
    assert s["seconds"] >= 0.05 and s["iterations"] >= 1
    if probe == "matmul":  # the best shape's FLOPs, 2mkn
        best = r["best"]["float32"]
        flops = 2 * best["m"] * best["k"] * best["n"]
        assert s["flop_per_sec"] == pytest.approx(flops * s["iterations"] / s["seconds"])
    elif probe == "bandwidth":  # a copy reads and writes its buffer
        assert s["bytes_per_sec"] == pytest.approx(2 * r["size_bytes"] * s["iterations"] / s["seconds"])
    else:
        assert s["flop_per_sec"] == pytest.approx(r["flops_per_step"] * s["iterations"] / s["seconds"])
    assert s["energy_joules"] is None  # no NVML here
    assert run(QUICK | extra, quiet)["sustained"] is None


def test_admission_counts_the_sustained_seconds():
    params = MatmulParams.model_validate({"sustain_s": 30, "warmup_s": 0.1, "sweep": "quick"})
    seconds, name = PROBES["matmul"].least_seconds(params, "cpu")
    plain = PROBES["matmul"].least_seconds(params.model_copy(update={"sustain_s": 0}), "cpu")
    assert seconds == plain[0] + 30 and name == "params.sustain_s"


@pytest.mark.parametrize("value", [-1, 3601, "long"])
def test_a_bad_sustain_s_is_refused_by_name(make_api, value):
    api = make_api()
    response = api.post("/api/v1/jobs", {"probe": "bandwidth", "params": {"sustain_s": value}})
    assert_names_field(response, "params.sustain_s")


def test_a_probe_without_a_sustained_run_refuses_sustain_s(make_api):
    response = make_api().post("/api/v1/jobs", {"probe": "transfer", "params": {"sustain_s": 5}})
    assert_names_field(response, "params.sustain_s")
