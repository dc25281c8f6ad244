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
from app.accounting.inference import engines, kv_cache, quant
from app.accounting.inference.state import state_bytes
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
    memory_fraction: float | None
    """The engine's share setting: vLLM's gpu_memory_utilization (of the total), SGLang's
    mem_fraction_static (of the memory free at start); None for llama.cpp and transformers."""
    max_num_batched_tokens: int
    """Tokens in the largest forward: vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size,
    llama.cpp's n_ubatch, transformers' batch x prompt."""
    max_num_seqs: int
    overhead_bytes: int | None
    """Replaces the engine's modelled memory outside torch (vLLM's non-torch increase); None: modelled."""
    engine: engines.EngineName = "vllm"
    """Whose conventions budget the memory and lay out the cache (engines/)."""
    memory_note: str = ""
    """What memory_bytes is, in words (hardware.memory_note): the device's report or the datasheet's."""
    cuda_graphs: bool = True
    """The engine captures CUDA graphs (vLLM without enforce_eager, SGLang without disable_cuda_graph)."""
    free_memory_bytes: int | None = None
    """Memory free on each GPU when the engine starts; None: the total less a CUDA context."""
    multiprocessors: int | None = None
    """The GPU's SMs (vLLM's sampler scratch); None where the catalogue lacks them."""

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
    def budget(self) -> engines.Budget:
        """One GPU's memory as the engine divides it: its share, what it reserves, the cache's rest."""
        return engines.plan(self)

    @property
    def kv_budget_per_gpu(self) -> int:
        """What is left for the cache on each GPU (negative when the model does not fit)."""
        return self.budget.kv_bytes

    @property
    def cache_engine(self) -> kv_cache.Engine:
        """Whose cache layout: transformers' DynamicCache, or the heads a serving engine keeps."""
        return "transformers" if self.engine == "transformers" else "vllm"

    @cached_property
    def kv_cache_tokens(self) -> int:
        """Tokens the cache holds on each replica, as the engine counts them at start-up (vLLM's
        "GPU KV cache size", SGLang's max_total_num_tokens): whole blocks (vLLM), slots (SGLang)."""
        block = self.block_size or 1
        unit = kv_cache.sequence_bytes_per_gpu(
            self.cfg, context=min(block, self.cfg.max_seq_len), cache_dtype=self.cache_dtype,
            model_dtype=self.model_dtype, block_size=self.block_size, mla_cache=self.mla_cache,
            tensor_parallel=self.tensor_parallel, engine=self.cache_engine, state_included=False)[0]
        return max(0, self.kv_budget_per_gpu) // unit * block if unit else 0

    def kv(self, *, context: int, batch: int, paged: bool = True) -> kv_cache.KvCache:
        return _kv_cache(
            self.cfg, context=context, batch=batch, cache_dtype=self.cache_dtype,
            model_dtype=self.model_dtype,
            block_size=self.block_size if paged else None, mla_cache=self.mla_cache,
            tensor_parallel=self.tensor_parallel, engine=self.cache_engine)

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

    @cached_property
    def kv_token_bytes_per_gpu(self) -> int:
        """What one more token adds to one rank's cache: attention layers only (a state-space layer's
        state is per sequence, written in place)."""
        return kv_cache.sequence_bytes_per_gpu(
            self.cfg, context=1, cache_dtype=self.cache_dtype, model_dtype=self.model_dtype, block_size=None,
            mla_cache=self.mla_cache, tensor_parallel=self.tensor_parallel, engine=self.cache_engine,
            state_included=False)[0]

    @cached_property
    def has_state(self) -> bool:
        """Some layer keeps a constant-size state per sequence (Mamba, gated DeltaNet)."""
        return state_bytes(self.cfg, model_bytes=2, engine="vllm", tp=1).layers > 0

    def kv_per_gpu(self, *, context: int, batch: int, paged: bool = True) -> int:
        """kv(...).bytes_per_gpu, without building the record: batch x one sequence + scales."""
        one = self.memo.get((context, paged))
        if one is None:
            one = self.remember((context, paged), kv_cache.sequence_bytes_per_gpu(
                self.cfg, context=context, cache_dtype=self.cache_dtype, model_dtype=self.model_dtype,
                block_size=self.block_size if paged else None, mla_cache=self.mla_cache,
                tensor_parallel=self.tensor_parallel, engine=self.cache_engine))
        return batch * one[0] + one[1]
