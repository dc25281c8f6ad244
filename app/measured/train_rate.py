"""The train step a data_loader job compares with, from this server's own runs: at submission a job
without params.train_tokens_per_s takes it from the best of the last WINDOW succeeded train_step runs
on its device (calibration's rule, app/measured/calibration.py) of the same model, precision, optimizer,
batch_size and seq_len (mode full), naming that run in params.train_job_id. A job naming
params.train_job_id itself takes that run's figure, or is refused naming the field. Torch-free."""

from app.accounting.errors import InvalidInput
from app.device import DeviceInfo
from app.jobs.job import Job
from app.jobs.store import Store
from app.measured.calibration import LOOKBACK, WINDOW, on_device
from app.probes.data_loader import DataLoaderParams, train_params

SAME = ("model", "precision", "optimizer", "batch_size", "seq_len", "mode")
"""The train_step parameters that make a run the one a loader feeds."""


def _same(job: Job, params: DataLoaderParams, device: DeviceInfo) -> bool:
    want = train_params(params).model_dump(mode="json", include=set(SAME))
    return (on_device(job, device) and job.result.mode == "full"
            and {k: job.params.get(k) for k in SAME} == want)


def fill(params: DataLoaderParams, jobs: Store, device: DeviceInfo) -> DataLoaderParams:
    """`params` with train_tokens_per_s and train_job_id set from a matching run, where one is
    found (or named); unchanged when train_tokens_per_s was given or no run matches."""
    if params.train_job_id is not None:
        if params.train_tokens_per_s is not None:
            raise InvalidInput("params.train_job_id", "give train_tokens_per_s or train_job_id, not both")
        job = jobs.get(params.train_job_id)
        usable = job is not None and job.probe == "train_step" and job.status == "succeeded"
        if not usable or not _same(job, params, device):
            raise InvalidInput("params.train_job_id", f"job {params.train_job_id} is not a succeeded "
                               f"train_step run on {device.name} of this model, precision, optimizer, "
                               "batch_size and seq_len (mode full)")
        return params.model_copy(update={"train_tokens_per_s": job.result.tokens_per_sec})
    if params.train_tokens_per_s is not None:
        return params
    latest = jobs.latest(probe="train_step", limit=LOOKBACK)
    runs = [job for job in latest if _same(job, params, device)][:WINDOW]
    if not runs:
        return params
    best = max(runs, key=lambda job: job.result.tokens_per_sec)
    return params.model_copy(update={"train_tokens_per_s": best.result.tokens_per_sec,
                                     "train_job_id": best.id})
