"""Finished benchmark jobs put straight into a store, for page and calibration tests that
need particular numbers (no probe runs): typed results from tests/support/results.py."""

from typing import Any

from app import device
from app.jobs.fleet import Serves
from app.jobs.store import Store
from app.probes.matmul import MatmulPoint
from app.probes.results import Environment, Stats
from tests.support.results import minimal, result_for


def here() -> Environment:
    """An environment that is this box's device, as a probe here would record it."""
    info = device.describe()
    return minimal(Environment, device=info.kind, device_name=info.name,
                   catalogue_id=info.catalogue_id, torch_version="2.x", seed=0)


def stats(median_s: float, best_s: float | None = None) -> Stats:
    best = median_s if best_s is None else best_s
    return Stats(median=median_s, p20=best, p80=median_s, mean=median_s, best=best, iterations=5)


def matmul_point(m: int, k: int, n: int, dtype: str, median_s: float, best_s: float) -> MatmulPoint:
    flops = 2 * m * k * n  # a multiply-add is 2 FLOPs
    return MatmulPoint(m=m, k=k, n=n, dtype=dtype, flops=flops, time=stats(median_s, best_s),
                               flop_per_sec=flops / median_s, best_flop_per_sec=flops / best_s,
                               peak_flop_per_sec=None, mfu=None, predicted_seconds_at_peak=None)


def matmul(points: list[MatmulPoint], environment: Environment | None = None) -> Any:
    best: dict[str, MatmulPoint] = {}
    for p in points:
        if p.dtype not in best or p.flop_per_sec > best[p.dtype].flop_per_sec:
            best[p.dtype] = p
    return result_for("matmul", environment=environment or here(), points=points, best=best)


def finished(store: Store, result: Any, params: dict | None = None, *, device: str | None = None) -> int:
    """A succeeded job holding `result` (asked for with `params`), run by the dispatcher of `device`
    (a GPU's UUID, "<host>:cpu") where given; its id."""
    job = store.submit(probe=result.probe, params=params or {}, timeout_s=60, limit=1000)
    serves = None if device is None else Serves(device, ())
    claimed = store.claim(worker_id="tests", serves=serves)
    assert claimed is not None and claimed.id == job.id
    assert store.finish(job.id, status="succeeded", result=result)
    return job.id
