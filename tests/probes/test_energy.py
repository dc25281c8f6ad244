"""The energy rule (app/bench/energy.py) over sample sequences shaped as NVML gives them on an
H200 (docs/measurements/README.md: the total-energy counter changed every 100 ms, polled every
millisecond; a bf16 matmul held the board near its 700 W cap), and a CPU probe's result, which
has no NVML and so carries no energy figure, only the reason."""

import pytest

from app.bench import energy, matmul, nvml, train_step
from app.bench.generate import _per_step
from app.probes.energy import Energy
from app.probes.results import Stats

QUICK = {"warmup_s": 0.01, "measure_s": 0.01, "min_iters": 2, "max_iters": 3}
PERIOD_S = 0.1
"""The H200's counter period (docs/measurements/sustained-h200.json: median_period_s 0.1002)."""


def counter_reads(watts: float, seconds: float, interval_s: float, phase_s: float, start_mj: int = 10**9):
    """A counter that adds watts x PERIOD_S at phase_s, phase_s + PERIOD_S, ...; read at t = 0,
    every interval_s, and at the window's end, as app/bench/nvml.py reads it."""
    def value(t: float) -> int:
        steps = 0 if t < phase_s else int((t - phase_s) / PERIOD_S + 1e-9) + 1
        return start_mj + round(steps * watts * PERIOD_S * 1e3)
    times = [i * interval_s for i in range(int(seconds / interval_s + 1e-9) + 1) if i * interval_s < seconds]
    return [(t, value(t)) for t in times] + [(seconds, value(seconds))]


def test_a_counter_moving_every_100_ms_gives_the_boards_watts_not_its_steps():
    """700 W for 0.45 s is 315 J. The counter's ends alone would read the five 70 J steps at
    37, 137, ..., 437 ms: 350 J, 11% high. Its rate between the first and last step is 700 W."""
    reads = counter_reads(700.0, 0.45, 0.05, phase_s=0.037)  # 50 ms samples, as the burn-in's
    assert (reads[-1][1] - reads[0][1]) / 1e3 == pytest.approx(350.0)  # what the ends say
    power = [(t, 700.0) for t, _ in reads[:-1]]
    e = energy.rule(0.45, reads, power, iterations=9)
    assert e.method == "energy_counter"
    assert e.counter_updates == 5
    assert e.watts == pytest.approx(700.0)
    assert e.joules == pytest.approx(315.0)
    assert e.joules_per_iteration == pytest.approx(35.0)  # 315 J / 9 runs
    assert e.seconds_per_iteration == pytest.approx(0.05)


def test_10_ms_samples_time_the_counters_steps_and_the_window_is_what_is_charged():
    reads = counter_reads(690.0, 0.5, 0.01, phase_s=0.004)
    e = energy.rule(0.5, reads, [(t, 600.0) for t, _ in reads], iterations=100)
    assert e.method == "energy_counter" and e.counter_updates == 5
    assert e.watts == pytest.approx(690.0)  # the counter, not the lagging 600 W power reading
    assert e.joules == pytest.approx(345.0)  # 690 W x 0.5 s
    assert e.samples == len(reads)


def test_a_window_shorter_than_the_counters_period_falls_back_to_power_x_time():
    """0.25 s sees two steps at most: too few. Power ramps 100 -> 700 W linearly over 0.2 s
    (samples every 50 ms), then holds: trapezoids give (0.2 x 400 + 0.05 x 700) / 0.25 = 460 W."""
    reads = counter_reads(700.0, 0.25, 0.05, phase_s=0.06)
    assert sum(1 for a, b in zip(reads, reads[1:], strict=False) if a[1] != b[1]) == 2
    power = [(0.0, 100.0), (0.05, 250.0), (0.10, 400.0), (0.15, 550.0), (0.20, 700.0), (0.25, 700.0)]
    e = energy.rule(0.25, reads, power, iterations=5)
    assert e.method == "power_x_time"
    assert e.counter_updates == 2
    assert e.watts == pytest.approx(460.0)
    assert e.joules == pytest.approx(115.0)  # 460 W x 0.25 s
    assert e.joules_per_iteration == pytest.approx(23.0)


def test_a_missing_counter_falls_back_to_power_x_time():
    power = [(0.0, 300.0), (0.5, 500.0), (1.0, 300.0)]
    e = energy.rule(1.0, [(0.0, None), (0.5, None), (1.0, None)], power, iterations=4)
    assert (e.method, e.counter_updates) == ("power_x_time", None)
    assert e.watts == pytest.approx(400.0)  # (0.5 x 400 + 0.5 x 400) / 1
    assert e.joules_per_iteration == pytest.approx(100.0)


def test_a_counter_that_goes_backwards_is_not_used():
    reads = [(0.0, 5000), (0.1, 6000), (0.2, 1000), (0.3, 2000), (0.4, 3000), (0.5, 4000)]
    e = energy.rule(0.5, reads, [(0.0, 200.0), (0.5, 200.0)], iterations=1)
    assert e.method == "power_x_time" and e.joules == pytest.approx(100.0)


def test_no_readings_at_all_give_no_figure():
    assert energy.rule(0.5, [(0.0, None)], [(0.1, None)], iterations=3) is None
    assert energy.power_watts([(0.2, 250.0)]) == 250.0  # one sample is the window's watts


def test_per_unit_figures_match_the_h200_burn_in_by_hand():
    """docs/measurements/README.md: matmul bf16 1024x4096x4096 at 0.0363 J/iter is 947 GFLOP/s
    per W; a gpt2 step of 8 x 1024 tokens at 21.9 J/step is 2.67 mJ per token."""
    def record(j):
        return Energy(joules=j * 10, seconds=1.0, watts=j * 10, method="energy_counter", samples=100,
                      counter_updates=10, iterations=10, seconds_per_iteration=0.1, joules_per_iteration=j)
    mm = energy.per_unit(record(0.0363), flops=2 * 1024 * 4096 * 4096)
    assert mm.flop_per_joule / 1e9 == pytest.approx(947, rel=1e-3)
    step = energy.per_unit(record(21.9), tokens=8 * 1024)
    assert step.joules_per_token == pytest.approx(21.9 / 8192)
    copy = energy.per_unit(record(0.296), bytes_moved=2 * 2**30)  # the 1 GiB copy reads and writes
    assert copy.bytes_per_joule / 1e9 == pytest.approx(7.2550, rel=1e-4)
    assert energy.per_unit(None, tokens=3) is None


def test_a_decode_runs_energy_becomes_a_steps_and_a_tokens():
    """A timed decode run is 4 steps of a batch of 8: 0.8 J a run is 0.2 J a step, 25 mJ a token."""
    run = Energy(joules=8.0, seconds=0.5, watts=16.0, method="energy_counter", samples=50, counter_updates=5,
                 iterations=10, seconds_per_iteration=0.05, joules_per_iteration=0.8)
    timed = Stats(median=0.04, p20=0.04, p80=0.04, mean=0.04, best=0.04, iterations=5, energy=run)
    per = _per_step(timed, 4, 8)
    assert per.median == pytest.approx(0.01)
    e = per.energy
    assert (e.iterations, e.joules) == (40, 8.0)
    assert e.joules_per_iteration == pytest.approx(0.2)
    assert e.seconds_per_iteration == pytest.approx(0.0125)
    assert e.joules_per_token == pytest.approx(0.025)


def test_a_cpu_probe_says_there_is_no_nvml_and_carries_no_figure():
    result = matmul.run(QUICK | {"device": "cpu", "sweep": "custom", "shapes": [{"m": 32, "k": 32, "n": 32}],
                                 "dtypes": ["float32"], "sustain_s": 0.01}, lambda *_: None)
    note = result["environment"]["energy_note"]
    assert "CPU" in note and "NVML" in note and "null" in note
    assert all(p["time"]["energy"] is None for p in result["points"])
    assert result["sustained"]["energy"] is None and result["sustained"]["energy_joules"] is None
    step = train_step.run(QUICK | {"device": "cpu", "model": {"kind": "cruncher", "dim": 16, "num_layers": 1},
                                   "batch_size": 2, "steps": 2}, lambda *_: None)
    assert "NVML" in step["environment"]["energy_note"]
    assert [step[k]["energy"] for k in ("step", "forward", "backward", "optimizer_step")] == [None] * 4


def test_the_samplers_window_feeds_the_rule_with_its_two_end_reads():
    """nvml.Window as the sampler fills it: the counter at both ends and in each sample."""
    reads = counter_reads(500.0, 0.6, 0.05, phase_s=0.02)
    samples = [nvml.Sample(t=t, sm_clock_mhz=1980, memory_clock_mhz=3201, temperature_c=50, power_watts=480.0,
                           reasons=0, energy_mj=mj) for t, mj in reads[1:-1]]
    window = nvml.Window(seconds=0.6, samples=samples, energy_start_mj=reads[0][1],
                         energy_end_mj=reads[-1][1])
    e = energy.of_window(window, iterations=12)
    assert (e.method, e.counter_updates, e.samples) == ("energy_counter", 6, 11)
    assert e.joules == pytest.approx(300.0)  # 500 W x 0.6 s
    assert e.joules_per_iteration == pytest.approx(25.0)


def test_cpu_collectives_name_no_nvml_and_sum_no_ranks():
    """Two gloo ranks: no rank has a GPU to read, so no point carries a per-rank or summed figure."""
    from app.bench import collectives

    r = collectives.run({"device": "cpu", "collectives": ["all_reduce"], "sizes_bytes": [4096],
                         "iterations": 2, "warmup_iterations": 1}, lambda *_: None)
    assert "CPU" in r["environment"]["energy_note"]
    assert [(p["time"]["energy"], p["joules_per_run_all_ranks"], p["watts_all_ranks"]) for p in r["points"]] \
        == [(None, None, None)]
