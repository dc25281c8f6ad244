"""Jobs run for real: the fault child's command, its processes, and what the rows say of them."""

import itertools
import sys
from pathlib import Path

from app import device
from app.jobs.dispatcher import Dispatcher
from app.jobs.job import Job
from tests.support.api import Api

FAULT_ARGV = [sys.executable, "-m", "tests.support.fault_child"]


def alive(pid: int) -> bool:
    """Running, not merely a zombie that nobody has reaped yet (a container's init may not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def overlapping(jobs: list[Job]) -> list[tuple[int, int]]:
    """The pairs of ended jobs whose runs, [started_at, finished_at] from their rows, share a moment.

    A dispatcher claims its next job only after recording the last one's end, so the rows alone
    show whether two ever ran at once, however briefly: no sampling that could miss it.
    """
    return [(a.id, b.id) for a, b in itertools.combinations(jobs, 2)
            if a.started_at < b.finished_at and b.started_at < a.finished_at]


def run_all(api: Api) -> None:
    """Drain the queue with a real dispatcher and real children."""
    dispatcher = Dispatcher(api.app.state.store, "test-worker")
    while dispatcher.run_once():
        pass


# An H100 as NVML describes it, for a result that stands in for a GPU run.
H100 = device.DeviceInfo(
    kind="cuda", name="NVIDIA H100 80GB HBM3", catalogue_id="h100-sxm", index=0, memory_bytes=80 * 10**9,
    memory_used_bytes=0, gpu_count=1, compute_capability="9.0", driver_version="550",
    cuda_driver_version="12.4", cpu_count=16, source="nvml", note=None)
