"""What a probe's result says of Tally's accuracy: (prediction, measurement) pairs, each with its
metric, its kind and the mode the prediction was made in. A probe declares them in its own module
(its `Ledger`, in app/probes/base.py's record); app/measured/accuracy.py stores them per job and
reports the errors.

Modes: "datasheet", what a calculator answers from the catalogue and its defaults; "calibrated",
what it answers from a profile of the device (app/accounting/calibration/) that was not fitted on
the job itself.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from app import device
from app.accounting import hardware
from app.accounting.calibration.profile import Profile

Kind = Literal["time", "memory", "energy", "bandwidth"]
Mode = Literal["datasheet", "calibrated"]


@dataclass(frozen=True, slots=True)
class Pair:
    metric: str
    """What was predicted and measured, e.g. step_seconds, peak_bytes, gemm_seconds."""
    kind: Kind
    predicted: float
    measured: float
    detail: str = ""
    """Where it was taken: a shape, a batch."""

    @property
    def error(self) -> float:
        """predicted / measured - 1: positive when the prediction is too high (too slow, too big)."""
        return self.predicted / self.measured - 1


@dataclass(frozen=True)
class Ledger:
    datasheet: Callable[[Any, Any], list[Pair]]
    """(params as submitted, result) -> the pairs of the datasheet answers."""
    calibrated: Callable[[Any, Any, Profile], list[Pair]] | None = None
    """(params, result, a profile of its device not fitted on it) -> the pairs of the calibrated answers."""


def datasheet_peak(environment: Any, dtype: str) -> tuple[float, str] | None:
    """The dense peak a datasheet answer runs at on the result's device, and its source: the
    catalogue's, or this host's CPU's (app/accounting/cpu.py) where the result was measured on it;
    None where neither is known."""
    if environment.catalogue_id in hardware.catalogue():
        acc = hardware.gpu(environment.catalogue_id)
        if dtype in acc.peak_flop_per_sec:
            return acc.peak_flop_per_sec[dtype], f"{acc.id}'s dense {dtype} peak"
        return None
    if environment.device == "cpu" and environment.device_name == device.cpu_name():
        peak = device.cpu_peak_flop_per_sec()
        return None if peak is None else (peak, "this CPU's cores x clock x FLOPs a cycle")
    return None


def positive(pairs: list[Pair]) -> list[Pair]:
    """The pairs a ratio can be taken of."""
    return [p for p in pairs if p.predicted > 0 and p.measured > 0]
