"""What the collectives probe reports: plain dataclasses, torch-free. Seconds, bytes and
bytes/s unless a name says otherwise."""

from dataclasses import dataclass
from typing import Literal

from app.accounting.comm.collectives import FittedLink
from app.accounting.records import RECORD
from app.probes.collectives.spanning import Spanning
from app.probes.results import Environment, Skipped, Stats


@dataclass(slots=True)
class CollectivePoint:
    """One collective at one size, over every rank. Sizes and bandwidths as nccl-tests
    (doc/PERFORMANCE.md) defines them."""

    collective: str
    size_bytes: int
    """nccl-tests' S: each rank's buffer (all_reduce, broadcast), the all_gather's output, the
    reduce_scatter's input, the all_to_all's send buffer (n pieces of S / n each)."""
    elements: int
    """S over the dtype's bytes."""
    time: Stats
    """Per timed run, the slowest rank's seconds (nccl-tests' -a 3; its default, -a 1, averages
    the ranks): the slowest is what the next step waits for."""
    algbw_bytes_per_sec: float
    """S / median time."""
    busbw_bytes_per_sec: float
    """algbw x bus_factor."""
    bus_factor: float
    errors: int | None
    """Elements, over every rank, that differ from the expected values; null when not checked."""
    fitted_seconds: float
    """This run's fitted latency-bandwidth model (CollectivesResult.fits) at S."""
    fitted_busbw_bytes_per_sec: float
    catalogue_seconds: float | None
    """The communication engine at the catalogue's link for this GPU (one node); null on CPU or
    an unlisted GPU."""
    catalogue_busbw_bytes_per_sec: float | None
    joules_per_run_all_ranks: float | None = None
    """Every rank's GPU together: the sum over ranks of each one's joules per run, from the same
    number of back-to-back runs on every rank (app/bench/energy.py); time.energy is rank 0's GPU
    alone (its bytes_per_joule: S over rank 0's joules). Null on CPUs, without NVML, and in
    results stored before it was recorded."""
    watts_all_ranks: float | None = None
    """The ranks' average watts over that window, summed."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class CatalogueLink:
    bytes_per_sec: float
    """The catalogue's interconnect_bytes_per_sec: per GPU per direction."""
    latency_s: float
    """NCCL's per-step ring latency for the link's kind (NVLink or PCIe)."""
    base_latency_s: float
    source: str

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class CollectivesResult:
    probe: Literal["collectives"]
    environment: Environment
    backend: Literal["nccl", "gloo"]
    ranks: int
    dtype: str
    iterations: int
    warmup_iterations: int
    checked: bool
    check_passed: bool | None
    """Every checked point had 0 errors; null when nothing was checked."""
    points: list[CollectivePoint]
    fits: list[FittedLink]
    catalogue_link: CatalogueLink | None
    skipped: list[Skipped]
    assumptions: list[str]
    spanning: Spanning | None = None
    """A job on several boxes: each box's link and each pair's measured alone, and the points
    above predicted from them (app/probes/collectives/spanning.py); null on one box."""

    __pydantic_config__ = RECORD
