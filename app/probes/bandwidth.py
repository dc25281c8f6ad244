"""The bandwidth probe: the device's memory bandwidth, a device-to-device copy, beside the
catalogue's. Its torch side is app/bench/bandwidth.py."""

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from app import numbers
from app.accounting.calibration.profile import Profile
from app.accounting.records import RECORD
from app.inputs.fields import byte_count
from app.probes import energy, sustained
from app.probes.base import Kind, Least, Need, Probe, sustained_least, timer_least
from app.probes.faces import Faces, Metric, Table, compare_lines, where
from app.probes.ledger import Ledger, Pair, positive
from app.probes.params import MIB, SustainParams
from app.probes.results import Environment, Stats
from app.probes.sustained import Sustained


class BandwidthParams(SustainParams):
    size_bytes: byte_count(MIB, 64 * 2**30) | None = Field(
        None, description="Bytes per buffer (two buffers: source and destination). Default 1 GiB on "
        "CUDA, far larger than any L2; 64 MiB on CPU.")


# Bytes per buffer: on CUDA far larger than any L2.
BANDWIDTH_BYTES = {"cuda": 2**30, "cpu": 64 * MIB}


def bandwidth_bytes(params: BandwidthParams, kind: str) -> int:
    return params.size_bytes or BANDWIDTH_BYTES[kind]


@dataclass(slots=True)
class BandwidthResult:
    probe: Literal["bandwidth"]
    environment: Environment
    size_bytes: int
    """One buffer; the copy reads one and writes the other."""
    bytes_moved: int
    """Bytes read plus bytes written per copy: 2 x size_bytes."""
    time: Stats
    gb_per_sec: float
    """bytes_moved / median time / 10^9."""
    best_gb_per_sec: float
    catalogue_gb_per_sec: float | None
    percent_of_catalogue: float | None
    predicted_seconds: float | None
    """bytes_moved at the catalogue's bandwidth."""
    sustained: Sustained | None = None
    """With sustain_s: the copy run back to back."""

    __pydantic_config__ = RECORD


def need(params: BandwidthParams, kind: Kind) -> Need:
    return 2 * bandwidth_bytes(params, kind), "params.size_bytes"  # source and destination


def least_seconds(params: BandwidthParams, kind: Kind) -> Least:
    return sustained_least(timer_least(params, 1), params)


def headline(r: BandwidthResult) -> list[Metric]:
    pct = r.percent_of_catalogue
    return [Metric("median", "copy, median", r.gb_per_sec, "gb_per_sec"),
            Metric("best", "copy, best iteration", r.best_gb_per_sec, "gb_per_sec"),
            *([] if pct is None else [Metric("catalogue", "of the catalogue's bandwidth (median)", pct / 100,
                                             "fraction")]),
            *sustained.metrics(r.sustained)]


def tables(r: BandwidthResult) -> list:
    row = [numbers.sig(r.size_bytes / 2**20), numbers.sig(r.bytes_moved / 1e9), numbers.ms(r.time.median),
           numbers.ms(r.predicted_seconds), numbers.sig(r.gb_per_sec), numbers.sig(r.best_gb_per_sec),
           numbers.sig(r.catalogue_gb_per_sec), numbers.percent(None if r.percent_of_catalogue is None
                                                                else r.percent_of_catalogue / 100)]
    headers = ["buffer MiB", "moved GB", "median ms", "at catalogue ms", "GB/s (median)",
               "GB/s (best iteration)", "catalogue GB/s", "of catalogue"]
    if energy.shown([r.time]):
        headers, row = headers + energy.headers("copy", "GB/J"), row + energy.cells(r.time, rate="GB/J")
    return [where(r), Table(headers, [row], 0), *energy.note(r),
            *sustained.tables(r.sustained, "device copy")]


def differences(a: BandwidthResult, b: BandwidthResult) -> list[str]:
    return [] if a.size_bytes == b.size_bytes else [
        f"buffer size: A {numbers.gb(a.size_bytes, 3)}, B {numbers.gb(b.size_bytes, 3)}"]


def overlay(a: BandwidthResult, b: BandwidthResult) -> dict:
    return compare_lines(a, b, lambda r: [r], lambda r: "copy", lambda r: r.size_bytes,
                         lambda r: r.gb_per_sec, x_label="bytes", y_label="GB/s (median)",
                         caption="GB/s (median) against bytes per copy: run A solid, run B dashed.")


def _datasheet_pairs(params: Any, result: BandwidthResult) -> list[Pair]:
    if result.catalogue_gb_per_sec is None:
        return []
    return positive([Pair("copy_bytes_per_s", "bandwidth", result.catalogue_gb_per_sec * 1e9,
                          result.gb_per_sec * 1e9, f"{result.size_bytes:,} bytes a buffer")])


def _calibrated_pairs(params: Any, result: BandwidthResult, profile: Profile) -> list[Pair]:
    if profile.copy_bytes_per_s is None:
        return []
    return positive([Pair("copy_bytes_per_s", "bandwidth", profile.copy_bytes_per_s.value, result.gb_per_sec * 1e9,
                          f"{result.size_bytes:,} bytes a buffer")])


PROBE = Probe(
    "bandwidth", "device memory bandwidth, a device-to-device copy, beside the catalogue's", BandwidthParams,
    BandwidthResult, "app.bench.bandwidth:run", need, least_seconds,
    faces=Faces(headline=headline, tables=tables, page="probes/bandwidth.html", form=(),
                differences=differences, overlay=overlay, sustained="The copy"),
    ledger=Ledger(_datasheet_pairs, _calibrated_pairs))
