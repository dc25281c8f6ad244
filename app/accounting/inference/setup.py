"""A served deployment: the model, how its weights and cache are stored, and the GPUs.

The three serving calculators (memory, capacity, time) read their bytes through here, so
the weight and KV-cache conventions are applied once: weights by quant.py, the cache by
kv_cache.py, the forward's transient memory by workspace.py.
"""

from collections.abc import Hashable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, TypeVar

from app.accounting import dtypes
from app.accounting.errors import InvalidInput
from app.accounting.inference import kv_cache, quant
from app.accounting.inference.workspace import Workspace, workspace
from app.accounting.transformer import TransformerConfig

# Requests repeat (a page's three answers, a client polling one plan): each record is pure in
# its arguments and never mutated after it is built, so one copy serves them all.
_weight_bytes = lru_cache(maxsize=1024)(quant.weight_bytes)
_workspace = lru_cache(maxsize=1024)(workspace)
_kv_cache = lru_cache(maxsize=1024)(kv_cache.kv_cache)
T = TypeVar("T")


@dataclass(frozen=True)
class Setup:
    cfg: TransformerConfig
    weight_format: str
    group_size: int
    keep: tuple[str, ...] | None
    """Components left unquantized; None is the format's own default."""
    model_dtype: str
    """Activations, and the weights' dtype where they are not quantized."""
    cache_dtype: str
    mla_cache: kv_cache.MlaCache
    block_size: int | None
    tensor_parallel: int
    num_gpus: int
    memory_bytes: int
    """One GPU's memory."""
    gpu_memory_utilization: float
    """Share of each GPU's memory the engine may use (vLLM's gpu_memory_utilization)."""
    max_num_batched_tokens: int
    max_num_seqs: int
    overhead_bytes: int
    engine: kv_cache.Engine = "vllm"
    """Whose KV cache is counted (kv_cache.py): vLLM's, or transformers' DynamicCache (unpaged)."""
    memory_note: str = ""
    """What memory_bytes is, in words (hardware.memory_note): the device's report or the datasheet's."""

    def __post_init__(self) -> None:
        tp = self.tensor_parallel
        if self.num_gpus % tp:
            raise InvalidInput("tensor_parallel", f"{tp} does not divide num_gpus ({self.num_gpus}): each "
                                                  "replica of the model takes tensor_parallel GPUs")
        if self.cfg.n_heads % tp:
            raise InvalidInput("tensor_parallel", f"{tp} does not divide the model's {self.cfg.n_heads} "
                                                  "attention heads (each rank takes whole heads)")

    @property
    def replicas(self) -> int:
        """Data-parallel copies of the model, each on tensor_parallel GPUs."""
        return self.num_gpus // self.tensor_parallel

    @cached_property
    def act_bytes(self) -> int:
        return int(dtypes.lookup(self.model_dtype, field="dtype").storage_bytes)

    @cached_property
    def weights(self) -> quant.WeightBytes:
        return _weight_bytes(self.cfg, self.weight_format, group_size=self.group_size, keep=self.keep,
                                  base_dtype=self.model_dtype, tensor_parallel=self.tensor_parallel)

    @cached_property
    def embedding_bytes_per_gpu(self) -> int:
        """The token (and learned position) tables' share of weights_per_gpu (vocab-parallel)."""
        return -(-self.weights.by_component.get("embeddings", 0) // self.tensor_parallel)

    @cached_property
    def routed_bytes_per_gpu(self) -> int:
        """The routed experts' share of weights_per_gpu (split over tensor ranks like an MLP)."""
        return -(-self.weights.by_component.get("routed_experts", 0) // self.tensor_parallel)

    @cached_property
    def weights_per_gpu(self) -> int:
        return self.weights.per_gpu_bytes

    @cached_property
    def workspace(self) -> Workspace:
        return _workspace(self.cfg, tokens=self.max_num_batched_tokens, sequences=self.max_num_seqs,
                         act_bytes=self.act_bytes, tensor_parallel=self.tensor_parallel)

    @cached_property
    def kv_budget_per_gpu(self) -> int:
        """What is left for the cache on each GPU: utilization x memory - weights - the
        forward's workspace - the fixed overhead (negative when the model does not fit)."""
        usable = int(self.gpu_memory_utilization * self.memory_bytes)
        return usable - self.weights_per_gpu - self.workspace.bytes - self.overhead_bytes

    def kv(self, *, context: int, batch: int, paged: bool = True) -> kv_cache.KvCache:
        return _kv_cache(
            self.cfg, context=context, batch=batch, cache_dtype=self.cache_dtype,
            model_dtype=self.model_dtype,
            block_size=self.block_size if paged else None, mla_cache=self.mla_cache,
            tensor_parallel=self.tensor_parallel, engine=self.engine)

    @cached_property
    def memo(self) -> dict[Hashable, Any]:
        """What the calculators derive from this deployment and a few more numbers (a context,
        the hardware), kept while requests vary the rest; see `remember`."""
        return {}

    def remember(self, key: Hashable, value: T) -> T:
        if len(self.memo) > 256:  # a deployment asked about very many contexts: start afresh
            self.memo.clear()
        self.memo[key] = value
        return value

    def kv_per_gpu(self, *, context: int, batch: int, paged: bool = True) -> int:
        """kv(...).bytes_per_gpu, without building the record: batch x one sequence + scales."""
        one = self.memo.get((context, paged))
        if one is None:
            one = self.remember((context, paged), kv_cache.sequence_bytes_per_gpu(
                self.cfg, context=context, cache_dtype=self.cache_dtype, model_dtype=self.model_dtype,
                block_size=self.block_size if paged else None, mla_cache=self.mla_cache,
                tensor_parallel=self.tensor_parallel, engine=self.engine))
        return batch * one[0] + one[1]
