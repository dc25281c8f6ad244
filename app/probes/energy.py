"""The energy a GPU drew for one measurement (app/bench/energy.py measures it): joules over a
window of the same work run back to back, the method that read them, and the figures per unit
of work. Joules, seconds and watts; FLOP per joule and bytes per joule are work over energy.

A result without it (null) says why once, in its environment's energy_note: a CPU has no NVML,
a GPU without NVIDIA's management library has neither the counter nor power readings."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from app import numbers
from app.accounting.records import RECORD


@dataclass(slots=True)
class Energy:
    """The measurement's work run back to back (no L2 flushes, no synchronize between runs) for
    a window long enough for NVML's energy counter to move several times; see app/bench/energy.py
    for why this window and not the timed iterations'. The GPU board's energy as NVML reports
    it: not the host's CPUs, memory or fans."""

    joules: float
    """Over the window: average watts x seconds."""
    seconds: float
    """The window's wall-clock length, from the first launch to the last synchronize."""
    watts: float
    """Average power over the window."""
    method: Literal["energy_counter", "power_x_time"]
    """energy_counter: NVML's total-energy counter (millijoules), its rate between the first and
    the last update seen in the window; power_x_time: the sampled board power integrated over
    time (trapezoids), where the counter is missing or moved too few times."""
    samples: int
    """NVML readings taken in the window."""
    counter_updates: int | None
    """Times the counter changed in the window; null where it is missing."""
    iterations: int
    """Runs of the work in the window (a train step's: whole steps)."""
    seconds_per_iteration: float
    """seconds / iterations: the back-to-back pace, to hold beside the timed median."""
    joules_per_iteration: float
    """joules / iterations: for a train step, joules per step."""
    joules_per_token: float | None = None
    """Train steps: per token trained (batch x sequence); prefill: per prompt token; decode: per
    token generated (a step's joules / batch)."""
    flop_per_joule: float | None = None
    """A matmul's FLOPs (2 m k n) / joules_per_iteration."""
    bytes_per_joule: float | None = None
    """A copy's bytes moved (read plus written, or sent over the bus) / joules_per_iteration."""

    __pydantic_config__ = RECORD


# --- faces: the tables' energy columns, shown only where a run recorded them, and the
# environment's one line on how energy was read (or why it was not: a CPU, no NVML). -------------

def shown(stats: Iterable[Any]) -> bool:
    """Whether any of these Stats carries energy: the columns appear only then."""
    return any(getattr(s, "energy", None) is not None for s in stats)


def headers(per: str, rate: str | None = None) -> list[str]:
    """`per`: the unit of one iteration ("iter", "step", "token"); `rate`: "GFLOP/J" or "GB/J"."""
    return [f"J/{per}", "W", *([rate] if rate else [])]


def cells(stats: Any, per_token: bool = False, rate: str | None = None) -> list[str]:
    """J per iteration (or per token), average W, and FLOP or bytes per joule in 10^9."""
    e = stats.energy
    if e is None:
        return ["n/a", "n/a", *(["n/a"] if rate else [])]
    out = [numbers.sig(e.joules_per_token if per_token else e.joules_per_iteration), numbers.sig(e.watts)]
    if rate == "GFLOP/J":
        out.append(numbers.per(e.flop_per_joule, 1e9))
    elif rate == "GB/J":
        out.append(numbers.per(e.bytes_per_joule, 1e9))
    return out


def note(result: Any) -> list[str]:
    """The environment's energy_note as the table's last line; none for results from before it."""
    said = getattr(result.environment, "energy_note", None)
    return [f"energy: {said}"] if said else []
