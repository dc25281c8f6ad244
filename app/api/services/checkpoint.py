"""A checkpoint's size, its write and read times, and the share of a run spent saving it."""

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from app import device
from app.accounting import checkpoint
from app.accounting.calibration.profile import Profile
from app.accounting.errors import InvalidInput
from app.accounting.models import count_params
from app.accounting.training import memory
from app.api.services.memory import TrainingMemoryRequest
from app.inputs.calibration import CALIBRATION_HELP, CalibrationRef
from app.inputs.fields import Input, byte_count, count, number
from app.inputs.schemas import ModelOrParams, engine_model
from app.measured import calibration, profile

if TYPE_CHECKING:  # SQLAlchemy and the probes, imported only by a calculator that reads the store
    from app.jobs.store import Store

_MEMORY = TrainingMemoryRequest.model_fields  # the same model, precision and optimizer inputs
DiskRate = byte_count(1, 10**15) | Literal["measured"]
MEASURED = ('"measured": the checkpoint probe\'s rate on this server (the best of its recent runs, '
            "as GET /api/v1/calibration picks)")


class CheckpointRequest(Input):
    model: ModelOrParams
    precision: memory.Precision = Field(_MEMORY["precision"].default,
                                        description=_MEMORY["precision"].description)
    optimizer: memory.Optimizer = Field(_MEMORY["optimizer"].default, description="The optimizer whose state "
                                        "the checkpoint holds (AdamW: two moments per parameter).")
    write_bytes_per_s: DiskRate | None = Field(
        None, description='Disk write rate in bytes/s ("2GB" is 2e9 bytes/s; no default: disks differ by '
                          "100x), or " + MEASURED + "; left out only with calibration.")
    read_bytes_per_s: DiskRate | None = Field(
        None, description='Disk read rate in bytes/s, for a restart\'s load ("2GB" is 2e9 bytes/s), or '
                          + MEASURED + "; left out only with calibration.")
    calibration: CalibrationRef | None = Field(
        None, description=CALIBRATION_HELP + " Here: the rates left out are the profile's checkpoint runs'.")
    keep_last: count(1, 1_000_000) = Field(1, description="Checkpoints kept on disk at once (storage_bytes).")
    every_n_steps: count(1, 10**12) | None = Field(
        None, description="Save every this many steps; with step_seconds (the share of the run) and/or "
                          "total_steps (how many saves).")
    step_seconds: number(gt=0, le=1e9) | None = Field(None, description="Seconds one training step takes.")
    total_steps: count(1, 10**12) | None = Field(None, description="Steps of the whole run.")


def reads_store(body: CheckpointRequest) -> bool:
    """Whether `answer` reads the job database (keep it off an event loop then)."""
    return "measured" in (body.write_bytes_per_s, body.read_bytes_per_s) or body.calibration is not None


def _rate(field: str, value: int | str | None, disk: calibration.CheckpointDisk | None,
          found: Profile | None) -> tuple[float, str]:
    if value is None:
        if found is None:
            raise InvalidInput(field, 'give a rate in bytes/s, "measured", or a calibration profile')
        writes = field == "write_bytes_per_s"
        fig = found.checkpoint_write_bytes_per_s if writes else found.checkpoint_read_bytes_per_s
        if fig is None:
            raise InvalidInput("calibration", f"{found.label} has no checkpoint runs: run the checkpoint "
                                              f"probe on that device, or give {field}")
        return fig.value, (f"calibrated: {found.label}'s checkpoint jobs {', '.join(map(str, fig.jobs))}"
                           + "".join(f"; flag: {line}" for line in found.flags))
    if value != "measured":
        return float(value), "given"
    if disk is None:
        raise InvalidInput(field, "no checkpoint probe has measured this server's disk yet: run one (the "
                                  'benchmarks page, or POST /api/v1/jobs {"probe": "checkpoint"}), or give a '
                                  "number of bytes/s")
    rate = disk.write_bytes_per_s if field == "write_bytes_per_s" else disk.read_bytes_per_s
    return rate, f"measured: checkpoint job {disk.job_id} at {disk.measured_at.isoformat()}"


def answer(body: CheckpointRequest, *, store: "Store") -> checkpoint.CheckpointTime:
    """`store` is read only for a measured rate."""
    params = body.model if isinstance(body.model, int) else count_params(engine_model(body.model)).total
    disk = calibration.checkpoint_disk(store, device.describe()) if "measured" in (
        body.write_bytes_per_s, body.read_bytes_per_s) else None
    found = None if body.calibration is None else profile.stored(store, body.calibration)
    write, write_source = _rate("write_bytes_per_s", body.write_bytes_per_s, disk, found)
    read, read_source = _rate("read_bytes_per_s", body.read_bytes_per_s, disk, found)
    return checkpoint.checkpoint_time(
        params=params, precision=body.precision, optimizer=body.optimizer,
        checkpoint_bytes=memory.checkpoint_bytes(params, body.precision, body.optimizer),
        write_bytes_per_s=write, read_bytes_per_s=read, write_source=write_source, read_source=read_source,
        keep_last=body.keep_last, every_n_steps=body.every_n_steps, step_seconds=body.step_seconds,
        total_steps=body.total_steps)
