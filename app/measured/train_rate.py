"""The train step a probe compares with, from this server's own runs (the data_loader probe's
prepare hook asks it through app/measured/past.py): of the last WINDOW succeeded train_step runs
on a device with the same model, precision, optimizer, batch_size and seq_len (mode full), the
fastest, by calibration's rule (app/measured/calibration.py); or the run a job names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.device import DeviceInfo
from app.measured.calibration import LOOKBACK, WINDOW, on_device

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.job import Job
    from app.jobs.store import Store

SAME = ("model", "precision", "optimizer", "batch_size", "seq_len", "mode")
"""The train_step parameters that make a run the one a step of `params` would be."""


def _same(job: Job, want: dict[str, Any], device: DeviceInfo) -> bool:
    return (on_device(job, device) and job.result.mode == "full"
            and {k: job.params.get(k) for k in SAME} == want)


def train_step_rate(store: Store, params: Any, device: DeviceInfo,
                    job_id: int | None = None) -> tuple[float, int] | None:
    """(tokens/s, job id) of the run `job_id` names when it is a succeeded full train_step of
    `params` (a TrainStepParams) on `device`, else None; without job_id, the fastest of the last
    WINDOW such runs, or None before any."""
    want = params.model_dump(mode="json", include=set(SAME))
    if job_id is not None:
        job = store.get(job_id)
        usable = job is not None and job.probe == "train_step" and job.status == "succeeded"
        return (job.result.tokens_per_sec, job.id) if usable and _same(job, want, device) else None
    latest = store.latest(probe="train_step", limit=LOOKBACK)
    runs = [job for job in latest if _same(job, want, device)][:WINDOW]
    if not runs:
        return None
    best = max(runs, key=lambda job: job.result.tokens_per_sec)
    return best.result.tokens_per_sec, best.id
