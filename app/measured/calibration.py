"""What this device has measured, by one stated rule (RULE): per matmul dtype and per
train-step precision, the best of the last WINDOW succeeded runs on this device. One noisy
run (another process on the box) then does not hide a good one, and a run older than the
window no longer speaks for the device. Only results whose recorded environment is this
device count."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from app.accounting.records import RECORD
from app.device import DeviceInfo
from app.measured import doubts

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.job import Job
    from app.jobs.store import Store

WINDOW = 5  # recent succeeded runs per dtype (matmul) or precision (train_step) considered
LOOKBACK = 200  # newest succeeded jobs per probe searched to fill each window
RULE = (f"Per matmul dtype, per train_step precision, and for bandwidth: the best of the last {WINDOW} "
        "succeeded runs on this device (same device kind and name). Best matmul = the highest median "
        "FLOP/s of its best shape (the shape with the highest median); best train_step = the highest "
        "achieved FLOP/s (the same order as MFU on one device) of full training steps (mode full; a "
        "fine-tune skips frozen weights' gradients); best bandwidth = the highest median "
        "GB/s of a device-to-device copy. Runs measured alone count first: a run that shared its host or "
        "GPU, or whose timings spread widely (app/measured/doubts.py), is chosen only when no recent run "
        "was measured alone, and then says so (doubts). job_id names the run the figure comes from.")


@dataclass(slots=True)
class MatmulPeak:
    """The best shape of the best recent matmul run that measured this dtype (see `rule`)."""

    dtype: str
    flop_per_sec: float
    """flops / median time of the best shape."""
    m: int
    k: int
    n: int
    mfu: float | None
    """Against the catalogue's dense peak; null when the device is not listed."""
    job_id: int
    """The run this figure comes from (page: /benchmarks/jobs/{job_id})."""
    measured_at: datetime
    runs_considered: int = 1
    """How many recent runs of this dtype on this device were compared (at most the window)."""
    doubts: list[str] = field(default_factory=list)
    """Why this run may be slower than the device alone (app/measured/doubts.py); empty when it was
    measured alone, as every figure is whenever one such run is among the recent ones."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class TrainStepMfu:
    """The best recent train_step run at this precision (see `rule`)."""

    precision: str
    mfu: float | None
    achieved_flop_per_sec: float
    tokens_per_sec: float
    model: str
    job_id: int
    """The run this figure comes from (page: /benchmarks/jobs/{job_id})."""
    measured_at: datetime
    runs_considered: int = 1
    """How many recent runs at this precision on this device were compared (at most the window)."""
    doubts: list[str] = field(default_factory=list)
    """As MatmulPeak's."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class BandwidthPeak:
    """The best recent bandwidth run (see `rule`)."""

    bytes_per_sec: float
    """Bytes read plus written per copy / median time."""
    fraction_of_catalogue: float | None
    """Against the catalogue's memory bandwidth; null when the device is not listed."""
    job_id: int
    measured_at: datetime
    runs_considered: int = 1
    doubts: list[str] = field(default_factory=list)
    """As MatmulPeak's."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Calibration:
    __doc__ = "What this device has measured. " + RULE

    device: str
    """The device name the measurements were taken on."""
    catalogue_id: str | None
    matmul: dict[str, MatmulPeak]
    """By dtype."""
    train_step: dict[str, TrainStepMfu]
    """By precision: fp32 or bf16_autocast."""
    bandwidth: BandwidthPeak | None = None
    """null until a bandwidth probe has run on this device."""
    rule: str = RULE
    """How each figure was chosen among the runs."""
    window: int = WINDOW
    """Recent runs per dtype or precision considered."""

    __pydantic_config__ = RECORD


def on_device(job: Job, device: DeviceInfo) -> bool:
    """Whether the job's result was measured on this device (same kind and name)."""
    env = job.result.environment
    return env.device == device.kind and env.device_name == device.name


def _choose(runs: list, key: Callable) -> Any:
    """The best of `runs` ((figure, its doubts) pairs) by `key`: of those measured alone when any
    was, else of all of them, its doubts then set; runs_considered is the pool it was chosen from."""
    alone = [run for run, why in runs if not why]
    pool = alone or [run for run, _ in runs]
    best = max(pool, key=key)
    best.runs_considered = len(pool)
    if not alone:
        best.doubts = next(why for run, why in runs if run is best)
    return best


def finished(job: Job) -> datetime:
    """When the job ended (or, for a row without an end, was made), in UTC."""
    return datetime.fromtimestamp(job.finished_at or job.created_at, UTC)


Run = TypeVar("Run")


def best_recent(store: Store, probe: str, device: DeviceInfo, figure: Callable[[Job], Run | None],
                key: Callable[[Run], float]) -> Run | None:
    """The rule for one figure: of the last WINDOW succeeded `probe` runs on this device that give
    one (`figure` of the job; None skips it), the one with the highest `key`, its runs_considered
    set; None before any."""
    runs = [(run, doubts.doubts(job.result)) for job in store.latest(probe=probe, limit=LOOKBACK)
            if on_device(job, device) and (run := figure(job)) is not None][:WINDOW]
    return _choose(runs, key) if runs else None


def _recent(candidates: dict, key: str, item: object) -> None:
    """Keep the newest WINDOW candidates per key (jobs arrive newest first)."""
    kept = candidates.setdefault(key, [])
    if len(kept) < WINDOW:
        kept.append(item)


def calibration(store: Store, device: Any) -> Calibration:
    """By the rule above, for `device` (a DeviceInfo, or anything with its kind, name and
    catalogue_id: app/measured/past.RanOn)."""
    shapes: dict[str, list[MatmulPeak]] = {}
    for job in store.latest(probe="matmul", limit=LOOKBACK):
        if on_device(job, device):
            why = doubts.doubts(job.result)
            for dtype, p in job.result.best.items():
                _recent(shapes, dtype, (MatmulPeak(dtype=dtype, flop_per_sec=p.flop_per_sec, m=p.m, k=p.k, n=p.n,
                                                   mfu=p.mfu, job_id=job.id, measured_at=finished(job)), why))
    steps: dict[str, list[TrainStepMfu]] = {}
    for job in store.latest(probe="train_step", limit=LOOKBACK):
        r = job.result
        # A fine-tune's step skips frozen weights' gradients: its MFU is not a training step's.
        if on_device(job, device) and r.mode == "full":
            _recent(steps, r.precision, (TrainStepMfu(
                precision=r.precision, mfu=r.mfu, achieved_flop_per_sec=r.achieved_flop_per_sec,
                tokens_per_sec=r.tokens_per_sec, model=r.model, job_id=job.id, measured_at=finished(job)),
                doubts.doubts(r)))
    peaks = {d: _choose(runs, key=lambda run: run.flop_per_sec) for d, runs in shapes.items()}
    best_steps = {p: _choose(runs, key=lambda run: run.achieved_flop_per_sec) for p, runs in steps.items()}
    bandwidth = best_recent(store, "bandwidth", device, lambda job: BandwidthPeak(
        bytes_per_sec=job.result.gb_per_sec * 1e9, fraction_of_catalogue=None
        if job.result.percent_of_catalogue is None else job.result.percent_of_catalogue / 100,
        job_id=job.id, measured_at=finished(job)), key=lambda run: run.bytes_per_sec)
    return Calibration(device=device.name, catalogue_id=device.catalogue_id, matmul=peaks,
                       train_step=best_steps, bandwidth=bandwidth)


@dataclass(slots=True)
class CheckpointDisk:
    """The best recent checkpoint probe run on this device: the disk rates a checkpoint was
    written and read back at (the probe's write_bytes_per_s and read_bytes_per_s)."""

    write_bytes_per_s: float
    read_bytes_per_s: float
    job_id: int
    measured_at: datetime
    runs_considered: int = 1
    doubts: list[str] = field(default_factory=list)
    """As MatmulPeak's."""

    __pydantic_config__ = RECORD


def checkpoint_disk(store: Store, device: DeviceInfo) -> CheckpointDisk | None:
    """By the rule above: of the last WINDOW succeeded checkpoint runs on this device, the one
    that wrote fastest (its read rate beside it); None before any has run."""
    return best_recent(store, "checkpoint", device, lambda job: CheckpointDisk(
        write_bytes_per_s=job.result.write_bytes_per_s, read_bytes_per_s=job.result.read_bytes_per_s,
        job_id=job.id, measured_at=finished(job)), key=lambda run: run.write_bytes_per_s)


@dataclass(slots=True)
class LoaderRate:
    """The best recent data_loader probe run on this device: tokens a second its get_batch drew and
    copied to the device, in its fastest copy mode."""

    tokens_per_s: float
    mode: str
    job_id: int
    measured_at: datetime
    runs_considered: int = 1
    doubts: list[str] = field(default_factory=list)
    """As MatmulPeak's."""

    __pydantic_config__ = RECORD


def data_loader(store: Store, device: DeviceInfo) -> LoaderRate | None:
    """By the rule above: of the last WINDOW succeeded data_loader runs on this device, the one whose
    fastest copy mode drew the most tokens a second; None before any has run."""
    def fastest_mode(job: Job) -> LoaderRate | None:
        if not job.result.modes:
            return None
        best = max(job.result.modes, key=lambda m: m.tokens_per_sec)
        return LoaderRate(tokens_per_s=best.tokens_per_sec, mode=best.mode, job_id=job.id,
                          measured_at=finished(job))

    return best_recent(store, "data_loader", device, fastest_mode, key=lambda run: run.tokens_per_s)
