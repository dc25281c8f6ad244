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

from app.contract.results import BusyProcess, Contention

PROC = Path("/proc")
# Cores (CPU seconds per second) another process must average to be listed as busy.
BUSY_CORES = 0.1
# Cores all other processes together may use before the result is flagged as not quiet.
QUIET_CORES = 0.5
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
          load_after: float | None, cpu_count: int) -> Contention:
    """The contention between two snapshots `seconds` apart, not counting the `exclude` pids
    (the probe's own process). A process born in the window counts all its CPU time."""
    used = [(pid, name, (cpu - before.get(pid, ("", 0.0))[1]) / max(seconds, 1e-9))
            for pid, (name, cpu) in after.items() if pid not in exclude]
    others = sum(cores for _, _, cores in used if cores > 0)
    busy = [BusyProcess(pid=pid, name=name, cpu_cores=round(cores, 3))
            for pid, name, cores in sorted(used, key=lambda u: -u[2]) if cores >= BUSY_CORES]
    return Contention(seconds=seconds, load_before=load_before, load_after=load_after, cpu_count=cpu_count,
                      others_cpu_cores=round(others, 3), busy=busy, quiet=others < QUIET_CORES)


class Watch:
    """Started as a probe sets up; finish() says what else ran since."""

    def __init__(self) -> None:
        self.load_before = loadavg()
        self.before = cpu_times()
        self.started = time.monotonic()

    def finish(self) -> Contention | None:
        if not self.before:
            return None  # no /proc here: nothing to say, rather than a false "quiet"
        seconds = time.monotonic() - self.started
        return judge(self.before, cpu_times(), seconds=seconds, exclude={os.getpid()},
                     load_before=self.load_before, load_after=loadavg(), cpu_count=os.cpu_count() or 1)
