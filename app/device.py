"""What the worker's device is, without torch: NVML for a GPU, /proc for the host.

The server must never create a CUDA context (it would hold GPU memory and pin the
process to a driver state), so it asks NVML, which talks to the driver directly.
"""

import os
import platform
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from app.accounting import cpu, hardware
from app.accounting.records import RECORD


@dataclass(slots=True)
class DeviceInfo:
    """A device jobs run on: one GPU, or the host's CPU where there is none."""

    kind: Literal["cuda", "cpu"]
    name: str
    """What torch.cuda.get_device_name (or the CPU's model name) reports."""
    catalogue_id: str | None
    """The hardware catalogue's entry for this device; null when it is not listed."""
    index: int | None
    """The GPU's index as NVML numbers it (PCI bus order); null for the CPU (`note` explains one
    that TALLY_GPUS names but NVML lacks)."""
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


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_peak_flop_per_sec() -> float | None:
    """This host's float32 datasheet peak (app/accounting/cpu.py) from /proc/cpuinfo's clock and
    flags over the cores this process may use; None where /proc/cpuinfo says neither."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None
    mhz = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", text, re.M)
    flags = re.search(r"^flags\s*:(.*)$", text, re.M)
    if mhz is None or flags is None:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cpu.peak_flop_per_sec(cores, float(mhz.group(1)) * 1e6, set(flags.group(1).split()))


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@contextmanager
def nvml() -> Iterator[Any]:
    """pynvml, initialised, or None where there is no library or no driver."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no GPU: nothing to describe
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


@dataclass(slots=True)
class GpuInfo:
    """One GPU as a fleet worker registers it (app/jobs/fleet.py): NVML's identity and limits."""

    index: int
    """NVML's index on its host (PCI bus order)."""
    uuid: str
    """NVML's "GPU-…" identifier: the GPU's name across hosts and over time."""
    name: str
    catalogue_id: str | None
    memory_bytes: int
    driver_version: str
    cuda_driver_version: str
    """The newest CUDA the driver supports, e.g. "13.0"."""
    compute_capability: str
    max_sm_clock_mhz: int | None
    max_memory_clock_mhz: int | None
    power_limit_watts: float | None
    """The enforced board power limit."""
    pci_bus_id: str | None

    __pydantic_config__ = RECORD


def optional(read, *args):
    """A reading some boards do not support (NVML_ERROR_NOT_SUPPORTED), else None."""
    try:
        return read(*args)
    except Exception:  # pynvml.NVMLError, whose class exists only where the library does
        return None


def inventory() -> list[GpuInfo]:
    """Every GPU NVML sees on this host, in NVML's order; empty without a driver."""
    with nvml() as lib:
        if lib is None:
            return []
        try:
            driver, cuda = _text(lib.nvmlSystemGetDriverVersion()), lib.nvmlSystemGetCudaDriverVersion()
            gpus = []
            for index in range(lib.nvmlDeviceGetCount()):
                h = lib.nvmlDeviceGetHandleByIndex(index)
                name = _text(lib.nvmlDeviceGetName(h))
                major, minor = lib.nvmlDeviceGetCudaComputeCapability(h)
                limit_mw = optional(lib.nvmlDeviceGetEnforcedPowerLimit, h)
                pci = optional(lib.nvmlDeviceGetPciInfo, h)
                gpus.append(GpuInfo(
                    index=index, uuid=_text(lib.nvmlDeviceGetUUID(h)), name=name,
                    catalogue_id=hardware.catalogue_id(name),
                    memory_bytes=int(lib.nvmlDeviceGetMemoryInfo(h).total),
                    driver_version=driver, cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
                    compute_capability=f"{major}.{minor}",
                    max_sm_clock_mhz=optional(lib.nvmlDeviceGetMaxClockInfo, h, lib.NVML_CLOCK_SM),
                    max_memory_clock_mhz=optional(lib.nvmlDeviceGetMaxClockInfo, h, lib.NVML_CLOCK_MEM),
                    power_limit_watts=None if limit_mw is None else limit_mw / 1e3,
                    pci_bus_id=None if pci is None else _text(pci.busId)))
            return gpus
        except lib.NVMLError:
            return []


def fleet_device(host: str, gpu: int | None) -> dict[str, Any]:
    """The row a dispatcher registers in the fleet (app/jobs/fleet.py): GPU `gpu` by its NVML UUID,
    or this host's CPU, "<host>:cpu", where there is no GPU (or NVML lacks the one named)."""
    found = next((g for g in inventory() if g.index == gpu), None) if gpu is not None else None
    if found is not None:
        row = asdict(found)
        row.pop("pci_bus_id")
        return row | {"device": row.pop("uuid"), "gpu_index": row.pop("index"), "host": host, "kind": "cuda"}
    return {"device": f"{host}:cpu", "host": host, "kind": "cpu", "name": cpu_name(),
            "memory_bytes": host_memory_bytes()}


def gpu_indices() -> list[int]:
    """The GPUs NVML numbers on this box (PCI bus order, as the children's CUDA_DEVICE_ORDER)."""
    with nvml() as lib:
        if lib is None:
            return []
        try:
            return list(range(lib.nvmlDeviceGetCount()))
        except lib.NVMLError:
            return []


def gpu_process_count(index: int) -> int | None:
    """Processes holding a compute context on GPU `index` (NVML's), or None where NVML cannot
    say. A count, not pids: inside a container NVML reports the host's pids."""
    with nvml() as lib:
        if lib is None:
            return None
        try:
            return len(lib.nvmlDeviceGetComputeRunningProcesses(lib.nvmlDeviceGetHandleByIndex(index)))
        except lib.NVMLError:
            return None


def served_gpus(configured: list[int] | None) -> list[int]:
    """The GPUs that get a dispatcher each and that jobs may name: TALLY_GPUS when set, else
    every GPU NVML sees; empty on a box without one."""
    return list(configured) if configured is not None else gpu_indices()


def _describe_gpu(lib: Any, index: int) -> DeviceInfo | None:
    try:
        count = lib.nvmlDeviceGetCount()
        if count <= index:
            return None
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        name = _text(lib.nvmlDeviceGetName(handle))
        mem = lib.nvmlDeviceGetMemoryInfo(handle)
        major, minor = lib.nvmlDeviceGetCudaComputeCapability(handle)
        cuda = lib.nvmlSystemGetCudaDriverVersion()
        return DeviceInfo(
            kind="cuda", name=name, catalogue_id=hardware.catalogue_id(name), index=index,
            memory_bytes=int(mem.total),
            memory_used_bytes=int(mem.used), gpu_count=count, compute_capability=f"{major}.{minor}",
            driver_version=_text(lib.nvmlSystemGetDriverVersion()),
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}", cpu_count=os.cpu_count() or 1,
            source="nvml", note=None)
    except lib.NVMLError:
        return None


def host() -> DeviceInfo:
    return DeviceInfo(
        kind="cpu", name=cpu_name(), catalogue_id=None, index=None, memory_bytes=host_memory_bytes(),
        memory_used_bytes=None, gpu_count=0, compute_capability=None, driver_version=None,
        cuda_driver_version=None, cpu_count=os.cpu_count() or 1, source="host",
        note="No CUDA device answered NVML: probes run on the CPU at small sizes, with MFU null.")


_cache: dict[int, tuple[float, DeviceInfo]] = {}
TTL_S = 5.0  # memory_used changes; the rest does not, and NVML init costs milliseconds


def describe(index: int = 0) -> DeviceInfo:
    """GPU `index` (as NVML numbers it), or the host when there is no such GPU."""
    now = time.monotonic()
    cached = _cache.get(index)
    if cached is None or now - cached[0] > TTL_S:
        with nvml() as lib:
            info = (_describe_gpu(lib, index) if lib is not None else None) or host()
        cached = _cache[index] = (now, info)
    return cached[1]


def describe_served(index: int) -> DeviceInfo:
    """GPU `index` as a dispatcher serves it: where NVML has no such GPU (TALLY_GPUS naming one
    the box lacks), the host, still under that index, saying so."""
    info = describe(index)
    if info.index == index:
        return info
    return replace(info, index=index, note=f"TALLY_GPUS names GPU {index}, which NVML does not report: "
                                           "its jobs run on the CPU.")


def gauges() -> dict[int, dict[str, float]]:
    """Live NVML readings of every GPU by index, units in the names; empty without a GPU."""
    readings: dict[int, dict[str, float]] = {}
    with nvml() as lib:
        if lib is None:
            return readings
        try:
            for index in range(lib.nvmlDeviceGetCount()):
                h = lib.nvmlDeviceGetHandleByIndex(index)
                mem = lib.nvmlDeviceGetMemoryInfo(h)
                readings[index] = {
                    "utilization_percent": float(lib.nvmlDeviceGetUtilizationRates(h).gpu),
                    "memory_used_bytes": float(mem.used), "memory_total_bytes": float(mem.total),
                    "temperature_celsius": float(lib.nvmlDeviceGetTemperature(h, lib.NVML_TEMPERATURE_GPU)),
                    "power_watts": lib.nvmlDeviceGetPowerUsage(h) / 1000,
                    "sm_clock_mhz": float(lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_SM)),
                }
        except lib.NVMLError:
            pass  # a GPU fallen off the bus: report the ones that answered
    return readings
