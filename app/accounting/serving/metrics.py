"""What a simulated run measures, defined as vLLM's serving benchmark defines it
(vllm/benchmarks/serve.py `calculate_metrics`, vLLM 0.11.0):

- time to first token (TTFT): the first token's time less the request's arrival;
- time per output token (TPOT): (end-to-end - TTFT) / (output tokens - 1), over requests of more
  than one output token;
- end-to-end latency (E2E): the last token's time less the arrival;
- percentiles with linear interpolation (numpy.percentile's default);
- throughput over the run's duration, from the first arrival to the last completion;
- goodput: completed requests a second that meet every given SLO (`<=`, as `--goodput` counts them).

The queue and the cache are vLLM's scheduler statistics: requests waiting and running after each
step's scheduling, and the blocks in use (not free, cached free blocks counting as free) over the
cache's blocks.
"""

import bisect
from dataclasses import dataclass

from app.accounting.records import RECORD
from app.accounting.serving.engine import Series

SERIES_POINTS = 200
PERCENTILES = (50, 90, 99)


@dataclass(slots=True)
class Percentiles:
    """Seconds."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class SeriesPoint:
    time_s: float
    waiting: int
    """Requests waiting over the pool's replicas."""
    running: int
    kv_cache_used: float
    """Blocks in use over all blocks, 0 to 1, the pool's replicas together."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class PoolSeries:
    pool: str
    """"replica" (aggregated), or "prefill" and "decode"."""
    replicas: int
    blocks_per_replica: int
    mean_waiting: float
    """Time-averaged over the run, summed over the replicas."""
    mean_running: float
    mean_kv_cache_used: float
    peak_kv_cache_used: float
    steps: int
    points: list[SeriesPoint]

    __pydantic_config__ = RECORD


def percentile(ordered: list[float], q: float) -> float:
    """numpy.percentile's linear interpolation on a sorted list."""
    if not ordered:
        return 0.0
    at = (len(ordered) - 1) * q / 100
    lo = int(at)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (at - lo)


def spread(values: list[float]) -> Percentiles:
    ordered = sorted(values)
    mean = sum(ordered) / len(ordered) if ordered else 0.0
    return Percentiles(mean, *(percentile(ordered, q) for q in PERCENTILES), ordered[-1] if ordered else 0.0)


def pool_series(name: str, runs: list[Series], blocks: int, end_s: float) -> PoolSeries:
    """The pool's replicas merged on one time grid: each replica's state in the step covering the
    time (idle: nothing waiting or running, its cache as the last step left it)."""
    grid = [end_s * k / (SERIES_POINTS - 1) for k in range(SERIES_POINTS)] if end_s > 0 else [0.0]
    waiting = [0] * len(grid)
    running = [0] * len(grid)
    used = [0] * len(grid)
    total_w = total_r = total_u = 0.0
    peak = 0.0
    steps = 0
    for s in runs:
        steps += len(s.start_s)
        for dt, w, r, u in zip(s.seconds, s.waiting, s.running, s.blocks_used, strict=True):
            total_w += w * dt
            total_r += r * dt
            total_u += u * dt
        if blocks:
            peak = max(peak, max(s.blocks_used, default=0) / blocks)
        for k, t in enumerate(grid):
            j = bisect.bisect_right(s.start_s, t) - 1
            if j < 0:
                continue
            if t < s.start_s[j] + s.seconds[j]:
                waiting[k] += s.waiting[j]
                running[k] += s.running[j]
            used[k] += s.blocks_used[j]
    room = blocks * len(runs) or 1
    span = end_s or 1.0
    points = [SeriesPoint(t, w, r, u / room) for t, w, r, u in zip(grid, waiting, running, used, strict=True)]
    return PoolSeries(
        name, len(runs), blocks, total_w / span, total_r / span, total_u / span / room, peak, steps, points
    )


def saturated(arrival_s: list[float], finish_s: list[float]) -> bool:
    """The queue grows without bound: the requests in the system (arrived, not finished) rose in each of
    the last two quarters of the arrivals by more than a tenth of that quarter's arrivals, and by more
    than their own noise. A stable system settles within a few request lifetimes and then wanders about
    its mean; one fed faster than it drains gains (arrival rate - service rate) x time."""
    arrived, finished = sorted(arrival_s), sorted(finish_s)
    first, last = arrived[0], arrived[-1]

    def inside(t: float) -> int:
        return bisect.bisect_right(arrived, t) - bisect.bisect_right(finished, t)

    marks = [first + (last - first) * q for q in (0.5, 0.75, 1.0)]
    for lo, hi in zip(marks, marks[1:], strict=False):
        came = bisect.bisect_right(arrived, hi) - bisect.bisect_right(arrived, lo)
        before, after = inside(lo), inside(hi)
        if after - before <= max(0.1 * came, 2 * before**0.5 + 3):
            return False
    return True
