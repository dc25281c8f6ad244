"""SGLang: how `sglang.launch_server` budgets each GPU and sizes its token pool.

Read from sgl-project/sglang, python/sglang/srt/model_executor/model_runner.py (early 2025, and
model_runner_kv_cache_mixin.py now): init_torch_distributed measures min_per_gpu_memory, the
memory *free* on the tightest rank once CUDA and NCCL are up and before the weights load
(get_available_gpu_memory: torch.cuda.mem_get_info's free, all_reduce MIN over ranks, / 2^30);
the start-up log prints it as "Load weight begin. avail mem=... GB" (GiB). After loading,
profile_max_num_token keeps

    rest = available_after_weights - min_per_gpu_memory x (1 - mem_fraction_static)
    max_total_num_tokens = int(rest x 2^30) // cell_size

so the pool gets mem_fraction_static x the memory free at start, less the weights. cell_size is
one token in every layer: kv heads per rank x (head_dim + v_head_dim) x layers x the cache's
bytes (latent attention: kv_lora_rank + qk_rope_head_dim, whole on each rank); one token a
slot (page_size 1 by default). The activations of a forward and the CUDA graphs, captured after
the pool, live in 1 - mem_fraction_static, as does the CUDA context.
"""

from app.accounting.inference.engines.base import Budget, Reserved, budget
from app.accounting.units import GIB, MIB

NAME = "sglang"
ROUNDING_BYTES_PER_TENSOR = MIB
"""torch's caching allocator gives each tensor over 10 MiB a segment rounded up to 2 MiB
(c10/cuda/CUDACachingAllocator.cpp, kRoundLarge), half a granule on average. SGLang reads the
memory the weights took as free memory before less after (not torch's allocated bytes, as vLLM
does), so that rounding is part of what the pool loses."""
LARGE_TENSORS_PER_LAYER = 4
"""What SGLang loads per layer as large tensors: the merged qkv_proj, o_proj, the merged gate_up_proj
(an MoE layer's fused w13) and down_proj (w2)."""


def default_chunked_prefill(memory_bytes: int) -> int:
    """chunked_prefill_size by GPU memory (server_args.py, _handle_gpu_memory_settings)."""
    gib = memory_bytes / GIB
    return 2048 if gib < 35 else 4096 if gib < 60 else 8192 if gib < 160 else 16384


def default_cuda_graph_max_bs(memory_bytes: int, tensor_parallel: int) -> int:
    """cuda_graph_max_bs by GPU memory and tensor_parallel (the same function)."""
    gib, wide = memory_bytes / GIB, tensor_parallel >= 4
    if gib < 20:
        return 8
    if gib < 35:
        return 80 if wide else 24
    if gib < 60:
        return 160 if wide else 32
    return 512 if wide or gib >= 160 else 256


def default_mem_fraction_static(memory_bytes: int, tensor_parallel: int) -> float:
    """SGLang's default (server_args.py, _handle_gpu_memory_settings): it reserves, in MiB,
    512 + 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs + tp / 8 x 1024, at least
    10,240 on a GPU over 60 GB, and keeps the rest's share of the GPU, rounded to 3 places."""
    mib = memory_bytes / MIB
    chunk = default_chunked_prefill(memory_bytes)
    reserved = (512 + 1.5 * max(chunk, 2048) + 2 * default_cuda_graph_max_bs(memory_bytes, tensor_parallel)
                + tensor_parallel / 8 * 1024)
    if memory_bytes / GIB > 60:
        reserved = max(reserved, 10240)
    return round((mib - reserved) / mib, 3)


def plan(*, total: int, fraction: float, weights: int, layers: int, activations: int, free_at_start: int,
         free_given: bool) -> Budget:
    share = int(free_at_start * fraction)
    start = ("as the request gives it (free_memory_bytes)" if free_given
             else "the device's total less a CUDA context (and NCCL's communicator at tensor_parallel > 1)")
    reserved = [
        Reserved("weights", weights, True, "this GPU's share of the weights"),
        Reserved("allocator", layers * LARGE_TENSORS_PER_LAYER * ROUNDING_BYTES_PER_TENSOR, True,
                 f"the caching allocator's rounding of {LARGE_TENSORS_PER_LAYER} large tensors a layer to 2 MiB "
                 "segments, half a granule each: SGLang's 'Load weight end: mem usage' is free memory lost"),
        Reserved("activations", activations, False,
                 "a forward's workspace at the chunked-prefill size, and the CUDA graphs captured after the pool: "
                 "in 1 - mem_fraction_static"),
        Reserved("cuda_context", total - free_at_start, False,
                 f"what is not free when SGLang starts ({start})"),
    ]
    return budget(NAME, total, share,
                  f"mem_fraction_static {fraction:g} x the {free_at_start / GIB:.2f} GiB free at start ({start}; "
                  "model_runner.py profile_max_num_token)", reserved)
