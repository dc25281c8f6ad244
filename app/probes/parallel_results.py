"""What the probes over several ranks report (collectives, data_parallel_step): plain
dataclasses, torch-free, as results.py's are. Seconds, bytes and bytes/s unless a name says
otherwise."""

from dataclasses import dataclass
from typing import Literal

from app.accounting.comm.collectives import FittedLink
from app.accounting.records import RECORD
from app.probes.results import Environment, MemoryComparison, Skipped, Stats


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

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class DataParallelStepResult:
    probe: Literal["data_parallel_step"]
    environment: Environment
    """Rank 0's device."""
    strategy: Literal["ddp", "fsdp"]
    backend: Literal["nccl", "gloo"]
    ranks: int
    zero_stage: int
    """The memory engine's stage the strategy matches: ddp 0, fsdp 3."""
    model: str
    params: int
    batch_size: int
    """Per rank."""
    seq_len: int
    tokens_per_step_per_rank: int
    optimizer: str
    precision: str
    step: Stats
    """Rank 0's step time over the timed steps."""
    forward: Stats
    backward: Stats
    """Includes the gradient all-reduces (ddp) or the all-gathers and reduce-scatters (fsdp) that
    backward waits for."""
    optimizer_step: Stats
    slowest_rank_step_s: float
    """The largest of the ranks' median step times."""
    one_rank_step: Stats
    """The plain model's step on rank 0 alone, same per-rank batch, in the same job."""
    exposed_communication_s: float
    """step.median - one_rank_step.median: communication compute did not hide (may be negative
    within noise)."""
    tokens_per_sec: float
    """Every rank's tokens over rank 0's median step."""
    tokens_per_sec_per_rank: float
    one_rank_tokens_per_sec: float
    scaling_efficiency: float
    """tokens_per_sec_per_rank / one_rank_tokens_per_sec = one_rank_step.median / step.median."""
    memory: MemoryComparison
    """The busiest rank's peak (peak_bytes_most_rank) beside the memory engine's for the strategy's ZeRO
    stage over `ranks`: the rank a plan must fit."""
    peak_bytes_most_rank: int
    peak_bytes_least_rank: int
    loss_first: float
    loss_last: float
    assumptions: list[str]
    joules_per_step_all_ranks: float | None = None
    """Every rank's GPU together: the sum over ranks of each one's Stats.energy per step (each
    rank ran the same number of back-to-back steps, app/bench/energy.py). step.energy is rank
    0's GPU alone. Null on CPUs, without NVML, and in results stored before it was recorded."""
    watts_all_ranks: float | None = None
    """The ranks' average watts, summed."""
    joules_per_token_all_ranks: float | None = None
    """joules_per_step_all_ranks / every rank's tokens of a step (ranks x batch x sequence)."""

    __pydantic_config__ = RECORD
