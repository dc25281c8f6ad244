"""The average power this device draws while training, from its stored probe results, by one
stated rule (RULE): the mean of the sustained train-step runs' average watts (NVML's energy over
the run's seconds, app/probes/sustained.py) among the last WINDOW succeeded runs that had one on
this device, a train_step job with sustain_s or a burn_in job's train_step part. A train step
(forward, backward, optimizer) is what a training run's GPUs do, so its power, not a bare
matmul's, stands for the run's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.accounting.records import RECORD
from app.device import DeviceInfo
from app.measured.calibration import LOOKBACK, WINDOW, finished, on_device
from app.probes.sustained import Sustained

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.job import Job
    from app.jobs.store import Store

RULE = (f"The mean of the average watts of the last {WINDOW} sustained train-step runs on this device "
        "(train_step with sustain_s, or a burn_in's train_step part): NVML's energy over the run's seconds.")
PROBES = ("train_step", "burn_in")


@dataclass(slots=True)
class MeasuredPower:
    watts: float
    """Mean of the runs' average power, W per GPU."""
    job_ids: list[int]
    """The runs averaged, newest first."""
    device: str
    source: str
    """One line naming the runs and the rule, for an answer's power_source."""

    __pydantic_config__ = RECORD


def _sustained(job: Job) -> Sustained | None:
    r = job.result
    held = r.train_step.sustained if job.probe == "burn_in" else r.sustained
    if job.probe == "train_step" and r.mode != "full":
        return None  # a fine-tune's step skips frozen weights' gradients: not a training step's power
    return held if held is not None and held.average_power_watts is not None else None


def measured_power(store: Store, device: DeviceInfo) -> MeasuredPower | None:
    """None until a sustained train step has measured power on this device."""
    runs: list[tuple[float, Job]] = []
    for probe in PROBES:
        for job in store.latest(probe=probe, limit=LOOKBACK):
            held = _sustained(job) if on_device(job, device) else None
            if held is not None:
                runs.append((job.finished_at or job.created_at, job))
    runs.sort(key=lambda run: run[0], reverse=True)
    kept = [job for _, job in runs[:WINDOW]]
    if not kept:
        return None
    watts = sum(_sustained(job).average_power_watts for job in kept) / len(kept)
    ids = [job.id for job in kept]
    newest = finished(kept[0]).isoformat()
    return MeasuredPower(watts=watts, job_ids=ids, device=device.name,
                         source=f"measured: {watts:.1f} W, the mean of {len(kept)} sustained train-step "
                                f"run(s) on {device.name} (jobs {', '.join(map(str, ids))}; newest "
                                f"{newest}). " + RULE)
