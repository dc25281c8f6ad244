"""The one timing method every probe uses.

- Warm-up measured in time (at least one run), so handle creation, autotuning
  and lazy initialisation stay out of the numbers.
- The iteration count follows from the warm-up's pace and the time budget.
- Before each timed iteration, outside the timed interval, a buffer is zeroed, so no
  iteration finds its inputs in L2: on CUDA max(256 MiB, 2 x L2) (app/probes/params.py).
- CUDA: an event pair per iteration and one synchronize at the end. CPU: the
  ops are synchronous, so perf_counter around each run.
- Energy (a GPU with NVML): after the timed iterations, the same work run back to back for at
  least half a second in an NVML window of its own (app/bench/energy.py says why not the timed
  window); it lands in Stats.energy, None on a CPU.
"""

import time
from collections.abc import Callable

import torch

from app.bench import energy as energy_window
from app.probes import params
from app.probes.results import Stats, stats


def flush_bytes(device: torch.device) -> int:
    cuda = device.type == "cuda"
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) if cuda else None
    return params.flush_bytes(device.type, l2)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def summarize(seconds: list[float]) -> Stats:
    return stats(seconds)


class Timer:
    def __init__(self, device: torch.device, *, warmup_s: float, measure_s: float, min_iters: int,
                 max_iters: int) -> None:
        self.device = device
        self.warmup_s, self.measure_s = warmup_s, measure_s
        self.min_iters, self.max_iters = min_iters, max_iters
        self.flush_bytes = flush_bytes(device)
        self._flush = torch.empty(self.flush_bytes, dtype=torch.uint8, device=device)

    def flush(self) -> None:
        self._flush.zero_()

    def warm_up(self, run: Callable[[], object]) -> float:
        """Run for warmup_s (at least once); the seconds one run took, roughly."""
        sync(self.device)
        start = time.perf_counter()
        runs = 0
        while True:
            run()
            runs += 1
            sync(self.device)
            elapsed = time.perf_counter() - start
            if elapsed >= self.warmup_s:
                return elapsed / runs

    def iterations(self, seconds_per_run: float) -> int:
        wanted = int(self.measure_s / max(seconds_per_run, 1e-9))
        return max(self.min_iters, min(self.max_iters, wanted))

    def measure(self, run: Callable[[], object], *, energy: bool = True) -> Stats:
        """Warm up, then time each iteration on its own, after an L2 flush; then, on a GPU and
        with `energy`, its energy over a back-to-back window (Stats.energy)."""
        n = self.iterations(self.warm_up(run))
        if self.device.type == "cuda":
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(n)]
            for start, end in pairs:
                self.flush()
                start.record()
                run()
                end.record()
            torch.cuda.synchronize(self.device)
            stats = summarize([start.elapsed_time(end) / 1e3 for start, end in pairs])
            if energy:
                stats.energy = energy_window.back_to_back(self.device, [run],
                                                          seconds_per_iteration=stats.median)
            return stats
        seconds = []
        for _ in range(n):
            self.flush()
            t0 = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - t0)
        return summarize(seconds)

    def measure_phases(self, phases: list[Callable[[], object]], *, warmup_runs: int, iterations: int,
                       progress: Callable[[int], None] | None = None,
                       agree: Callable[[int], int] | None = None) -> list[Stats]:
        """Run the phases in order, warmup_runs times untimed, then `iterations` times with
        each phase timed and a synchronize per iteration. One Stats per phase, then the whole;
        the whole's carries the energy of whole iterations run back to back (on a GPU), their
        count made the same on every rank by `agree` in a distributed job."""
        for _ in range(warmup_runs):
            for phase in phases:
                phase()
            sync(self.device)
        times: list[list[float]] = [[] for _ in range(len(phases) + 1)]
        cuda = self.device.type == "cuda"
        for i in range(iterations):
            self.flush()
            if cuda:
                marks = [torch.cuda.Event(enable_timing=True) for _ in range(len(phases) + 1)]
                marks[0].record()
                for phase, mark in zip(phases, marks[1:], strict=True):
                    phase()
                    mark.record()
                torch.cuda.synchronize(self.device)
                edges = [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:], strict=False)]
            else:
                stamps = [time.perf_counter()]
                for phase in phases:
                    phase()
                    stamps.append(time.perf_counter())
                edges = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
            for series, seconds in zip(times, [*edges, sum(edges)], strict=True):
                series.append(seconds)
            if progress is not None:
                progress(i + 1)
        stats = [summarize(series) for series in times]
        stats[-1].energy = energy_window.back_to_back(self.device, phases,
                                                      seconds_per_iteration=stats[-1].median, agree=agree)
        return stats
