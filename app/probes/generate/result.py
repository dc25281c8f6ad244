"""What the generate probe reports: prefill and decode, each beside the roofline's time and the
serving calculators' bytes. Seconds, bytes and FLOP/s unless a name says otherwise."""

from dataclasses import dataclass, field
from typing import Literal

from app.accounting.records import RECORD
from app.probes.results import Environment, Stats


@dataclass(slots=True)
class Ceilings:
    """This device's compute and memory ceilings, measured in the generate job itself: the
    roofline predictions below are made at these, with efficiencies of 1."""

    matmul_flop_per_sec: float
    """2 m k n over the median time of an (m, k) @ (k, n) matmul at the model's dtype."""
    matmul_size: int
    """m = k = n."""
    matmul_dtype: str
    bandwidth_bytes_per_sec: float
    """A device-to-device copy of copy_bytes: 2 x copy_bytes (read and written) over its median time."""
    copy_bytes: int
    seconds_per_launch: float
    """Median seconds of one tiny in-place add, timed 1000 in a row: the floor one kernel launch
    (on a CPU, one op's dispatch) puts under any op."""
    catalogue_flop_per_sec: float | None
    """The catalogue's dense peak at this dtype, for reference; null on CPU and unlisted GPUs."""
    catalogue_bandwidth_bytes_per_sec: float | None

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class ServingMemory:
    """Bytes on the device while one prefill or decode step runs: the calculators' prediction
    beside the measurement."""

    predicted: dict[str, int]
    """weights (parameters x dtype bytes), kv_cache (app/accounting/inference/kv_cache.py,
    unpaged), workspace (app/accounting/inference/workspace.py) and their total."""
    measured_peak_allocated: int
    """CUDA: torch.cuda.max_memory_allocated over the timed runs after reset_peak_memory_stats,
    less the timer's L2-flush buffer. CPU: the peak of live tensor storage over one run, tracked
    op by op (LiveBytes), weights and cache included."""
    measured_reserved: int | None
    """CUDA: torch.cuda.max_memory_reserved (the flush buffer included); null on CPU."""
    relative_error: float
    """predicted total / measured peak - 1."""
    kv_cache_bytes: int
    """Measured: the cache tensors' nbytes, summed."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Roofline:
    """The calculators' time for the same pass, at this device's measured ceilings."""

    seconds: float
    relative_error: float
    """seconds / measured median - 1."""
    bound: Literal["compute", "memory"]
    flops: float
    """Matmul FLOPs (app/accounting/inference/roofline.py)."""
    bytes: float
    """Bytes moved as the serving calculators count them."""
    launch_floor_seconds: float
    """ops_per_decode_step (or the prefill's ops) x seconds_per_launch: what launching the
    kernels alone takes, without CUDA graphs."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class PrefillPoint:
    """One prompt prefilled (batch 1) into a cache of its length; the LM head on its last token."""

    prompt_len: int
    time: Stats
    tokens_per_sec: float
    """prompt_len / median time."""
    achieved_flop_per_sec: float
    predicted: Roofline
    memory: ServingMemory

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class DecodePoint:
    """batch_size sequences decoding together, one token each per step, greedily."""

    batch_size: int
    context: int
    """Tokens each sequence's cache holds at the last timed step; a timed run decodes the
    decode_steps tokens that end there."""
    time: Stats
    """Seconds per step (per decoded token of each sequence): each timed run's / decode_steps."""
    tokens_per_sec: float
    """batch_size / median step time."""
    achieved_bytes_per_sec: float
    """predicted.bytes / median step time: the bandwidth the step achieved, counted as the
    calculators count its bytes."""
    predicted: Roofline
    """Averaged over the run's decode_steps steps (contexts context - decode_steps + 1 .. context)."""
    predicted_tokens_per_sec: float
    ops_per_step: int
    """Non-view aten ops one step dispatches (on CUDA, roughly its kernel launches)."""
    launch_bound: bool
    """The launch floor exceeds the roofline time: kernel launches, not FLOPs or bytes, set the pace."""
    memory: ServingMemory

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class GraphedDecodePoint:
    """The same decode point run as an engine runs it (app/bench/graphed.py): fixed shapes, the
    step captured once and replayed, sampling on the device, no host sync per token."""

    batch_size: int
    context: int
    time: Stats
    """Seconds per step, as DecodePoint's."""
    tokens_per_sec: float
    achieved_bytes_per_sec: float
    """The eager point's predicted bytes over this step's median time."""
    eager_seconds: float
    """The eager point's median step, beside it."""
    launch_overhead_seconds: float
    """eager_seconds - this median: what launching each op from Python costs a step, measured."""
    predicted: Roofline
    """The roofline at the job's ceilings, as the eager point's."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class GraphedPrefillPoint:
    """A prefill point again with the forward compiled on its own (graph mode, as gpt-fast's
    --compile_prefill runs it): fused kernels, fixed shapes."""

    prompt_len: int
    time: Stats
    tokens_per_sec: float
    eager_seconds: float
    """The eager point's median, beside it."""
    overhead_seconds: float
    """eager_seconds - this median: what eager launches and unfused ops cost the prefill, measured."""
    predicted: Roofline
    """The roofline at the job's ceilings, as the eager point's."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class GenerateResult:
    probe: Literal["generate"]
    environment: Environment
    model: str
    """A preset's name, "custom", or "cpu-default"."""
    params: int
    dtype: str
    weights_bytes: int
    """Measured: the parameters' nbytes (tied embeddings once)."""
    attention: str
    """How the cache is kept and read, in words."""
    decode_steps: int
    ops_per_decode_step: int
    """The first decode point's ops_per_step."""
    cuda_graphs: bool
    """Whether graph mode captured decode steps in CUDA graphs (graphed, graph_capture)."""
    ceilings: Ceilings
    prefill: list[PrefillPoint]
    decode: list[DecodePoint]
    notes: list[str]
    """What the measurements say about themselves: launch-bound points, the device, the dtype."""
    assumptions: list[str]
    graphed: list[GraphedDecodePoint] = field(default_factory=list)
    """The decode points again in graph mode (params.modes), in the same order; empty when eager only."""
    graphed_prefill: list[GraphedPrefillPoint] = field(default_factory=list)
    """The prefill points again, compiled on their own (graph mode), in the same order."""
    prefill_capture: Literal["torch.compile", "static eager"] | None = None
    """How graph mode ran the prefill; null when it did not run."""
    graph_capture: Literal["cuda_graph", "torch.compile", "static eager"] | None = None
    """How graph mode ran: a CUDA graph replayed (CUDA), torch.compile (a CPU with a C compiler), or
    the fixed-shape step run as is; null when it did not run."""

    __pydantic_config__ = RECORD
