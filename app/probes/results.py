"""What probes report: plain dataclasses, torch-free, so the server can declare
them as response schemas and the child can serialise them. Seconds, bytes and
FLOP/s unless a name says otherwise; GB/s is 10^9 bytes per second."""

from dataclasses import dataclass, field
from typing import Literal

from app.accounting.records import RECORD
from app.probes.energy import Energy
from app.probes.sustained import Sustained


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
    """False when the others used half a core or more, or another process held the probe's
    GPU: the numbers may be slower than the device alone."""

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
class MatmulPoint:
    m: int
    k: int
    n: int
    dtype: str
    flops: int
    """2*m*k*n, from the calculators."""
    time: Stats
    flop_per_sec: float
    """flops / median time."""
    best_flop_per_sec: float
    """flops / best time."""
    peak_flop_per_sec: float | None
    """The catalogue's dense peak for this dtype; null when the device is not listed."""
    mfu: float | None
    """flop_per_sec / peak_flop_per_sec."""
    predicted_seconds_at_peak: float | None

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class MatmulResult:
    probe: Literal["matmul"]
    environment: Environment
    points: list[MatmulPoint]
    best: dict[str, MatmulPoint]
    """Per dtype, the shape with the highest median FLOP/s."""
    skipped: list[Skipped]
    sustained: Sustained | None = None
    """With sustain_s: the best shape of the first dtype, run back to back."""

    __pydantic_config__ = RECORD


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


@dataclass(slots=True)
class TrainStepResult:
    probe: Literal["train_step"]
    environment: Environment
    model: str
    """"cruncher" or the preset name, or "custom"."""
    params: int
    batch_size: int
    seq_len: int
    tokens_per_step: int
    optimizer: str
    precision: str
    step: Stats
    forward: Stats
    backward: Stats
    optimizer_step: Stats
    tokens_per_sec: float
    """tokens_per_step / median step time."""
    flops_per_step: int
    """The calculators' exact matmul FLOPs for forward plus backward."""
    flops_per_step_6nd: float
    """6 x params x tokens_per_step, for comparison."""
    achieved_flop_per_sec: float
    peak_flop_per_sec: float | None
    mfu: float | None
    """Null on CPU and on devices the catalogue does not list."""
    memory: MemoryComparison
    loss_first: float
    loss_last: float
    assumptions: list[str]
    mode: Literal["full", "freeze", "lora", "qlora"] = "full"
    """What trained (TrainStepParams.mode); results from before fine-tuning modes trained every weight."""
    trainable_params: int | None = None
    """Parameters the optimizer stepped (requires_grad), counted in the model trained; null in
    results from before fine-tuning modes."""
    sustained: Sustained | None = None
    """With sustain_s: whole steps (forward, backward, optimizer) run back to back."""

    __pydantic_config__ = RECORD



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
    """Whether decode steps were captured in CUDA graphs (they are not: each op is launched)."""
    ceilings: Ceilings
    prefill: list[PrefillPoint]
    decode: list[DecodePoint]
    notes: list[str]
    """What the measurements say about themselves: launch-bound points, the device, the dtype."""
    assumptions: list[str]

    __pydantic_config__ = RECORD
