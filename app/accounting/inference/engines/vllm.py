"""vLLM's V1 engine (0.10 to 0.19): how `vllm serve` budgets each GPU and sizes its KV cache.

Read from vLLM 0.19.0 (the wheel's vllm/ package):
  - v1/worker/gpu_worker.py, Worker.init_device: the init snapshot is taken after the CUDA
    context, NCCL's communicator and the custom all-reduce buffers exist, and
    requested_memory = ceil(total x gpu_memory_utilization) (v1/worker/utils.py, request_memory).
    None of what the snapshot holds is charged to the cache: it lives in 1 - utilization.
  - determine_available_memory: available = requested - (weights + torch peak increase of the
    profile run + non-torch increase since the snapshot); CUDA-graph memory is subtracted only
    when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, off by default in 0.19 (envs.py), so the
    graph pool too lives in 1 - utilization.
  - v1/worker/gpu_model_runner.py, profile_run: one eager dummy forward of max_num_batched_tokens
    tokens, attention skipped (no metadata: flash_attn.py returns output.fill_(0)), then a dummy
    sampler run over min(max_num_seqs, tokens) rows (activation_peak below).
  - v1/core/kv_cache_utils.py, get_num_blocks: available // page_size // num_layers blocks, page
    = block_size tokens of one layer; "GPU KV cache size" = blocks x block_size tokens, and
    "Maximum concurrency for L tokens" = blocks / cdiv(L, block_size).
  - engine/arg_utils.py, get_batch_defaults: batch_defaults below.
Checked against 13 published 0.19.0 start-up logs (bench/published/engine_logs.md).
"""

import math

from app.accounting import blocks
from app.accounting.blocks.experts import Experts
from app.accounting.inference.engines.base import Budget, Reserved, budget
from app.accounting.transformer import TransformerConfig
from app.accounting.units import GIB, MIB

NAME = "vllm"
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vllm/config/cache.py, CacheConfig.gpu_memory_utilization."""
BLOCK_SIZE_TOKENS = 16
"""CacheConfig.DEFAULT_BLOCK_SIZE on CUDA."""

LARGE_GPU_BYTES = 70 * GIB
"""get_batch_defaults: a GPU with at least 70 GiB that is not an A100 gets the larger defaults."""
SERVER_BATCHED_TOKENS = {True: 8192, False: 2048}
"""max_num_batched_tokens for the OpenAI server (`vllm serve`), by large GPU; the LLM class takes
16384 and 8192."""
SERVER_MAX_NUM_SEQS = {True: 1024, False: 256}
"""max_num_seqs, by large GPU (then capped at max_num_batched_tokens)."""

CUBLAS_WORKSPACE_BYTES = 32 * MIB
"""torch's default cuBLAS workspace on Hopper (CUBLAS_WORKSPACE_CONFIG :4096:8, 8 x 4096 KiB),
allocated through the caching allocator on the first matmul, so inside the torch peak."""
SAMPLER_ROWS_DEFAULT_MULTIPROCESSORS = 132
"""An H100 SXM's SMs: the top-k/top-p kernel's scratch rows where the GPU's count is not catalogued."""
VOCAB_PAD = 64
"""ParallelLMHead pads the vocabulary to a multiple of 64 per tensor rank (DEFAULT_VOCAB_PADDING_SIZE)."""

# What vLLM 0.19's log reports as "non-torch forward increase memory": allocations outside torch
# made during the profile (cuBLAS/cuDNN handles, graph-capture profiling; at tensor_parallel > 1
# the TP group's own NCCL communicator, connected lazily on the first all-gather, and FlashInfer's
# all-reduce fusion workspace). vLLM's code does not size NCCL's part, so these are the engine's
# own reported figures, measured on H100s: 0.25 GiB at TP 1 (0.13 with enforce_eager), 2.07 to
# 2.17 GiB at TP 2 to 4 (engine_logs.md, cases 2 to 14; llm-d-planner's sweep of 49 runs reads
# 0.27, 2.08 and 2.17 in its accuracy/accuracy_report.md).
NON_TORCH_TP1_BYTES = int(0.25 * GIB)
NON_TORCH_TP1_EAGER_BYTES = int(0.13 * GIB)
NON_TORCH_TPN_BYTES = int(2.1 * GIB)

# The graph pool vLLM 0.19 logged for Llama-3.1-8B on an H100: "Estimated FULL CUDA graph memory:
# 260.00 MiB first-capture + (51-1) x 6.00 MiB per-graph", and as much again per graph for the
# PIECEWISE mode: 0.84 GiB estimated, 0.91 GiB taken. Scaled by the model's layers (each piecewise
# graph holds one piece per layer); over the sweep's logs this lands within about 20% of "took".
CUDA_GRAPH_BYTES_32_LAYERS = 860 * MIB
CUDA_GRAPH_REFERENCE_LAYERS = 32


def batch_defaults(memory_bytes: int, gpu_id: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) `vllm serve` picks for this GPU."""
    large = memory_bytes >= LARGE_GPU_BYTES and not gpu_id.startswith("a100")
    tokens = SERVER_BATCHED_TOKENS[large]
    return tokens, min(SERVER_MAX_NUM_SEQS[large], tokens)


def sampler_bytes(cfg: TransformerConfig, *, tokens: int, rows: int, tensor_parallel: int,
                  multiprocessors: int | None) -> int:
    """The dummy sampler run's peak (gpu_model_runner._dummy_sampler_run; v1/sample/sampler.py and
    ops/topk_topp_sampler.py), R = rows, V = vocab, V_p = V padded per tensor rank:
      logits [R, V_p] bf16, then .to(float32) [R, V], softmax's probs [R, V] and the exponential
      draws q = empty_like(probs) [R, V]: 2 V_p + 12 V bytes a row;
      the Triton top-k/top-p kernel's cached scratch, min(SMs, R) rows of V fp32;
      hidden states [tokens, d] and the sampled rows [R, d] with their rand_like copy, bf16."""
    v, tp = cfg.vocab_size, tensor_parallel
    v_padded = -(-v // (VOCAB_PAD * tp)) * VOCAB_PAD * tp
    sms = multiprocessors or SAMPLER_ROWS_DEFAULT_MULTIPROCESSORS
    return rows * (2 * v_padded + 12 * v) + min(sms, rows) * 4 * v + 2 * cfg.d_model * (tokens + 2 * rows)


def forward_bytes(cfg: TransformerConfig, *, tokens: int, act_bytes: int, tensor_parallel: int) -> int:
    """The dummy forward's largest live set: a dense MLP's hiddens (gate_up's output and its
    product: 3 widths a token, split over tensor ranks) beside four d_model-wide tensors (the
    residual, its normed copy, the MLP's output and the layer's hidden states)."""
    widest = 0
    for layer, _ in blocks.distinct(cfg):
        mlp = layer.mlp
        if isinstance(mlp, Experts):
            mlp = mlp.shared
        if mlp is not None:
            widest = max(widest, mlp.workspace_bytes(tokens=tokens, act_bytes=act_bytes, tp=tensor_parallel))
    return widest + 4 * tokens * cfg.d_model * act_bytes


def moe_workspace_bytes(cfg: TransformerConfig, *, tokens: int, act_bytes: int, tensor_parallel: int) -> int:
    """Fused MoE's two workspaces (fused_moe/fused_moe.py TritonExperts.workspace_shapes, allocated
    by v1/worker/workspace.py and never freed, so still live at the sampler's peak): with M the
    tokens, k top_k, N gate_up's width per rank (2 f / tp gated) and K = d_model,
    (M, k, max(N / 2, K)) and (M, k, max(N, K)); the first at least (M, K)."""
    routed = blocks.routed(cfg)
    if not isinstance(routed, Experts):
        return 0
    k, d = routed.top_k, cfg.d_model
    n = (2 if cfg.gated else 1) * cfg.ff_expert // tensor_parallel
    first = max(tokens * k * max(n // 2, d), tokens * d)
    second = tokens * k * max(n, d)
    return (first + second) * act_bytes


def activation_peak(cfg: TransformerConfig, *, tokens: int, sequences: int, act_bytes: int,
                    tensor_parallel: int, multiprocessors: int | None) -> tuple[int, str]:
    """vLLM's "torch peak memory increase" and which phase set it: max(sampler, forward) + the
    MoE workspace + cuBLAS's workspace."""
    rows = min(sequences, tokens)
    sampler = sampler_bytes(cfg, tokens=tokens, rows=rows, tensor_parallel=tensor_parallel,
                            multiprocessors=multiprocessors)
    forward = forward_bytes(cfg, tokens=tokens, act_bytes=act_bytes, tensor_parallel=tensor_parallel)
    moe = moe_workspace_bytes(cfg, tokens=tokens, act_bytes=act_bytes, tensor_parallel=tensor_parallel)
    phase = (f"the sampler over {rows:,} rows of the {cfg.vocab_size:,}-token vocabulary" if sampler >= forward
             else f"the MLP of a {tokens:,}-token forward")
    if moe:
        phase += f", with fused MoE's {moe / GIB:.2f} GiB workspace"
    return max(sampler, forward) + moe + CUBLAS_WORKSPACE_BYTES, phase


def cuda_graph_bytes(cfg: TransformerConfig) -> int:
    return CUDA_GRAPH_BYTES_32_LAYERS * cfg.n_layers // CUDA_GRAPH_REFERENCE_LAYERS


def plan(*, cfg: TransformerConfig, total: int, utilization: float, weights: int, tokens: int,
         sequences: int, act_bytes: int, tensor_parallel: int, cuda_graphs: bool,
         multiprocessors: int | None, overhead_bytes: int | None, startup: int) -> Budget:
    requested = math.ceil(total * utilization)  # request_memory's own rounding, in float as vLLM does
    peak, phase = activation_peak(cfg, tokens=tokens, sequences=sequences, act_bytes=act_bytes,
                                  tensor_parallel=tensor_parallel, multiprocessors=multiprocessors)
    if overhead_bytes is not None:
        non_torch, non_torch_rule = overhead_bytes, "given in the request (overhead_bytes)"
    else:
        non_torch = (NON_TORCH_TPN_BYTES if tensor_parallel > 1
                     else NON_TORCH_TP1_BYTES if cuda_graphs else NON_TORCH_TP1_EAGER_BYTES)
        non_torch_rule = ("vLLM 0.19's reported non-torch forward increase on H100s at this tensor_parallel "
                          "(NCCL's lazily connected TP group and FlashInfer's all-reduce fusion at TP > 1; "
                          "cuBLAS handles and graph-capture profiling at TP 1)")
    reserved = [
        Reserved("weights", weights, True, "this GPU's share of the weights, as loaded (weights memory)"),
        Reserved("activations", peak, True,
                 f"the profile run's torch peak increase at max_num_batched_tokens {tokens:,}, set by {phase}; "
                 "attention is skipped in the profile run"),
        Reserved("non_torch", non_torch, True, non_torch_rule),
        Reserved("cuda_context", startup, False,
                 "CUDA context and NCCL communicator, held before vLLM's init snapshot: in 1 - utilization"),
    ]
    if cuda_graphs:
        reserved.append(Reserved(
            "cuda_graphs", cuda_graph_bytes(cfg), False,
            "the CUDA graph pool (51 capture sizes up to 512), captured after the cache is sized: not subtracted "
            "in vLLM 0.19 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0); from 0.21 it is, so the cache is this "
            "much smaller there"))
    answer = budget(NAME, total, requested, f"gpu_memory_utilization {utilization:g} x the device's total "
                                             f"(vllm/v1/worker/utils.py request_memory)", reserved)
    outside = answer.outside_bytes()
    if outside > total - requested:
        answer.notes.append(
            f"vLLM would not start: the {outside / GIB:.2f} GiB it holds outside its share exceed the "
            f"{(total - requested) / GIB:.2f} GiB that gpu_memory_utilization {utilization:g} leaves; lower it")
    return answer
