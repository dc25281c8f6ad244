"""What every probe's result is made of: plain dataclasses, torch-free, so the server can
declare them as response schemas and the child can serialise them. Seconds, bytes and FLOP/s
unless a name says otherwise; GB/s is 10^9 bytes per second. Each probe's own result lives in
its module."""

import statistics
from dataclasses import dataclass, field
from typing import Literal

from app.accounting.records import RECORD
from app.probes.energy import Energy


@dataclass(slots=True)
class Stats:
    """Seconds per timed iteration, each timed on its own (CUDA events on a GPU)."""

    median: float
    p20: float
    p80: float
    mean: float
    best: float
    """The fastest iteration."""
    iterations: int
    energy: Energy | None = None
    """On a GPU with NVML: the same work run back to back after the timed iterations
    (app/bench/energy.py); of a train step's Stats, only the whole step's carries it (its
    phases run together). Null on a CPU, without NVML, and in results stored before it was
    recorded (the environment's energy_note says which)."""

    __pydantic_config__ = RECORD


def stats(seconds: list[float]) -> Stats:
    """The Stats of timed iterations, in seconds: median, p20 and p80 (inclusive quantiles, so
    between the fastest and the slowest), mean, best."""
    ordered = sorted(seconds)
    if len(ordered) == 1:
        p20 = p80 = ordered[0]
    else:
        cuts = statistics.quantiles(ordered, n=5, method="inclusive")
        p20, p80 = cuts[0], cuts[3]
    return Stats(median=statistics.median(ordered), p20=p20, p80=p80, mean=statistics.fmean(ordered),
                 best=ordered[0], iterations=len(ordered))


@dataclass(slots=True)
class BusyProcess:
    """Another process that used the host's CPUs while a probe ran."""

    pid: int
    name: str
    cpu_cores: float
    """CPU seconds it used over the probe's seconds: 1.0 is one core busy throughout."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Contention:
    """What else ran on the host while the probe ran (its whole run: warm-ups and timed
    iterations), from /proc (app/bench/contention.py)."""

    seconds: float
    """The window watched."""
    load_before: float | None
    """/proc/loadavg's 1-minute load as the probe started (a lagging, smoothed figure)."""
    load_after: float | None
    cpu_count: int
    others_cpu_cores: float
    """Cores the other processes used together, on average over the window."""
    busy: list[BusyProcess] = field(default_factory=list)
    """The others that used a tenth of a core or more, busiest first."""
    gpu_processes: int | None = None
    """Processes with a context on the probe's GPU, its own included, the most NVML saw at the
    start or the end; null on a CPU or without NVML."""
    quiet: bool = True
    """False when the others used half a core or more, the load average stood above the cores
    (by more than one: the probe's own threads count in it), or another process held the probe's
    GPU: the numbers may be slower than the device alone."""
    reasons: list[str] = field(default_factory=list)
    """Why it is not quiet, one line each; empty when quiet (and in results stored before)."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Environment:
    """Where and how a probe ran."""

    device: Literal["cuda", "cpu"]
    device_name: str
    catalogue_id: str | None
    """The hardware catalogue's entry for this device; null when it is not listed (CPUs)."""
    sm_count: int | None
    compute_capability: str | None
    memory_bytes: int | None
    torch_version: str
    cuda_version: str | None
    driver_version: str | None
    cudnn_version: int | None
    tf32_matmul: bool
    """torch.backends.cuda.matmul.allow_tf32 as the probe ran (the matmul probe sets it per dtype)."""
    tf32_cudnn: bool
    float32_matmul_precision: str
    cpu_threads: int
    python_version: str
    platform: str
    seed: int
    """torch, numpy (when installed) and random were seeded with it."""
    l2_flush_bytes: int
    """Bytes zeroed before each timed iteration, outside the timed interval."""
    contention: Contention | None = None
    """What else ran meanwhile; null in results stored before it was recorded."""
    energy_note: str | None = None
    """How the energy figures (Stats.energy) were read, or why they are null: a CPU, or no NVML;
    null in results stored before energy was recorded."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Skipped:
    what: str
    reason: str

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class MemoryComparison:
    """Bytes on the device during a training step: the calculators' prediction beside the measurement."""

    predicted: dict[str, int]
    """The calculators' breakdown: parameters, gradients, optimizer_state, master_weights,
    frozen_weights (a fine-tune's), weight_copies, activations, transient (loss or activation
    gradients at the start of backward), inputs, optimizer_temporaries; the live bytes at each
    moment that can be the peak: start_of_backward, lm_head_weight_gradient and
    end_of_backward (transformers), optimizer_step; and total, the largest of them."""
    measured_peak_allocated: int
    """CUDA: torch.cuda.max_memory_allocated after reset_peak_memory_stats. CPU: the peak of
    live tensor storage bytes, tracked op by op through a dispatch mode during one step."""
    measured_reserved: int | None
    """CUDA: torch.cuda.max_memory_reserved (the caching allocator's segments); null on CPU."""
    relative_error: float
    """predicted total / measured peak - 1."""
    method: str

    __pydantic_config__ = RECORD
