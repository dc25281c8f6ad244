"""The energy a GPU drew for one measurement (app/bench/energy.py measures it): joules over a
window of the same work run back to back, the method that read them, and the figures per unit
of work. Joules, seconds and watts; FLOP per joule and bytes per joule are work over energy.

A result without it (null) says why once, in its environment's energy_note: a CPU has no NVML,
a GPU without NVIDIA's management library has neither the counter nor power readings."""

from dataclasses import dataclass
from typing import Literal

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
