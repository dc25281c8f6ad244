"""What this device has measured: the latest matmul peak per dtype and the latest
train-step MFU per precision, read from succeeded jobs. Only results whose recorded
environment is this device count."""

from dataclasses import dataclass
from datetime import UTC, datetime

from app.accounting.records import RECORD
from app.device import DeviceInfo
from app.jobs.job import Job
from app.jobs.store import Store

LOOKBACK = 200  # newest succeeded jobs per probe searched for each dtype's latest run


@dataclass(slots=True)
class MatmulPeak:
    """The best shape of the latest matmul run that measured this dtype."""

    dtype: str
    flop_per_sec: float
    """flops / median time of the best shape."""
    m: int
    k: int
    n: int
    mfu: float | None
    """Against the catalogue's dense peak; null when the device is not listed."""
    job_id: int
    measured_at: datetime

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class TrainStepMfu:
    """The latest train_step run at this precision."""

    precision: str
    mfu: float | None
    achieved_flop_per_sec: float
    tokens_per_sec: float
    model: str
    job_id: int
    measured_at: datetime

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Calibration:
    device: str
    """The device name the measurements were taken on."""
    catalogue_id: str | None
    matmul: dict[str, MatmulPeak]
    """By dtype."""
    train_step: dict[str, TrainStepMfu]
    """By precision: fp32 or bf16_autocast."""

    __pydantic_config__ = RECORD


def _here(job: Job, device: DeviceInfo) -> bool:
    env = job.result.environment
    return env.device == device.kind and env.device_name == device.name


def _when(job: Job) -> datetime:
    return datetime.fromtimestamp(job.finished_at or job.created_at, UTC)


def calibration(store: Store, device: DeviceInfo) -> Calibration:
    peaks: dict[str, MatmulPeak] = {}
    for job in store.latest(probe="matmul", limit=LOOKBACK):
        if not _here(job, device):
            continue
        for dtype, p in job.result.best.items():
            if dtype not in peaks:
                peaks[dtype] = MatmulPeak(dtype=dtype, flop_per_sec=p.flop_per_sec, m=p.m, k=p.k, n=p.n,
                                          mfu=p.mfu, job_id=job.id, measured_at=_when(job))
    steps: dict[str, TrainStepMfu] = {}
    for job in store.latest(probe="train_step", limit=LOOKBACK):
        r = job.result
        if _here(job, device) and r.precision not in steps:
            steps[r.precision] = TrainStepMfu(
                precision=r.precision, mfu=r.mfu, achieved_flop_per_sec=r.achieved_flop_per_sec,
                tokens_per_sec=r.tokens_per_sec, model=r.model, job_id=job.id, measured_at=_when(job))
    return Calibration(device=device.name, catalogue_id=device.catalogue_id, matmul=peaks, train_step=steps)
