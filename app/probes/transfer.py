"""The transfer probe: host <-> device copies, pageable and pinned, blocking and not, by size.
Its torch side is app/bench/transfer.py."""

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from app import numbers
from app.accounting.records import RECORD
from app.inputs.fields import byte_count
from app.probes import energy
from app.probes.base import Kind, Least, Need, Probe, timer_least
from app.probes.faces import Faces, Metric, Table, compare_lines, skipped, where
from app.probes.params import ProbeParams
from app.probes.past import Past
from app.probes.results import Environment, Skipped, Stats


class TransferParams(ProbeParams):
    sizes_bytes: Annotated[list[byte_count(1024, 16 * 2**30)],  # type: ignore[valid-type]
                           Field(min_length=1, max_length=32)] | None = Field(
        None, description="Default: 4 KiB to 1 GiB in steps of 4x on CUDA; 4 KiB to 16 MiB on CPU.")


# Host <-> device copy sizes in bytes: 4 KiB up in steps of 4x, to 1 GiB on CUDA and 16 MiB on CPU.
TRANSFER_SIZES = {"cuda": tuple(4**i * 1024 for i in range(1, 11)),
                  "cpu": tuple(4**i * 1024 for i in range(1, 8))}


def transfer_sizes(params: TransferParams, kind: str) -> list[int]:
    return list(params.sizes_bytes or TRANSFER_SIZES[kind])


@dataclass(slots=True)
class TransferPoint:
    size_bytes: int
    direction: Literal["host_to_device", "device_to_host"]
    host_memory: Literal["pageable", "pinned"]
    non_blocking: bool
    time: Stats
    gb_per_sec: float
    best_gb_per_sec: float

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class TransferResult:
    probe: Literal["transfer"]
    environment: Environment
    points: list[TransferPoint]
    skipped: list[Skipped]
    note: str

    __pydantic_config__ = RECORD


def need(params: TransferParams, kind: Kind) -> Need:
    # The device buffer, plus a pageable and a pinned host copy when host and device are one.
    return max(transfer_sizes(params, kind)) * (1 if kind == "cuda" else 2), "params.sizes_bytes"


def least_seconds(params: TransferParams, kind: Kind) -> Least:
    # Per size: two directions, blocking and not, from pageable and (CUDA only) pinned memory.
    return timer_least(params, len(transfer_sizes(params, kind)) * 2 * 2 * (2 if kind == "cuda" else 1))


def mode(t: TransferPoint) -> str:
    return f"{t.direction.replace('_', ' ')}, {t.host_memory}{', non_blocking' if t.non_blocking else ''}"


def headline(r: TransferResult) -> list[Metric]:
    largest = max((t.size_bytes for t in r.points), default=0)
    return [Metric(f"{mode(t)}@{t.size_bytes}", f"{mode(t)}, median", t.gb_per_sec, "gb_per_sec",
                   numbers.human_bytes(t.size_bytes, binary=False))
            for t in r.points if t.size_bytes == largest]


def tables(r: TransferResult) -> list:
    rows = [[numbers.sig(p.size_bytes / 1024), p.direction.replace("_", " "), p.host_memory,
             "yes" if p.non_blocking else "no", numbers.ms(p.time.median), numbers.sig(p.gb_per_sec),
             numbers.sig(p.best_gb_per_sec)] for p in r.points]
    headers = ["size KiB", "direction", "host memory", "non_blocking", "median ms", "GB/s (median)",
               "GB/s (best iteration)"]
    if energy.shown(p.time for p in r.points):
        headers += energy.headers("copy", "GB/J")
        rows = [row + energy.cells(p.time, rate="GB/J") for row, p in zip(rows, r.points, strict=True)]
    return [where(r), Table(headers, rows, 0), r.note, *skipped(r), *energy.note(r)]


def charts(r: TransferResult, past: Past) -> dict[str, dict]:
    series: dict[str, list] = {}
    for t in r.points:
        series.setdefault(mode(t), []).append({"x": t.size_bytes, "y": t.gb_per_sec})
    dashed = "; dashed lines: pageable host memory" if any("pageable" in k for k in series) else ""
    return {"transfer": {"type": "transfer_sizes", "series": series, "caption":
                         f"GB/s (median) against bytes per copy, per direction and host memory{dashed}. "
                         f"{r.note}"}}


def differences(a: TransferResult, b: TransferResult) -> list[str]:
    sizes_a, sizes_b = (", ".join(f"{s:,}" for s in sorted({t.size_bytes for t in r.points})) for r in (a, b))
    return [] if sizes_a == sizes_b else [f"sizes (bytes): A {sizes_a}, B {sizes_b}"]


def overlay(a: TransferResult, b: TransferResult) -> dict:
    return compare_lines(a, b, lambda r: r.points, mode, lambda t: t.size_bytes, lambda t: t.gb_per_sec,
                         x_label="bytes", y_label="GB/s (median)",
                         caption="GB/s (median) against bytes per copy: run A solid, run B dashed.")


PROBE = Probe(
    "transfer", "host <-> device copies, pageable and pinned, by size", TransferParams, TransferResult,
    "app.bench.transfer:run", need, least_seconds,
    faces=Faces(headline=headline, tables=tables, charts=charts, page="probes/transfer.html", form=(),
                differences=differences, overlay=overlay))
