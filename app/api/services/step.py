"""One training step's time on one device: datasheet defaults, and with `calibration` the device's
own profile (app/accounting/calibration/step.py)."""

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from app.accounting import hardware
from app.accounting.calibration import step, surface
from app.accounting.calibration.profile import Profile
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.inputs.calibration import CALIBRATION_HELP, CalibrationRef
from app.inputs.fields import Input, count, sequence_length
from app.inputs.schemas import GpuRef, ModelSpec, accelerator, engine_model, gpu_label


class StepTimeRequest(Input):
    model: ModelSpec
    batch_size: count(1, 65_536) = 4
    seq_len: sequence_length(1, 1_048_576) = 256
    precision: Literal["fp32", "bf16_autocast"] = Field(
        "fp32", description="As the train_step probe's: fp32, or bf16_autocast (matmuls in bfloat16).")
    optimizer: Literal["sgd", "adagrad", "adam", "adamw"] = "adamw"
    gpu: GpuRef | None = Field(None, description="For the datasheet answer's dense peak; with a calibration, "
                                                 "it must be the profile's device.")
    calibration: CalibrationRef | None = Field(None, description=CALIBRATION_HELP)


@dataclass(slots=True)
class ProfileUsed:
    id: int | None
    device_model: str
    version: int
    created_at: str

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class StepTimeAnswer:
    """One step of `model` at batch_size x seq_len tokens on one device, seconds."""

    datasheet: step.StepTime | None
    """FLOPs over the dense peak x 0.5; null where no peak is known (a CPU profile built elsewhere)."""
    calibrated: step.StepTime | None
    """From the profile's matmul surface and train step fit; null without `calibration`."""
    profile: ProfileUsed | None
    flags: list[str] = field(default_factory=list)
    """The profile's flags: figures resting on runs that disagree."""

    __pydantic_config__ = RECORD


def step_time(body: StepTimeRequest, profile: Profile | None) -> StepTimeAnswer:
    """`profile`: the one `calibration` names, read by the caller (services.calibration.resolve)."""
    dtype = step.MATMUL_DTYPE[body.precision]
    acc = accelerator(body.gpu, None)
    if profile is not None and acc is not None and profile.catalogue_id != acc.id:
        where = profile.catalogue_id or "a device outside the catalogue"
        raise InvalidInput("calibration",
                           f"{profile.label} was measured on {where}, not {gpu_label(body.gpu)}")
    if profile is None and acc is None:
        raise InvalidInput("gpu", "give a gpu (for its datasheet peak) or a calibration profile")
    c = step.counts(engine_model(body.model), batch_size=body.batch_size, seq_len=body.seq_len,
                    precision=body.precision, optimizer=body.optimizer)
    if acc is not None:
        peak = hardware.peak_flop_per_sec(acc, dtype, field="precision")
        source = f"{acc.id}'s dense {dtype} peak"
    elif dtype in profile.datasheet_peak_flop_per_sec:  # type: ignore[union-attr]
        peak, source = profile.datasheet_peak_flop_per_sec[dtype], f"{profile.label}'s datasheet {dtype} peak"
    else:
        peak = source = None
    datasheet = None if peak is None else step.datasheet(c, peak_flop_per_sec=peak, peak_source=source)
    if profile is None:
        return StepTimeAnswer(datasheet, None, None)
    calibrated = step.calibrated(c, profile, surface.fit(list(profile.matmul), dtype), body.precision)
    used = ProfileUsed(profile.id, profile.device_model, profile.version, profile.created_at)
    return StepTimeAnswer(datasheet, calibrated, used, list(profile.flags))
