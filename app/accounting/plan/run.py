"""How long a whole training run takes on the layout search's fastest layout: its optimizer
steps (training tokens over tokens per step, whole steps) times that layout's step time, in
seconds, days and GPU-hours, and its cost at a price per GPU-hour. The same arithmetic as the
time calculator's (app/accounting/timing.py) with the step time the search found, not an MFU."""

import math
from dataclasses import dataclass

from app.accounting.records import RECORD
from app.accounting.units import SECONDS_PER_DAY, SECONDS_PER_HOUR


@dataclass(slots=True)
class RunLength:
    training_tokens: int
    steps: int
    """ceil(training_tokens / tokens per step)."""
    step_seconds: float
    """The fastest fitting layout's."""
    seconds: float
    days: float
    gpu_hours: float
    """seconds x every GPU of the run."""
    mfu: float
    """The fastest layout's: what the time calculator (POST /api/v1/time/training) needs to agree."""
    cost: float | None
    """gpu_hours x price_per_gpu_hour, in `currency`; null without a price."""
    currency: str

    __pydantic_config__ = RECORD


def length(*, training_tokens: int, tokens_per_step: int, step_seconds: float, mfu: float, gpus: int,
           price_per_gpu_hour: float | None, currency: str) -> RunLength:
    steps = math.ceil(training_tokens / tokens_per_step)
    seconds = steps * step_seconds
    gpu_hours = seconds * gpus / SECONDS_PER_HOUR
    return RunLength(training_tokens=training_tokens, steps=steps, step_seconds=step_seconds, seconds=seconds,
                     days=seconds / SECONDS_PER_DAY, gpu_hours=gpu_hours, mfu=mfu,
                     cost=None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour,
                     currency=currency)
