"""Was the host quiet while a probe ran? Torch-free: /proc/loadavg and each process's CPU time
from /proc/<pid>/stat, read as the probe starts and again as it reports (Linux only; elsewhere
nothing is recorded).

A train step measured beside a busy neighbour took 6 to 10 times longer than alone, and
nothing in its result said so. Load average alone cannot tell: it is a one-minute smoothed
figure that lags a short probe, so the verdict comes from the CPU time other processes used
inside the window itself.
"""

import os
import time
from pathlib import Path

from app import device
from app.probes.results import BusyProcess, Contention

PROC = Path("/proc")
# Cores (CPU seconds per second) another process must average to be listed as busy.
BUSY_CORES = 0.1
# Cores all other processes together may use before the result is flagged as not quiet.
QUIET_CORES = 0.5
# Runnable tasks beyond the cores, in the 1-minute load average, before the result is flagged. The
# probe's own threads count in the load, so one more than the cores is allowed. It catches what
# /proc's process list cannot: neighbours in other containers of the same host (their CPU time is
# invisible here, the load is not), as a matmul 12-60x slower than its best iteration at a load of
# 9.6 on 2 cores was.
LOAD_SLACK = 1.0
Snapshot = dict[int, tuple[str, float]]
"""pid -> (name, CPU seconds used so far: user + system)."""


def loadavg() -> float | None:
    try:
        return float((PROC / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_times() -> Snapshot:
    """Every process's CPU seconds so far; a process that ends while being read is skipped."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: Snapshot = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The name sits in parentheses and may hold spaces; the fields after it are fixed:
        # utime and stime are the 14th and 15th of stat(5), the 12th and 13th after the name.
        name, rest = stat[stat.find("(") + 1:stat.rfind(")")], stat[stat.rfind(")") + 2:].split()
        found[int(entry.name)] = (name, (int(rest[11]) + int(rest[12])) / ticks)
    return found


def judge(before: Snapshot, after: Snapshot, *, seconds: float, exclude: set[int], load_before: float | None,
          load_after: float | None, cpu_count: int, gpu_processes: int | None = None) -> Contention:
    """The contention between two snapshots `seconds` apart, not counting the `exclude` pids
    (the probe's own process). A process born in the window counts all its CPU time.
    gpu_processes counts the probe's own: more than one is a neighbour on its GPU."""
    used = [(pid, name, (cpu - before.get(pid, ("", 0.0))[1]) / max(seconds, 1e-9))
            for pid, (name, cpu) in after.items() if pid not in exclude]
    others = sum(cores for _, _, cores in used if cores > 0)
    busy = [BusyProcess(pid=pid, name=name, cpu_cores=round(cores, 3))
            for pid, name, cores in sorted(used, key=lambda u: -u[2]) if cores >= BUSY_CORES]
    reasons = []
    if others >= QUIET_CORES:
        reasons.append(f"other processes used {others:.2g} cores")
    loads = [x for x in (load_before, load_after) if x is not None]
    if loads and max(loads) > cpu_count + LOAD_SLACK:
        reasons.append(f"a load average of {max(loads):.3g} on {cpu_count} cores")
    if (gpu_processes or 0) > 1:
        reasons.append(f"{gpu_processes - 1} other process(es) held its GPU")
    return Contention(seconds=seconds, load_before=load_before, load_after=load_after, cpu_count=cpu_count,
                      others_cpu_cores=round(others, 3), busy=busy, gpu_processes=gpu_processes,
                      quiet=not reasons, reasons=reasons)


def visible_gpu() -> int:
    """NVML's index of the GPU this child sees as cuda:0: the dispatcher names it in
    CUDA_VISIBLE_DEVICES, in NVML's PCI bus order; 0 when it names none."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(named) if named.isdigit() else 0


class Watch:
    """Started as a probe sets up (once its CUDA context exists, so the GPU's process count
    holds it); finish() says what else ran since. `gpu`: NVML's index of the probe's GPU."""

    def __init__(self, gpu: int | None = None) -> None:
        self.gpu = gpu
        self.gpu_processes = self._gpu_processes()
        self.load_before = loadavg()
        self.before = cpu_times()
        self.started = time.monotonic()

    def _gpu_processes(self) -> int | None:
        return None if self.gpu is None else device.gpu_process_count(self.gpu)

    def finish(self) -> Contention | None:
        if not self.before:
            return None  # no /proc here: nothing to say, rather than a false "quiet"
        seconds = time.monotonic() - self.started
        after = cpu_times()
        counts = [n for n in (self.gpu_processes, self._gpu_processes()) if n is not None]
        return judge(self.before, after, seconds=seconds, exclude={os.getpid()}, load_before=self.load_before,
                     load_after=loadavg(), cpu_count=os.cpu_count() or 1,
                     gpu_processes=max(counts) if counts else None)
