"""What the worker's device is, without torch: NVML for a GPU, /proc for the host.

The server must never create a CUDA context (it would hold GPU memory and pin the
process to a driver state), so it asks NVML, which talks to the driver directly.
"""

import os
import platform
import time
from dataclasses import dataclass
from typing import Literal

from app.accounting import hardware
from app.accounting.records import RECORD


@dataclass(slots=True)
class DeviceInfo:
    """The device jobs run on when they ask for device "auto"."""

    kind: Literal["cuda", "cpu"]
    name: str
    """What torch.cuda.get_device_name (or the CPU's model name) reports."""
    catalogue_id: str | None
    """The hardware catalogue's entry for this device; null when it is not listed."""
    memory_bytes: int | None
    """Total device memory (host memory on CPU), bytes."""
    memory_used_bytes: int | None
    gpu_count: int
    compute_capability: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    """The CUDA version the driver supports, e.g. "12.4"."""
    cpu_count: int
    source: Literal["nvml", "host"]
    """nvml when a GPU answered; host when there is none (or no NVML library)."""
    note: str | None

    __pydantic_config__ = RECORD


def catalogue_id(name: str) -> str | None:
    for acc in hardware.catalogue().values():
        if name in acc.device_names:
            return acc.id
    return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _nvml(index: int) -> DeviceInfo | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count <= index:
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(pynvml.nvmlDeviceGetName(handle))
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return DeviceInfo(
            kind="cuda", name=name, catalogue_id=catalogue_id(name), memory_bytes=int(mem.total),
            memory_used_bytes=int(mem.used), gpu_count=count, compute_capability=f"{major}.{minor}",
            driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}", cpu_count=os.cpu_count() or 1,
            source="nvml", note=None)
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def host() -> DeviceInfo:
    return DeviceInfo(
        kind="cpu", name=cpu_name(), catalogue_id=None, memory_bytes=host_memory_bytes(),
        memory_used_bytes=None, gpu_count=0, compute_capability=None, driver_version=None,
        cuda_driver_version=None, cpu_count=os.cpu_count() or 1, source="host",
        note="No CUDA device answered NVML: probes run on the CPU at small sizes, with MFU null.")


_cache: tuple[float, DeviceInfo] | None = None
TTL_S = 5.0  # memory_used changes; the rest does not, and NVML init costs milliseconds


def describe(index: int = 0) -> DeviceInfo:
    global _cache
    now = time.monotonic()
    if _cache is None or now - _cache[0] > TTL_S:
        _cache = (now, _nvml(index) or host())
    return _cache[1]


def gauges(index: int = 0) -> dict[str, float] | None:
    """Live NVML readings of one GPU, units in the names; None without a GPU."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # no library, no driver: no GPU to describe
        return None
    try:
        if pynvml.nvmlDeviceGetCount() <= index:
            return None
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        return {
            "utilization_percent": float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
            "memory_used_bytes": float(mem.used), "memory_total_bytes": float(mem.total),
            "temperature_celsius": float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
            "power_watts": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
            "sm_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
        }
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()
