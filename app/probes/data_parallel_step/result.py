"""What the data_parallel_step probe reports: plain dataclasses, torch-free. Seconds, bytes and
bytes/s unless a name says otherwise."""

from dataclasses import dataclass
from typing import Literal

from app.accounting.records import RECORD
from app.probes.results import Environment, MemoryComparison, Stats


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
