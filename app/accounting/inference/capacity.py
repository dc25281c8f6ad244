"""Serving memory per GPU, and what fits: the most sequences at a context, the longest
context at a concurrency.

Convention (vLLM's): the engine may use gpu_memory_utilization x memory on each GPU; the
weights, the forward's workspace and a fixed overhead come off it, and the KV cache gets
the rest. Each of the model's replicas (num_gpus / tensor_parallel) serves its own share
of the sequences, so capacity scales with replicas.
"""

from dataclasses import dataclass
from typing import Literal

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
    overhead_bytes: int
    total_bytes: int
    gpu_memory_bytes: int
    usable_bytes: int
    """gpu_memory_utilization x gpu_memory_bytes."""
    fits: bool
    """total_bytes <= usable_bytes."""
    weights: WeightBytes
    kv_cache: KvCache
    """The cache of one replica's sequences, with its conventions."""
    workspace: Workspace
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
    """usable - weights - workspace - overhead; negative when the weights alone do not fit."""
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
    gpu_memory_note: str = ""
    """As InferenceMemory's."""
    advice: str | None = None
    """As InferenceMemory's."""

    __pydantic_config__ = RECORD


def _per_replica(setup: Setup, concurrency: int) -> int:
    return -(-concurrency // setup.replicas)


def _point(setup: Setup, context: int, concurrency: int) -> MemoryPoint:
    kv = setup.kv_per_gpu(context=context, batch=_per_replica(setup, concurrency))
    fixed = setup.weights_per_gpu + setup.workspace.bytes + setup.overhead_bytes
    return MemoryPoint(concurrency=concurrency, weights_bytes=setup.weights_per_gpu, kv_cache_bytes=kv,
                       workspace_bytes=setup.workspace.bytes, overhead_bytes=setup.overhead_bytes,
                       total_bytes=fixed + kv)


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
    usable = int(setup.gpu_memory_utilization * setup.memory_bytes)
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
        overhead_bytes=setup.overhead_bytes, total_bytes=here.total_bytes,
        gpu_memory_bytes=setup.memory_bytes,
        usable_bytes=usable, fits=here.total_bytes <= usable, weights=setup.weights,
        kv_cache=setup.kv(context=context, batch=_per_replica(setup, concurrency)), workspace=setup.workspace,
        by_concurrency=curve, gpu_memory_note=setup.memory_note)


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
        weights_bytes_per_gpu=setup.weights_per_gpu, workspace_bytes=setup.workspace.bytes,
        overhead_bytes=setup.overhead_bytes,
        usable_bytes=int(setup.gpu_memory_utilization * setup.memory_bytes), gpu_memory_note=setup.memory_note)


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
