"""Serving engines as conventions: each module states how its engine budgets a GPU's memory,
read from that engine's source (base.py says what a budget is made of).

Adding an engine: a module with a `plan(...)` returning base.Budget, its defaults, and a line
in `plan` and `DEFAULTS` below; the request's `engine` choice and the docs list it.
"""

from typing import TYPE_CHECKING, Literal

from app.accounting.inference.engines import hf, llamacpp, sglang, vllm
from app.accounting.inference.engines.base import Budget, Reserved, startup_bytes

if TYPE_CHECKING:
    from app.accounting.inference.setup import Setup

EngineName = Literal["vllm", "sglang", "llama.cpp", "transformers"]
NAMES: tuple[str, ...] = ("vllm", "sglang", "llama.cpp", "transformers")
__all__ = ["Budget", "EngineName", "NAMES", "Reserved", "defaults", "plan"]


def defaults(engine: str, *, memory_bytes: int, gpu_id: str, tensor_parallel: int) -> dict:
    """What each engine picks when the request leaves a setting null: memory_fraction,
    max_num_batched_tokens, max_num_seqs and block_size (tokens a cache slot rounds to)."""
    if engine == "vllm":
        tokens, seqs = vllm.batch_defaults(memory_bytes, gpu_id)
        return {"memory_fraction": vllm.DEFAULT_GPU_MEMORY_UTILIZATION, "max_num_batched_tokens": tokens,
                "max_num_seqs": seqs, "block_size": vllm.BLOCK_SIZE_TOKENS}
    if engine == "sglang":
        return {"memory_fraction": sglang.default_mem_fraction_static(memory_bytes, tensor_parallel),
                "max_num_batched_tokens": sglang.default_chunked_prefill(memory_bytes),
                "max_num_seqs": sglang.default_cuda_graph_max_bs(memory_bytes, tensor_parallel),
                "block_size": None}
    if engine == "llama.cpp":
        return {"memory_fraction": None, "max_num_batched_tokens": llamacpp.DEFAULT_UBATCH,
                "max_num_seqs": llamacpp.DEFAULT_PARALLEL, "block_size": llamacpp.PAD_TOKENS}
    return {"memory_fraction": None, "max_num_batched_tokens": hf.DEFAULT_PREFILL_TOKENS, "max_num_seqs": 1,
            "block_size": None}


def plan(setup: "Setup") -> Budget:
    """The engine's budget for one GPU of this deployment."""
    startup = startup_bytes(setup.tensor_parallel)
    free = setup.free_memory_bytes or setup.memory_bytes - startup
    if setup.engine == "vllm":
        return vllm.plan(cfg=setup.cfg, total=setup.memory_bytes, utilization=setup.memory_fraction or 0.0,
                         weights=setup.weights_per_gpu, tokens=setup.max_num_batched_tokens,
                         sequences=setup.max_num_seqs, act_bytes=setup.act_bytes,
                         tensor_parallel=setup.tensor_parallel, cuda_graphs=setup.cuda_graphs,
                         multiprocessors=setup.multiprocessors, overhead_bytes=setup.overhead_bytes,
                         startup=setup.memory_bytes - free)
    if setup.engine == "sglang":
        return sglang.plan(total=setup.memory_bytes, fraction=setup.memory_fraction or 0.0,
                           weights=setup.weights_per_gpu, layers=setup.cfg.n_layers,
                           activations=setup.workspace.bytes, free_at_start=free,
                           free_given=setup.free_memory_bytes is not None)
    if setup.engine == "llama.cpp":
        # flash attention on, as -fa auto turns it on for CUDA: the buffer then does not grow with n_ctx
        compute = llamacpp.compute_buffer_bytes(setup.cfg, context=setup.max_num_batched_tokens,
                                                ubatch=setup.max_num_batched_tokens, flash_attention=True)
        return llamacpp.plan(total=setup.memory_bytes, weights=setup.weights_per_gpu, compute=compute,
                             startup=setup.memory_bytes - free, flash_attention=True)
    return hf.plan(total=setup.memory_bytes, weights=setup.weights_per_gpu, activations=setup.workspace.bytes,
                   tokens=setup.max_num_batched_tokens, startup=setup.memory_bytes - free)


def batching(engine: str) -> str:
    """How the engine meets prompts and decode steps: continuous (vLLM V1 and SGLang chunk prompts
    into the decode steps' token budget; llama.cpp's server batches its slots' prompt and decode
    tokens into one ubatch) or static (transformers' generate: a batch prefills, then decodes)."""
    return "static" if engine == "transformers" else "continuous"


def launch(engine: str, cuda_graphs: bool) -> str:
    """How the engine issues its kernels (inference/kernels.py Launch): vLLM and SGLang replay CUDA
    graphs of their decode batches unless told not to (enforce_eager, disable_cuda_graph), and then
    launch the same fused kernels from Python; llama.cpp replays a graph per token (ggml-cuda.cu,
    since b2874) or launches its kernels from C++; transformers' generate runs eager, unfused."""
    if engine == "transformers":
        return "eager"
    if cuda_graphs:
        return "graph"
    return "native" if engine == "llama.cpp" else "python"
