"""What a GPU did while a probe ran, read from NVML in the probe's child (app/device.py reads
what the GPUs are): clocks, temperature, power, the total-energy counter and the clock-event
reasons, sampled from a thread. Without NVIDIA's driver the window is None and the probe runs on.

Units: bytes, MHz, degrees Celsius, watts and joules. NVML gives power in milliwatts and energy
in millijoules; they are converted once, here.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from app.device import nvml, optional

# NVML's clock-event ("throttle") reasons: bit -> the name a burn-in table shows. Source:
# nvml.h, nvmlClocksEventReason*. GpuIdle and SyncBoost are not slowdowns of a busy GPU.
REASONS: dict[int, str] = {
    0x001: "idle",
    0x002: "applications_clocks",  # clocks set below the maximum by an administrator
    0x004: "power_cap",  # software power cap: the board is at its power limit
    0x008: "hw_slowdown",  # hardware slowdown: high temperature or an external power brake
    0x010: "sync_boost",
    0x020: "thermal",  # software thermal slowdown: the GPU or memory above its limit
    0x040: "hw_thermal",
    0x080: "power_brake",
    0x100: "display_clocks",
}
SLOWDOWNS = frozenset(REASONS.values()) - {"idle", "sync_boost", "display_clocks"}
"""The reasons that explain a busy GPU running slow."""


def reasons(bits: int) -> list[str]:
    return [name for bit, name in REASONS.items() if bits & bit]


@dataclass
class Sample:
    t: float
    """Seconds since the window opened."""
    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    temperature_c: int | None
    power_watts: float | None
    reasons: int
    energy_mj: int | None = None
    """NVML's total-energy counter, millijoules since the driver loaded; None where missing."""


def _sample(lib, handle, t: float) -> Sample:
    power_mw = optional(lib.nvmlDeviceGetPowerUsage, handle)
    bits = optional(lib.nvmlDeviceGetCurrentClocksEventReasons, handle)
    clock, temperature = lib.nvmlDeviceGetClockInfo, lib.nvmlDeviceGetTemperature
    return Sample(t=t, sm_clock_mhz=optional(clock, handle, lib.NVML_CLOCK_SM),
                  memory_clock_mhz=optional(clock, handle, lib.NVML_CLOCK_MEM),
                  temperature_c=optional(temperature, handle, lib.NVML_TEMPERATURE_GPU),
                  power_watts=None if power_mw is None else power_mw / 1e3, reasons=bits or 0,
                  energy_mj=_energy_mj(lib, handle))


@dataclass
class Window:
    """What one GPU did over a timed window: samples every `interval_s` from a thread, and the
    total-energy counter read at both ends."""

    seconds: float = 0.0
    energy_joules: float | None = None
    energy_source: str | None = None
    """"counter" (nvmlDeviceGetTotalEnergyConsumption, Volta and later) or "power_x_time" (the
    sampled power integrated by the trapezoid rule where the counter is missing)."""
    samples: list[Sample] = field(default_factory=list)
    energy_start_mj: int | None = None
    """The counter read as the window opened (t = 0) and as it closed (t = seconds)."""
    energy_end_mj: int | None = None

    def summary(self) -> dict[str, Any]:
        """The window's figures, named as app/probes/sustained.py's Sustained names them."""
        def stats(values):
            values = [v for v in values if v is not None]
            if not values:
                return None
            return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}
        seen: dict[str, float] = {}  # reason -> the share of samples it was set in
        for s in self.samples:
            for name in reasons(s.reasons):
                seen[name] = seen.get(name, 0) + 1 / len(self.samples)
        watts = None if self.energy_joules is None or self.seconds <= 0 else self.energy_joules / self.seconds
        return {
            "energy_joules": self.energy_joules, "energy_source": self.energy_source,
            "average_power_watts": watts, "power_watts": stats(s.power_watts for s in self.samples),
            "sm_clock_mhz": stats(s.sm_clock_mhz for s in self.samples),
            "memory_clock_mhz": stats(s.memory_clock_mhz for s in self.samples),
            "temperature_c": stats(s.temperature_c for s in self.samples),
            "reasons": seen, "slowdowns": sorted(name for name in seen if name in SLOWDOWNS),
            "samples": len(self.samples),
        }


def _energy_mj(lib, handle) -> int | None:
    return optional(lib.nvmlDeviceGetTotalEnergyConsumption, handle)


def _integral(samples: list[Sample]) -> float | None:
    points = [(s.t, s.power_watts) for s in samples if s.power_watts is not None]
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False))


@contextmanager
def window(uuid: str | None, interval_s: float = 0.05) -> Iterator[Window | None]:
    """Sample the GPU `uuid` (NVML's "GPU-…" form) while the block runs; yields None where NVML or
    that GPU is missing, so a probe on the CPU runs the same code."""
    with nvml() as lib:
        handle = optional(lib.nvmlDeviceGetHandleByUUID, uuid) if lib is not None and uuid else None
        if handle is None:
            yield None
            return
        result, stop = Window(), threading.Event()

        def loop():
            while not stop.is_set():
                result.samples.append(_sample(lib, handle, time.perf_counter() - start))
                stop.wait(interval_s)

        before, start = _energy_mj(lib, handle), time.perf_counter()
        thread = threading.Thread(target=loop, name="nvml-sampler", daemon=True)
        thread.start()
        try:
            yield result
        finally:
            after, result.seconds = _energy_mj(lib, handle), time.perf_counter() - start
            stop.set()
            thread.join()
            result.energy_start_mj, result.energy_end_mj = before, after
            if before is not None and after is not None:
                result.energy_joules, result.energy_source = (after - before) / 1e3, "counter"
            else:
                result.energy_joules = _integral(result.samples)
                result.energy_source = None if result.energy_joules is None else "power_x_time"


def torch_uuid(device_index: int = 0) -> str | None:
    """NVML's name for torch's CUDA device `device_index` (CUDA_VISIBLE_DEVICES already applied)."""
    import torch

    if not torch.cuda.is_available():
        return None
    uuid = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
    return None if uuid is None else f"GPU-{uuid}"
