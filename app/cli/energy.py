"""The probe tables' energy columns (Stats.energy, app/probes/energy.py): joules per unit and
average watts beside the times, shown only where a run recorded them; and the environment's one
line on how energy was read, or why it was not (a CPU, no NVML)."""

from collections.abc import Iterable
from typing import Any


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


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
        return ["-", "-", *(["-"] if rate else [])]
    joules = e.joules_per_token if per_token else e.joules_per_iteration
    out = [_g(joules), _g(e.watts)]
    if rate == "GFLOP/J":
        out.append(_g(None if e.flop_per_joule is None else e.flop_per_joule / 1e9))
    elif rate == "GB/J":
        out.append(_g(None if e.bytes_per_joule is None else e.bytes_per_joule / 1e9))
    return out


def note(result: Any) -> list[str]:
    """The environment's energy_note as the table's last line; none for results from before it."""
    said = getattr(result.environment, "energy_note", None)
    return [f"energy: {said}"] if said else []
