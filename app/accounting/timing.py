"""Training time and model FLOPs utilization (MFU).

MFU = achieved FLOP/s / promised FLOP/s, with the promise taken as the dense
peak for the dtype (PaLM, Chowdhery et al. 2022, appendix B).
"""

from dataclasses import dataclass

from app.accounting.energy import Energy
from app.accounting.records import RECORD
from app.accounting.units import SECONDS_PER_DAY, SECONDS_PER_HOUR


@dataclass(slots=True)
class TrainingTime:
    """Wall-clock time for a training run at a given MFU."""

    flops: float
    """Total training FLOPs."""
    flops_source: str
    """"given", or "6*params*tokens" (forward 2 + backward 4 FLOPs per parameter per token)."""
    peak_flop_per_sec_per_gpu: float
    """Dense peak of one GPU in the chosen dtype."""
    num_gpus: int
    mfu: float
    mfu_source: str
    """"given", "default" (the request left mfu out), or which measurement on this server it came from."""
    achieved_flop_per_sec: float
    """peak x num_gpus x mfu: the whole cluster's sustained rate."""
    seconds: float
    hours: float
    days: float
    gpu_hours: float
    cost: float | None
    """gpu_hours x price_per_gpu_hour, in `currency`; null when no price is given."""
    currency: str
    """ISO 4217 code of the price and the cost, as given (never converted)."""
    energy: Energy | None = None
    """kWh and CO2e of the gpu_hours, every input stated (app/accounting/energy.py); null where the
    catalogue lists no board power for the gpu and no power_watts was given."""

    __pydantic_config__ = RECORD


def training_flops(params: float, tokens: float) -> float:
    """6 FLOPs per parameter per token: 2 forward, 4 backward (Kaplan et al. 2020)."""
    return 6 * params * tokens


def training_time(
    *, flops: float, flops_source: str, peak_flop_per_sec: float, num_gpus: int, mfu: float,
    mfu_source: str = "given", price_per_gpu_hour: float | None = None, currency: str = "USD",
) -> TrainingTime:
    achieved = peak_flop_per_sec * num_gpus * mfu
    seconds = flops / achieved
    gpu_hours = seconds * num_gpus / SECONDS_PER_HOUR
    return TrainingTime(
        flops=flops, flops_source=flops_source, peak_flop_per_sec_per_gpu=peak_flop_per_sec,
        num_gpus=num_gpus, mfu=mfu, mfu_source=mfu_source, achieved_flop_per_sec=achieved, seconds=seconds,
        hours=seconds / SECONDS_PER_HOUR, days=seconds / SECONDS_PER_DAY, gpu_hours=gpu_hours,
        cost=None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour, currency=currency,
    )


@dataclass(slots=True)
class Utilization:
    """Achieved against promised FLOP/s."""

    flops: float
    seconds: float
    num_gpus: int
    achieved_flop_per_sec: float
    """flops / seconds, over all GPUs."""
    promised_flop_per_sec: float
    """Dense peak x num_gpus."""
    mfu: float
    warnings: list[str]

    __pydantic_config__ = RECORD


def mfu(*, flops: float, seconds: float, peak_flop_per_sec: float, num_gpus: int) -> Utilization:
    achieved = flops / seconds
    promised = peak_flop_per_sec * num_gpus
    ratio = achieved / promised
    warnings = []
    if ratio > 1:
        warnings.append(
            "MFU above 1 is impossible against a dense peak: check that `flops` counts each "
            "multiply-add once as 2 FLOPs, and that the peak is dense, not the 2:4-sparse "
            "datasheet figure")
    return Utilization(flops=flops, seconds=seconds, num_gpus=num_gpus,
                       achieved_flop_per_sec=achieved, promised_flop_per_sec=promised,
                       mfu=ratio, warnings=warnings)
