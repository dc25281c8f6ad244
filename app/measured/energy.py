"""The energy a stored job measured, and the fleet device it was measured on: what /metrics counts
per job and per device (app/ops/fleet_metrics.py).

What is summed. A probe measures energy in windows of its own (app/bench/energy.py): its work run
back to back for half a second or more, while NVML reads the GPU board's energy counter (or its
power, integrated over time). Each window's Energy (app/probes/energy.py) carries its joules, the
window's average watts x its seconds, which is iterations x joules per iteration. A sustained run
(app/probes/sustained.py) is such a window too; one stored before it carried an Energy has its
energy_joules, NVML's energy over its seconds. A job's energy here is the sum of its distinct
windows: the energy its measurements drew on the GPU its child saw as cuda:0 (rank 0's, for a job
on several GPUs: the windows are rank 0's own), not the job's whole run (warm-ups, the timed
iterations, start-up), not the GPU's idle time between jobs, and not the host's CPUs, memory or
fans. The collectives' and data-parallel steps' joules summed over every rank's GPU are left out:
they are no one device's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from app.probes.energy import Energy
from app.probes.sustained import Sustained

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.fleet import Device
    from app.jobs.job import Job


def joules(result: Any) -> float | None:
    """The joules of the distinct energy windows in `result` (any probe's), summed; None when it
    holds none (a CPU, a GPU without NVML, a result from before energy was recorded).

    A window stored in two places counts once: the matmul probe's `best` repeats one of its
    `points`, time and energy included. Windows are told apart by their figures (joules, seconds,
    iterations, NVML samples), which two windows measured apart never share to the last bit."""
    windows: dict[tuple, float] = {}
    _windows(result, windows)
    return sum(windows.values()) if windows else None


def _windows(value: Any, found: dict[tuple, float]) -> None:
    if isinstance(value, Energy):
        key = ("window", value.joules, value.seconds, value.iterations, value.samples)
        found.setdefault(key, value.joules)
    elif isinstance(value, Sustained) and value.energy is None:
        if value.energy_joules is not None:  # stored before a sustained run carried its Energy
            found.setdefault(("sustained", value.energy_joules, value.seconds, value.iterations),
                             value.energy_joules)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _windows(getattr(value, field.name), found)
    elif isinstance(value, list | tuple):
        for item in value:
            _windows(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _windows(item, found)


def measured_on(job: Job, devices: Iterable[Device]) -> str | None:
    """The fleet device whose GPU `job`'s energy windows were read on: the GPU its child saw as
    cuda:0, the first of ran_on_gpus, among the devices of the box its dispatcher registered on;
    that dispatcher's own device (ran_on_device) where the fleet lists no such GPU, or the job ran
    on none. None for a job run by a dispatcher outside the fleet."""
    if job.ran_on_device is None:
        return None
    listed = list(devices)
    host = next((d.host for d in listed if d.device == job.ran_on_device), None)
    if job.ran_on_gpus and host is not None:
        first = job.ran_on_gpus[0]
        found = next((d.device for d in listed
                      if d.host == host and d.kind == "cuda" and d.gpu_index == first), None)
        if found is not None:
            return found
    return job.ran_on_device
