"""Training time and MFU."""

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from app.accounting import dtypes, hardware, timing
from app.accounting.calibration import step, surface
from app.accounting.calibration.profile import Profile
from app.accounting.errors import InvalidInput
from app.accounting.models import count_params
from app.api.services import energy
from app.api.services.energy import EnergyInputs
from app.inputs.calibration import CALIBRATION_HELP, CalibrationRef
from app.inputs.fields import Input, count, number, sequence_length
from app.inputs.schemas import (
    GpuInput,
    GpuOverridesIn,
    GpuRef,
    ModelSpec,
    PeakDtype,
    accelerator,
    engine_model,
    gpu_label,
)
from app.measured.here import Here

Flops = number(gt=0, le=1e35)
Gpus = count(1, 10_000_000)
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]
DEFAULT_MFU = 0.5


class TrainingTimeRequest(GpuInput, EnergyInputs):
    flops: Flops | None = Field(None, description="Total training FLOPs; or give params and tokens.")
    params: count(1, 10**15) | None = Field(
        None, description="Parameters N, for 6*N*D FLOPs; or give model.")
    model: ModelSpec | None = Field(
        None, description="A preset or an inline config, in place of params: N is its active parameters "
                          "(a mixture of experts counts the experts a token runs), as the Time page reads it.")
    tokens: count(1, 10**15) | None = Field(
        None, description="Training tokens D, for 6*N*D FLOPs.")
    dtype: PeakDtype = Field("bfloat16", description="Which dense peak to run at.")
    num_gpus: Gpus = 1
    mfu: number(ge=1e-6, le=1) | Literal["measured"] = Field(
        DEFAULT_MFU, description="Model FLOPs utilization: the fraction of the dense peak sustained "
                                 '(answered with mfu_source "default" when left out). "measured": '
                                 "the train_step MFU of this server's device at this dtype, by the "
                                 "calibration's rule (the best of its recent runs; GET /api/v1/calibration).")
    price_per_gpu_hour: number(ge=0, le=1e6) | None = Field(
        None, description="Price of one GPU-hour in `currency`, for `cost`.")
    currency: Currency = Field(
        "USD", description="ISO 4217 code of the price and the cost (e.g. USD, EUR); echoed, never "
                           "converted.")
    calibration: CalibrationRef | None = Field(
        None, description=CALIBRATION_HELP + " Here: the MFU is the profile's calibrated step of `model` "
        "(one micro-batch of batch_size x seq_len on one device: its FLOPs over its seconds x the dense "
        "peak), times its sustained-over-burst ratio where measured. Communication is not counted "
        "(POST /api/v1/plan/training times layouts). Needs model; not with mfu.")
    batch_size: count(1, 65_536) = Field(4, description="With calibration: the micro-batch it times.")
    seq_len: sequence_length(1, 1_048_576) = Field(2048, description="With calibration: the micro-batch's "
                                                                     "sequence length.")


class MfuRequest(Input):
    flops: Flops = Field(description="FLOPs done (model FLOPs, e.g. 6*N*D for training).")
    seconds: number(ge=1e-9, le=1e12) = Field(description="Wall-clock time.")
    gpu: GpuRef | None = Field(
        None, description="Take the peak from the catalogue; or give peak_flop_per_sec.")
    gpu_overrides: GpuOverridesIn | None = None  # type: ignore[valid-type]
    peak_flop_per_sec: number(ge=1, le=1e18) | None = Field(
        None, description="Dense peak of one GPU, instead of a catalogue gpu.")
    dtype: PeakDtype = "bfloat16"
    num_gpus: Gpus = 1


def reads_store(body: TrainingTimeRequest) -> bool:
    """Whether `training` needs what is measured here (app/measured/here.py: read it off an event loop)."""
    return body.mfu == "measured" or body.reads_store()


def training(body: TrainingTimeRequest, here: Here | None = None,
             profile: Profile | None = None) -> timing.TrainingTime:
    """`here` (read when reads_store(body)) only for a measured MFU or power; `profile`, the one
    `calibration` names (read by the caller)."""
    flops, source = _flops(body)
    acc = body.accelerator()
    if profile is not None:
        mfu, mfu_source = calibrated_mfu(body, acc, profile)
    elif body.mfu == "measured":
        assert here is not None, "reads_store(body): the caller reads what is measured here"
        mfu, mfu_source = measured_mfu(body, here)
    else:  # "default": the request left mfu out, so 0.5 is ours, not the caller's
        mfu, mfu_source = body.mfu, "given" if "mfu" in body.model_fields_set else "default"
    result = timing.training_time(
        flops=flops, flops_source=source,
        peak_flop_per_sec=hardware.peak_flop_per_sec(acc, body.dtype), num_gpus=body.num_gpus,
        mfu=mfu, mfu_source=mfu_source, price_per_gpu_hour=body.price_per_gpu_hour, currency=body.currency)
    result.energy = energy.optional(body, result.gpu_hours, acc, here)
    return result


def _flops(body: TrainingTimeRequest) -> tuple[float, str]:
    """(FLOPs, where they came from). A refusal names the field to fill in: params or tokens
    when the other of the pair is given (a form that has no flops field can show it there)."""
    if body.flops is not None:
        if body.params is not None or body.tokens is not None or body.model is not None:
            raise InvalidInput("flops", "give flops, or params (or model) and tokens, not both")
        return body.flops, "given"
    if body.model is not None:
        if body.params is not None:
            raise InvalidInput("model", "give model or params, not both")
        if body.tokens is None:
            raise InvalidInput("tokens", "give tokens for 6*params*tokens FLOPs")
        active = count_params(engine_model(body.model)).active
        return timing.training_flops(active, body.tokens), "6*params*tokens (params: the model's active parameters)"
    if body.params is None:
        raise InvalidInput("params", "give params (and tokens) for 6*params*tokens FLOPs, or give flops")
    if body.tokens is None:
        raise InvalidInput("tokens", "give tokens (and params) for 6*params*tokens FLOPs, or give flops")
    return timing.training_flops(body.params, body.tokens), "6*params*tokens"


def calibrated_mfu(body: TrainingTimeRequest, acc: hardware.Accelerator,
                   profile: Profile) -> tuple[float, str]:
    """The MFU of the profile's calibrated step of body.model (app/accounting/calibration/step.py),
    held for a run's length by its sustained ratio; (mfu, what it came from)."""
    if "mfu" in body.model_fields_set:
        raise InvalidInput("calibration", "the profile gives the MFU: give mfu or calibration, not both")
    if body.model is None:
        raise InvalidInput("model", "give the model whose step the calibration profile times")
    if profile.catalogue_id != acc.id:
        where = profile.catalogue_id or "a device outside the catalogue (POST /api/v1/time/step times one)"
        raise InvalidInput("calibration",
                           f"{profile.label} was measured on {where}, not {gpu_label(body.gpu)}")
    key = dtypes.peak_key(body.dtype)
    precision = _PRECISION.get(key)
    if precision is None:
        raise InvalidInput("dtype", f"a calibrated step runs in float32 or bfloat16, not {key}")
    c = step.counts(engine_model(body.model), batch_size=body.batch_size, seq_len=body.seq_len,
                    precision=precision, optimizer="adamw")
    timed = step.calibrated(c, profile, surface.fit(list(profile.matmul), step.MATMUL_DTYPE[precision]),
                            precision)
    mfu = c.flops / (timed.seconds * hardware.peak_flop_per_sec(acc, body.dtype))
    said = (f"calibrated: {profile.label}'s {precision} step of the model at {body.batch_size} x "
            f"{body.seq_len} tokens ({timed.seconds:.4g} s: its FLOPs over that x the dense peak, "
            f"MFU {mfu:.3g})")
    if profile.sustained_ratio is not None:
        mfu *= min(1.0, profile.sustained_ratio.value)
        said += (f", x its sustained-over-burst ratio {profile.sustained_ratio.value:.3g} (jobs "
                 f"{', '.join(map(str, profile.sustained_ratio.jobs))})")
    return min(mfu, 1.0), "; ".join([said, *profile.flags])


# The train_step precision whose MFU stands for each peak dtype.
_PRECISION = {"bfloat16": "bf16_autocast", "float32": "fp32"}


class NotMeasured(InvalidInput):
    """No train_step MFU measured yet; `launch` is the probe that would measure it, as the
    dashboard's launch form takes it ({probe, precision})."""

    def __init__(self, field: str, message: str, launch: dict[str, str]) -> None:
        super().__init__(field, message)
        self.launch = launch

    def __reduce__(self) -> tuple:
        return type(self), (self.field, self.message, self.launch)


def measured_mfu(body: TrainingTimeRequest, here: Here) -> tuple[float, str]:
    """The calibration's train-step MFU for this dtype, measured on this very GPU model."""
    key = dtypes.peak_key(body.dtype)
    precision = _PRECISION.get(key)
    if precision is None:
        raise InvalidInput("mfu", f"train_step measures fp32 and bf16_autocast, not {key}; give a number")
    on = here.device
    measured = here.calibration.train_step.get(precision)
    if measured is None or measured.mfu is None:
        job = f'{{"probe": "train_step", "params": {{"precision": "{precision}"}}}}'
        raise NotMeasured("mfu", f"no train_step probe with precision {precision} has measured MFU on this "
                                 f"server's device ({on.name}) yet: run one (the benchmarks page, or POST "
                                 f"/api/v1/jobs {job}), or give a number",
                          {"probe": "train_step", "precision": precision})
    if on.catalogue_id != body.gpu:  # a custom GPU is never this server's catalogue part
        raise InvalidInput("mfu", f"the measured MFU is from {on.catalogue_id}, not {gpu_label(body.gpu)}")
    return measured.mfu, (f"measured: train_step job {measured.job_id} ({measured.model}, {precision}) "
                          f"on {on.name} at {measured.measured_at.isoformat()}")


def mfu(body: MfuRequest) -> timing.Utilization:
    if (body.gpu is None) == (body.peak_flop_per_sec is None):
        raise InvalidInput("gpu", "give a gpu or peak_flop_per_sec, not both or neither")
    acc = accelerator(body.gpu, body.gpu_overrides)
    peak = body.peak_flop_per_sec if acc is None else hardware.peak_flop_per_sec(acc, body.dtype)
    return timing.mfu(flops=body.flops, seconds=body.seconds, peak_flop_per_sec=peak, num_gpus=body.num_gpus)
