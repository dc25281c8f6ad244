"""Devices of one model whose matmul runs are slower than their siblings': a power-capped or
throttled GPU, a CPU host with slower memory. A model-wide calibration profile leaves their runs
out (a synchronous job runs at its slowest GPU's pace, but a plan for the healthy ones should not),
and each can have a profile of its own.

A device's rate, relative to the model's, is the median over the shapes it measured of
(the model's median seconds at that shape / the device's median seconds there); a device is slow
when its rate falls more than OUTLIER_FRACTION below the median of the devices' rates: the fleet
burn-in's rule (app/measured/burn_in.py), applied to the calibration's own matmul runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.accounting.calibration.profile import median
from app.measured.burn_in import OUTLIER_FRACTION

if TYPE_CHECKING:
    from app.jobs.job import Job


def slow_devices(jobs: list[Job], fraction: float = OUTLIER_FRACTION) -> dict[str, float]:
    """{device: how far below the model's median rate it ran} for each slow device among the matmul
    `jobs`' (ran_on_device); empty with fewer than two devices."""
    seconds: dict[str, dict[tuple, list[float]]] = {}
    for job in jobs:
        if job.ran_on_device is None:
            continue
        per = seconds.setdefault(job.ran_on_device, {})
        for p in job.result.points:
            per.setdefault((p.dtype, p.m, p.k, p.n), []).append(p.time.median)
    if len(seconds) < 2:
        return {}
    own = {d: {shape: median(ts) for shape, ts in shapes.items()} for d, shapes in seconds.items()}
    model: dict[tuple, float] = {}
    for shape in {s for shapes in own.values() for s in shapes}:
        model[shape] = median([shapes[shape] for shapes in own.values() if shape in shapes])
    rates = {d: median([model[s] / t for s, t in shapes.items()]) for d, shapes in own.items() if shapes}
    middle = median(list(rates.values()))
    return {d: 1 - r / middle for d, r in rates.items() if 1 - r / middle > fraction}
