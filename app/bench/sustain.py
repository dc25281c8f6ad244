"""A probe's main work run back to back for `sustain_s` seconds, while NVML watches the GPU
(app/bench/nvml.py): the rate a GPU holds once it reaches its power and thermal limits, and the
energy it spends per iteration. The timed sweep before it measures bursts of under a second,
after L2 flushes; this is the figure a burn-in compares between GPUs of one model."""

import time
from collections.abc import Callable

import torch

from app.bench import energy as energy_rule
from app.bench import nvml
from app.bench.timer import sync
from app.probes.sustained import Range, Sustained

CHUNK_S = 0.05
"""Seconds of work queued between synchronisations: enough to keep the GPU fed between Python's
launches, short enough to stop within a chunk of the time asked."""


SOURCE = {"energy_counter": "counter", "power_x_time": "power_x_time"}
"""Energy.method -> Sustained.energy_source, whose older names stored results keep."""


def _range(value: dict | None) -> Range | None:
    return None if value is None else Range(**value)


def run(device: torch.device, work: Callable[[], object], seconds: float, *, flops: int | None = None,
        bytes_moved: int | None = None) -> Sustained:
    """`work` run back to back for `seconds` (at least one chunk); `flops` or `bytes_moved` are one
    run's, for the rates."""
    start = time.perf_counter()
    work()
    sync(device)
    chunk = max(1, int(CHUNK_S / max(time.perf_counter() - start, 1e-9)))
    uuid = nvml.torch_uuid(device.index or 0) if device.type == "cuda" else None
    with nvml.window(uuid) as window:
        iterations, start = 0, time.perf_counter()
        while True:
            for _ in range(chunk):
                work()
            sync(device)
            iterations += chunk
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
    seen = window.summary() if window is not None else {}
    # The joules by the probes' one rule (app/bench/energy.py), so a burn-in part and the timed
    # measurement's Stats.energy read the counter the same way.
    record = None if window is None else energy_rule.per_unit(
        energy_rule.of_window(window, iterations), flops=flops, bytes_moved=bytes_moved)
    energy = None if record is None else record.joules
    done = None if flops is None else flops * iterations
    return Sustained(
        seconds=elapsed, iterations=iterations, seconds_per_iteration=elapsed / iterations,
        flop_per_sec=None if done is None else done / elapsed,
        bytes_per_sec=None if bytes_moved is None else bytes_moved * iterations / elapsed,
        energy_joules=energy,
        energy_source=None if record is None else SOURCE[record.method],
        average_power_watts=None if record is None else record.watts,
        joules_per_iteration=None if energy is None else energy / iterations,
        flop_per_sec_per_watt=None if done is None or not energy or energy <= 0 else done / energy,
        power_watts=_range(seen.get("power_watts")), sm_clock_mhz=_range(seen.get("sm_clock_mhz")),
        memory_clock_mhz=_range(seen.get("memory_clock_mhz")),
        temperature_c=_range(seen.get("temperature_c")),
        reasons=seen.get("reasons", {}), slowdowns=seen.get("slowdowns", []), samples=seen.get("samples", 0),
        energy=record)
