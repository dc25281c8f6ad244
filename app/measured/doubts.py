"""Whether a stored result can be trusted as the device's speed: not where other work shared the
host or the GPU (its contention), nor where its timed iterations spread widely (a median many
times its fastest iteration says the device was interrupted, whatever /proc saw). The job page
and the compare view warn with these lines; the calibration (app/measured/calibration.py) leaves
such runs out."""

import dataclasses
from typing import Any

WIDE_SPREAD = 2.0
"""A median more than this many times the fastest iteration: timings a quiet device does not give
(a matmul's spread on a quiet GPU or CPU is a few percent)."""


def _plain(result: Any) -> Any:
    """The result as its JSON form reads (pages hold it so; the calibration holds dataclasses)."""
    return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result


def spread(result: Any) -> float | None:
    """The widest median / fastest iteration of any timing (probes.results.Stats) in the result;
    None without timings."""
    widest = None
    for stats in _stats(_plain(result)):
        if stats["best"] > 0 and stats["iterations"] > 1:
            ratio = stats["median"] / stats["best"]
            widest = ratio if widest is None else max(widest, ratio)
    return widest


def contended(result: Any) -> list[str]:
    """Why other work on the host or GPU may have slowed the result, one line each; empty when none."""
    plain = _plain(result)
    contention = (plain.get("environment") or {}).get("contention") if isinstance(plain, dict) else None
    if contention and not contention.get("quiet", True):
        cores = contention.get("others_cpu_cores") or 0.0
        return contention.get("reasons") or [f"other processes used {cores:.2g} cores"]
    return []


def doubts(result: Any) -> list[str]:
    """Why the result may be slower than the device alone, one line each; empty when trusted."""
    plain = _plain(result)
    found = contended(plain)
    wide = spread(plain)
    if wide is not None and wide > WIDE_SPREAD:
        found.append(f"its timings spread widely: a median {wide:.3g} times the fastest iteration")
    return found


def _stats(value: Any, depth: int = 0):
    """Every Stats (as a dict: median, best, iterations) in a result's JSON form."""
    if depth > 8:
        return
    if isinstance(value, dict):
        if {"median", "best", "iterations"} <= value.keys():
            yield value
            return
        for item in value.values():
            yield from _stats(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _stats(item, depth + 1)
