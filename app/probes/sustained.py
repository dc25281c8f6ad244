"""What a probe's sustained run reports (app/bench/sustain.py): its rate over many seconds of
back-to-back work, and what NVML saw of the GPU meanwhile. A burn-in reads it to find the GPU
that runs slower than its siblings, and why."""

from dataclasses import dataclass, field
from typing import Literal

from app import numbers
from app.accounting.records import RECORD
from app.probes.energy import Energy
from app.probes.faces import Metric, Table


@dataclass(slots=True)
class Range:
    mean: float
    min: float
    max: float

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Sustained:
    """The probe's main work run back to back for `sustain_s` seconds (no L2 flushes between
    iterations), with NVML sampling the GPU every 50 ms (app/bench/nvml.py). The NVML fields are
    null without NVIDIA's driver (a CPU), where only the rate is measured."""

    seconds: float
    iterations: int
    seconds_per_iteration: float
    flop_per_sec: float | None
    """FLOPs of one iteration (the calculators') x iterations / seconds; null for a copy."""
    bytes_per_sec: float | None
    """Bytes read plus written x iterations / seconds; the bandwidth probe's rate."""
    energy_joules: float | None
    energy_source: Literal["counter", "power_x_time"] | None
    """counter: NVML's total-energy counter (millijoules, updated about every 100 ms on an H200),
    its rate between the first and last update seen (read at both ends in results before
    `energy`); power_x_time: the sampled power integrated where that counter is missing."""
    average_power_watts: float | None
    """energy_joules / seconds."""
    joules_per_iteration: float | None
    flop_per_sec_per_watt: float | None
    """FLOPs done / joules: FLOP/s per average watt."""
    power_watts: Range | None
    sm_clock_mhz: Range | None
    memory_clock_mhz: Range | None
    temperature_c: Range | None
    reasons: dict[str, float] = field(default_factory=dict)
    """NVML clock-event reason -> the share of samples it was active in (power_cap, thermal,
    hw_slowdown, hw_thermal, power_brake, applications_clocks, idle, sync_boost, display_clocks)."""
    slowdowns: list[str] = field(default_factory=list)
    """The reasons seen that slow a busy GPU (not idle, sync_boost or display_clocks)."""
    samples: int = 0
    energy: Energy | None = None
    """The same window by the probes' energy rule (app/bench/energy.py); energy_joules,
    energy_source and average_power_watts above are read from it. Null without NVML and in
    results stored before it was recorded."""

    __pydantic_config__ = RECORD


# --- faces: the job page's figures and `tally probe`'s table (the page's block is
# templates/partials/sustained.html). GB = 10^9 bytes; W, J, MHz, degrees C. -----------------------

def metrics(s: Sustained | None, prefix: str = "") -> list[Metric]:
    """A sustained run's rate and average power, when it ran."""
    if s is None:
        return []
    at = f"{numbers.sig(s.seconds)} s"
    rate = (Metric(f"{prefix}sustained", f"{prefix}sustained", s.flop_per_sec, "flop_per_sec", at)
            if s.flop_per_sec is not None else
            Metric(f"{prefix}sustained", f"{prefix}sustained", None if s.bytes_per_sec is None
                   else s.bytes_per_sec / 1e9, "gb_per_sec", at))
    watts = [] if s.average_power_watts is None else [
        Metric(f"{prefix}watts", f"{prefix}average power, sustained", s.average_power_watts, "watts")]
    return [rate, *watts]


def rate(s: Sustained | None) -> str:
    """The rate held: TFLOP/s for work with FLOPs, GB/s for a copy."""
    if s is None:
        return "n/a"
    if s.flop_per_sec is not None:
        return f"{numbers.per(s.flop_per_sec, 1e12)} TFLOP/s"
    return f"{numbers.per(s.bytes_per_sec, 1e9)} GB/s"


def reasons(s: Sustained) -> str:
    return ", ".join(f"{name} {numbers.percent(share, 0)}" for name, share in s.reasons.items()) or "none"


def row(what: str, s: Sustained) -> list[str]:
    clock = s.sm_clock_mhz
    return [what, numbers.sig(s.seconds), rate(s), numbers.sig(s.average_power_watts),
            numbers.sig(s.joules_per_iteration), numbers.per(s.flop_per_sec_per_watt, 1e9),
            "n/a" if clock is None else f"{clock.mean:.0f} ({clock.min:.0f}-{clock.max:.0f})",
            "n/a" if s.temperature_c is None else f"{s.temperature_c.max:.0f}",
            reasons(s) if s.samples else "no NVML"]


HEADERS = ["sustained", "seconds", "rate held", "watts", "J/iteration", "GFLOP/s per W", "SM MHz (min-max)",
           "max C", "clock-event reasons"]


def table(rows: list[list[str]]) -> Table:
    return Table(HEADERS, rows)


def tables(s: Sustained | None, what: str) -> list[Table]:
    """A probe's sustained run as a table of one row, where it had one."""
    return [] if s is None else [table([row(what, s)])]
