"""Serving memory per GPU, and what fits: the most sequences at a context, the longest
context at a concurrency.

Convention: the engine's (engines/): it allows itself a share of each GPU (vLLM's
gpu_memory_utilization of the total, SGLang's mem_fraction_static of what is free at start,
the whole device for llama.cpp and transformers); the items it reserves in that share come
off it (weights, its activation peak, memory outside torch) and the KV cache gets the rest.
Each of the model's replicas (num_gpus / tensor_parallel) serves its own share of the
sequences, so capacity scales with replicas.
"""

from dataclasses import dataclass
from typing import Literal

from app.accounting.inference.engines import Reserved
from app.accounting.inference.kv_cache import KvCache
from app.accounting.inference.quant import WeightBytes
from app.accounting.inference.setup import Setup
from app.accounting.inference.workspace import Workspace
from app.accounting.records import RECORD


@dataclass(slots=True)
class MemoryPoint:
    """Bytes per GPU at one concurrency (the chart's x)."""

    concurrency: int
    weights_bytes: int
    kv_cache_bytes: int
    workspace_bytes: int
    overhead_bytes: int
    total_bytes: int

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class EngineView:
    """The engine's conventions as applied to this deployment, shared by both answers."""

    engine: str
    settings: dict[str, float | int | bool | None]
    """The engine's settings as applied, the request's or the engine's defaults for this GPU, under the
    engine's own names (vLLM's gpu_memory_utilization, SGLang's mem_fraction_static ...)."""
    share_rule: str
    """How the engine sets the share of each GPU it allows itself (usable_bytes)."""
    reserved: list[Reserved]
    """Everything the engine holds beside the cache on each GPU, with whether it comes off the share."""
    kv_cache_tokens: int
    """Tokens the cache holds on each replica, as the engine logs it at start-up (vLLM's "GPU KV
    cache size", SGLang's max_total_num_tokens): whole blocks or slots of the cache's budget."""
    engine_notes: list[str]

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class InferenceMemory:
    """Bytes on each GPU serving `concurrency` sequences of `context` tokens."""

    context: int
    concurrency: int
    """Sequences in flight over all replicas."""
    sequences_per_replica: int
    """ceil(concurrency / replicas)."""
    tensor_parallel: int
    replicas: int
    weights_bytes: int
    """This GPU's share of the weights (weights.per_gpu_bytes)."""
    kv_cache_bytes: int
    """This GPU's share of the cache of its replica's sequences, paged."""
    workspace_bytes: int
    """The engine's activation peak where it takes it off its share (vLLM's profile run, llama.cpp's
    compute buffer, transformers' prefill); 0 for SGLang, which keeps it outside."""
    overhead_bytes: int
    """The rest it takes off its share: vLLM's memory outside torch."""
    total_bytes: int
    gpu_memory_bytes: int
    usable_bytes: int
    """The engine's share of gpu_memory_bytes (engine.share_rule)."""
    fits: bool
    """total_bytes <= usable_bytes."""
    weights: WeightBytes
    kv_cache: KvCache
    """The cache of one replica's sequences, with its conventions."""
    workspace: Workspace
    """A forward's live set by phase at max_num_batched_tokens (residual, attention, MLP, logits); the
    engine's own figure is engine.reserved's activations."""
    engine: EngineView
    by_concurrency: list[MemoryPoint]
    """Powers of two up to past the most sequences that fit, for the stacked chart."""
    gpu_memory_note: str = ""
    """What gpu_memory_bytes is: the total the device reports, or the datasheet's figure."""
    advice: str | None = None
    """When it does not fit: the smallest change found that makes it fit (fewer sequences, more
    tensor-parallel ranks of these GPUs, more GPUs, a smaller weight format), each checked."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class ServingCapacity:
    """What the cache budget holds."""

    context: int
    concurrency: int
    replicas: int
    kv_budget_bytes_per_gpu: int
    """usable - the engine's reserved items in its share; negative when the weights alone do not fit."""
    kv_bytes_per_sequence_per_gpu: int
    """One sequence of `context` tokens, paged."""
    max_sequences: int
    """The most sequences of `context` tokens in flight over all replicas (0: none fit)."""
    max_context: int
    """The longest context each of `concurrency` sequences can have (0: none fits)."""
    max_context_limited_by: Literal["memory", "max_seq_len"]
    max_seq_len: int
    fits: bool
    """concurrency sequences of context tokens fit."""
    weights_bytes_per_gpu: int
    workspace_bytes: int
    overhead_bytes: int
    usable_bytes: int
    engine: EngineView
    max_concurrency: float
    """kv_cache_tokens over one sequence of `context` tokens in whole blocks, per replica: vLLM's
    "Maximum concurrency for `context` tokens per request". With state-space layers, the budget over one
    sequence's bytes, its constant state included."""
    gpu_memory_note: str = ""
    """As InferenceMemory's."""
    advice: str | None = None
    """As InferenceMemory's."""

    __pydantic_config__ = RECORD


def _per_replica(setup: Setup, concurrency: int) -> int:
    return -(-concurrency // setup.replicas)


def _activations(setup: Setup) -> int:
    """The activation peak the engine takes off its share."""
    return sum(r.bytes for r in setup.budget.reserved if r.in_budget and r.kind == "activations")


def _overhead(setup: Setup) -> int:
    """Every other item the engine takes off its share besides the weights (non-torch memory,
    graph pools, SGLang's allocator rounding): what the memory curve draws as overhead."""
    return sum(r.bytes for r in setup.budget.reserved
               if r.in_budget and r.kind not in ("weights", "activations"))


def _view(setup: Setup) -> EngineView:
    b = setup.budget
    return EngineView(engine=b.engine, settings=engine_settings(setup), share_rule=b.share_rule, reserved=b.reserved,
                      kv_cache_tokens=setup.kv_cache_tokens, engine_notes=b.notes)


def engine_settings(setup: Setup) -> dict[str, float | int | bool | None]:
    """The deployment's engine settings under the engine's own names."""
    names = {"vllm": ("gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs", "block_size"),
             "sglang": ("mem_fraction_static", "chunked_prefill_size", "cuda_graph_max_bs", "page_size"),
             "llama.cpp": (None, "n_ubatch", "n_parallel", "n_ctx_pad"),
             "transformers": (None, "prefill_tokens", "batch", None)}[setup.engine]
    values = (setup.memory_fraction, setup.max_num_batched_tokens, setup.max_num_seqs, setup.block_size or 1)
    out: dict[str, float | int | bool | None] = {n: v for n, v in zip(names, values, strict=True) if n}
    if setup.engine in ("vllm", "sglang"):
        out["cuda_graphs"] = setup.cuda_graphs
    return out


def _point(setup: Setup, context: int, concurrency: int) -> MemoryPoint:
    kv = setup.kv_per_gpu(context=context, batch=_per_replica(setup, concurrency))
    act, over = _activations(setup), _overhead(setup)
    fixed = setup.weights_per_gpu + act + over
    return MemoryPoint(concurrency=concurrency, weights_bytes=setup.weights_per_gpu, kv_cache_bytes=kv,
                       workspace_bytes=act, overhead_bytes=over, total_bytes=fixed + kv)


def fits(setup: Setup, *, context: int, concurrency: int) -> bool:
    """`concurrency` sequences of `context` tokens fit the cache budget."""
    budget = setup.kv_budget_per_gpu
    return budget > 0 and setup.kv_per_gpu(context=context, batch=_per_replica(setup, concurrency)) <= budget


def max_sequences(setup: Setup, context: int) -> int:
    """Sequences of `context` tokens the budget holds, over all replicas."""
    per_sequence = setup.kv_per_gpu(context=context, batch=1)
    budget = setup.kv_budget_per_gpu
    return 0 if budget <= 0 else budget // per_sequence * setup.replicas


def memory(setup: Setup, *, context: int, concurrency: int) -> InferenceMemory:
    here = _point(setup, context, concurrency)
    usable = setup.budget.share_bytes
    most = max_sequences(setup, context)
    curve, c = [], 1
    while True:
        curve.append(_point(setup, context, c) if c != concurrency else here)
        if c >= max(2 * most, concurrency, 2) or len(curve) >= 40:
            break
        c *= 2
    return InferenceMemory(
        context=context, concurrency=concurrency, sequences_per_replica=_per_replica(setup, concurrency),
        tensor_parallel=setup.tensor_parallel, replicas=setup.replicas, weights_bytes=here.weights_bytes,
        kv_cache_bytes=here.kv_cache_bytes, workspace_bytes=here.workspace_bytes,
        overhead_bytes=here.overhead_bytes, total_bytes=here.total_bytes,
        gpu_memory_bytes=setup.memory_bytes,
        usable_bytes=usable, fits=here.total_bytes <= usable, weights=setup.weights,
        kv_cache=setup.kv(context=context, batch=_per_replica(setup, concurrency)), workspace=setup.workspace,
        engine=_view(setup), by_concurrency=curve, gpu_memory_note=setup.memory_note)


def capacity(setup: Setup, *, context: int, concurrency: int) -> ServingCapacity:
    budget = setup.kv_budget_per_gpu
    per_replica = _per_replica(setup, concurrency)
    longest, limited = _longest_context(setup, per_replica, budget)
    per_sequence = setup.kv_per_gpu(context=context, batch=1)
    return ServingCapacity(
        context=context, concurrency=concurrency, replicas=setup.replicas, kv_budget_bytes_per_gpu=budget,
        kv_bytes_per_sequence_per_gpu=per_sequence, max_sequences=max_sequences(setup, context),
        max_context=longest, max_context_limited_by=limited, max_seq_len=setup.cfg.max_seq_len,
        fits=fits(setup, context=context, concurrency=concurrency),
        weights_bytes_per_gpu=setup.weights_per_gpu, workspace_bytes=_activations(setup),
        overhead_bytes=_overhead(setup), usable_bytes=setup.budget.share_bytes, engine=_view(setup),
        max_concurrency=_concurrency(setup, context), gpu_memory_note=setup.memory_note)


def _concurrency(setup: Setup, context: int) -> float:
    block = setup.block_size or 1
    if setup.has_state:  # a sequence's state is held whatever its length: whole sequences by bytes
        per_sequence = setup.kv_per_gpu(context=context, batch=1) - setup.kv_per_gpu(context=context, batch=0)
        return max(0, setup.kv_budget_per_gpu) / per_sequence if per_sequence else 0.0
    return setup.kv_cache_tokens / (-(-context // block) * block)


Limit = Literal["memory", "max_seq_len"]


def _longest_context(setup: Setup, sequences: int, budget: int) -> tuple[int, Limit]:
    """The largest context whose cache for `sequences` sequences fits the budget: the cache
    only grows with context, so a bisection over [0, max_seq_len] finds it."""
    top = setup.cfg.max_seq_len
    if budget > 0 and setup.kv_per_gpu(context=top, batch=sequences) <= budget:
        return top, "max_seq_len"
    lo, hi = 0, top  # fits(lo) (an empty cache), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if budget > 0 and setup.kv_per_gpu(context=mid, batch=sequences) <= budget:
            lo = mid
        else:
            hi = mid
    return lo, "memory"
