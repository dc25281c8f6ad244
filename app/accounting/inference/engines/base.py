"""What every engine's memory budget is made of: the items it reserves and what is left for the cache.

An engine (vLLM, SGLang, llama.cpp, transformers' generate) decides three things about a GPU's
memory, and each module beside this one states them as its source does:
  - the share it may use (vLLM's gpu_memory_utilization of the device's total, SGLang's
    mem_fraction_static of what is free when it starts, the whole device for the others);
  - what it reserves beside the KV cache, and which of those it takes off the cache's budget
    (weights, its profile run's activation peak, memory outside torch's allocator, CUDA graphs);
  - how the cache is laid out (paged in blocks, one token per slot, or one unpaged tensor).
"""

from dataclasses import dataclass, field
from typing import Literal

from app.accounting.records import RECORD
from app.accounting.units import GIB

ReservedKind = Literal["weights", "allocator", "activations", "non_torch", "cuda_graphs", "cuda_context"]

CUDA_CONTEXT_BYTES = int(0.51 * GIB)
"""What a process holds on a GPU once CUDA and torch are initialised, before any tensor: vLLM
0.19.0's worker init snapshot on an H100 reads cuda_memory=0.51GiB, non_torch_memory=0.51GiB
(bench/published/engine_logs.md, case 2). Varies a little with the driver and the GPU."""

COMMUNICATOR_BYTES = int(1.02 * GIB)
"""What NCCL's communicator adds at start-up when a replica spans GPUs: the same snapshot at
tensor_parallel 2 reads cuda_memory=1.53GiB, 1.02 GiB above one GPU's (engine_logs.md, case 4)."""


@dataclass(slots=True)
class Reserved:
    """One thing an engine holds on each GPU beside the KV cache."""

    kind: ReservedKind
    bytes: int
    in_budget: bool
    """True: the engine takes it off the KV cache's share. False: it lives in the memory the
    engine leaves outside its share (vLLM's 1 - gpu_memory_utilization), so it must fit there."""
    rule: str
    """How the engine arrives at it, citing its source."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Budget:
    """One GPU's memory as an engine divides it."""

    engine: str
    total_bytes: int
    """The GPU's memory (the device's report, or what the request gave)."""
    share_bytes: int
    """What the engine allows itself: vLLM's gpu_memory_utilization x total, SGLang's
    mem_fraction_static x the memory free at start-up, the whole device for llama.cpp and transformers."""
    share_rule: str
    reserved: list[Reserved]
    kv_bytes: int
    """share_bytes less the reserved items in the budget: what the KV cache gets (negative: nothing fits)."""
    notes: list[str] = field(default_factory=list)

    __pydantic_config__ = RECORD

    def outside_bytes(self) -> int:
        """Reserved bytes that must fit beside the engine's share."""
        return sum(item.bytes for item in self.reserved if not item.in_budget)


def budget(engine: str, total: int, share: int, share_rule: str, reserved: list[Reserved],
           notes: list[str] | None = None) -> Budget:
    kept = sum(item.bytes for item in reserved if item.in_budget)
    return Budget(engine=engine, total_bytes=total, share_bytes=share, share_rule=share_rule,
                  reserved=reserved, kv_bytes=share - kept, notes=notes or [])


def startup_bytes(tensor_parallel: int) -> int:
    """CUDA context, and NCCL's communicator when a replica spans GPUs."""
    return CUDA_CONTEXT_BYTES + (COMMUNICATOR_BYTES if tensor_parallel > 1 else 0)
