"""One serving pass kernel by kernel: what an engine's GPU really spends beyond the roofline.

The roofline (roofline.py) times a whole pass as max(all FLOPs, all bytes). A GPU runs the pass as
a chain of kernels, each of which waits on the one before it, so the time is a sum:

    gpu   = sum over GEMMs of max(compute, memory)      compute in whole waves at the part's MAMF
          + the attention core                          (decode: the cache read; prefill: FlashAttention)
          + the elementwise kernels between GEMMs       (norms, rotary, activation, residual adds)
          + the sampler's logits                        (read and written in float32)
          + the tensor-parallel all-reduces
          + kernels x KERNEL_FLOOR_S                    what every kernel costs however small
    host  = kernels x the host's cost to launch one     (from Python; nil from C++ or a CUDA graph)
    pass  = max(gpu, host)                              the host launches ahead while the GPU runs

A GEMM's compute is matmul.py's (tile and wave quantization at the part's Maximum Achievable Matmul
FLOPS, or at `flops_efficiency` of the dense peak when the request gives one); its memory is its
weights in their stored format, its activations in and out, at memory_efficiency of the bandwidth.

Kernels per layer follow what a fused engine launches (vLLM's LlamaDecoderLayer,
vllm/model_executor/models/llama.py, and its fused_moe): an eager framework launches several times
as many (EAGER_OPS_PER_LAYER), each from Python.
"""

from dataclasses import dataclass
from typing import Literal, NamedTuple

from app.accounting import blocks, matmul
from app.accounting.inference import roofline
from app.accounting.inference.roofline import Hardware
from app.accounting.matmul import Gemm, MatmulDevice
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig

Launch = Literal["graph", "native", "python", "eager"]
"""How the host issues a pass's kernels: graph (a captured CUDA graph replayed: vLLM's and SGLang's
decode, gpt-fast's reduce-overhead, llama.cpp's single-sequence decode), native (fused kernels
launched one by one from C++, as TensorRT-LLM's engine and llama.cpp without graphs do; a few us
each, hidden behind kernels that run longer, so counted nil), python (the same fused kernels, each
launched from Python: vLLM's enforce_eager, SGLang's disable_cuda_graph) or eager (PyTorch op by op
from Python, unfused: transformers)."""

KERNEL_FLOOR_S = 1.2e-6
"""Seconds a kernel costs the GPU however little it does, launched or replayed: a 1024-element add
timed on the device takes 1.1-1.3 us (pytorch/pytorch#161104, CUDA events around `x + y`)."""

EAGER_HOST_S_PER_OP = 10.47e-3 / 776
"""Host seconds to launch one op from eager PyTorch: Tally's own generate probe on an H200 decoded
llama3.2-1b at batch 1 in 10.47 ms a step, 776 ops each, launch-bound (docs/measurements/
gpu-targets-h200.json): 13.5 us an op (Python, the dispatcher and cudaLaunchKernel together)."""

EAGER_OPS_PER_LAYER = (776 - 8) // 16
"""Ops an eager decode launches per layer: the same probe's 776 a step over llama3.2-1b's 16
layers, less 8 outside them (embedding, final norm, head, sampling): 48."""

RESIDUAL_READS_PER_LAYER = 4
"""Two residual adds a layer, each reading the stream and the branch (d_model wide): the elementwise
traffic beyond what feeds and drains the GEMMs."""

SAMPLER_KERNELS = 4
"""vLLM's sampler on the logits: temperature, softmax, top-k/top-p, the draw (v1/sample/sampler.py)."""
SAMPLER_PASSES = 3
"""float32 logits written by the head, read by the softmax and read by the draw: bytes = 3 x 4 x vocab
per sequence."""
LOGIT_BYTES = 4


@dataclass(slots=True)
class PassTime:
    """One pass on one GPU, kernel by kernel. Seconds unless named otherwise."""

    gemm_seconds: float
    """Every GEMM (the LM head's included), each the slower of its waves and its bytes."""
    attention_seconds: float
    other_seconds: float
    """The elementwise kernels' activations, the sampler's logits and the cache written."""
    communication_seconds: float
    kernels: int
    kernel_floor_seconds: float
    """kernels x KERNEL_FLOOR_S."""
    gpu_seconds: float
    host_seconds: float
    """kernels x the host's cost per launch; 0 when a CUDA graph replays the pass."""
    seconds: float
    """max(gpu_seconds, host_seconds)."""
    launch: Launch

    __pydantic_config__ = RECORD


def kernels_per_layer(layer: blocks.Layer, tensor_parallel: int, launch: Launch) -> int:
    """Kernels one layer launches in a fused engine: the norm (fused with the residual add), the
    qkv GEMM, rotary, the cache write, attention, the output GEMM, the second norm, gate/up,
    the activation and down (10, as vLLM's Llama layer runs them); experts add a router GEMM,
    top-k, the token sort and the combine around their two grouped GEMMs; an all-reduce after
    attention and after the MLP under tensor parallelism. Eager PyTorch launches
    EAGER_OPS_PER_LAYER instead."""
    if launch == "eager":
        return EAGER_OPS_PER_LAYER
    n = 10
    cfg = layer.attention.cfg
    if cfg.mla:  # latent attention: the q and kv down-projections and their norms before qkv
        n += 4
    if cfg.qk_norm != "none":
        n += 1
    if layer.mlp.routes:
        n += 4 + (3 if cfg.n_shared_experts else 0)
    if tensor_parallel > 1:
        n += 2
    return n


def step_kernels(cfg: TransformerConfig, tensor_parallel: int, launch: Launch) -> int:
    """Kernels of one forward and sampling: every layer's, the embedding, the final norm, the head
    and the sampler."""
    layers = sum(n * kernels_per_layer(layer, tensor_parallel, launch) for layer, n in blocks.distinct(cfg))
    return layers + 3 + SAMPLER_KERNELS


def _gemm_seconds(g: Gemm, dev: MatmulDevice, *, weight_bytes: float, act_bytes: int,
                  touched: float) -> float:
    """max(compute at the MAMF rate, the weights `touched` of `groups` and activations moved).
    Compute is in whole waves of tiles once the GEMM has a tile's worth of rows (matmul.waves: at 128
    rows that matches TensorRT-LLM's first-token times on A100 and L40S, bench/published_latency.py);
    thinner ones, a decode step's, run as split-K or GEMV kernels that spread the work over every SM
    (CUTLASS's split-K; cuBLASLt's CUBLASLT_ALGO_CONFIG_SPLITK_NUM), so they pay no waves."""
    if g.m >= matmul.table().tile[1]:
        compute = matmul.gemm_time(g, dev).compute_seconds
    else:
        compute = g.flops / dev.mamf_flop_per_sec
    moved = g.k * g.n * weight_bytes * touched + act_bytes * g.groups * g.m * (g.k + g.n)
    return max(compute, moved / dev.memory_bandwidth_bytes_per_sec)


@dataclass(frozen=True, slots=True)
class Deployment:
    """What a pass needs of the deployment (inference/setup.py's Setup), hashable."""

    cfg: TransformerConfig
    tensor_parallel: int
    weight_bytes_per_param: float
    """The format's bytes per weight (scales included)."""
    act_bytes: int
    kv_bytes_per_token: int
    """One sequence's cache per token on one GPU (every layer)."""


class Forward(NamedTuple):
    """A forward's pieces that depend on its token count alone (every layer's GEMMs, the
    elementwise traffic around them, the cache written, the all-reduces), seconds."""

    gemm_seconds: float
    other_seconds: float
    communication_seconds: float


class Sampling(NamedTuple):
    """The pieces that depend on the sequences sampled alone (the head on each last position, the
    sampler's logits), seconds."""

    gemm_seconds: float
    other_seconds: float


def forward_parts(d: Deployment, hw: Hardware, dev: MatmulDevice, tokens: int) -> Forward:
    """Every layer's GEMMs at `tokens` rows, each input written and output read by the kernels
    around it, the residual stream, the cache the tokens write and the tensor-parallel all-reduces."""
    cfg, tp = d.cfg, d.tensor_parallel
    gemms = 0.0
    elementwise = 0  # elements: each GEMM's input written and output read by the kernels around it
    routed = blocks.routed(cfg)
    for layer, n in blocks.distinct(cfg):
        elementwise += n * tokens * RESIDUAL_READS_PER_LAYER * cfg.d_model
        for g in matmul.layer_gemms(layer, tokens, tp):
            elementwise += n * g.groups * g.m * (g.k + g.n)
            touched = 1.0
            if g.groups > 1 and routed is not None:  # the experts the batch's tokens pick, of this rank's
                touched = min(1.0, routed.experts_read(tokens) / cfg.n_experts)
            gemms += n * _gemm_seconds(g, dev, weight_bytes=d.weight_bytes_per_param, act_bytes=d.act_bytes,
                                       touched=touched)
    written = tokens * d.kv_bytes_per_token
    other = (written + elementwise * d.act_bytes) / dev.memory_bandwidth_bytes_per_sec
    comm = roofline.allreduce_seconds(cfg, hw, tokens=tokens, act_bytes=d.act_bytes, tensor_parallel=tp)
    return Forward(gemms, other, comm)


def sampling_parts(d: Deployment, dev: MatmulDevice, sequences: int) -> Sampling:
    head = matmul.head_gemm(d.cfg, sequences, d.tensor_parallel)  # the last position of each sequence
    gemm = _gemm_seconds(head, dev, weight_bytes=d.weight_bytes_per_param, act_bytes=d.act_bytes, touched=1.0)
    logits = SAMPLER_PASSES * LOGIT_BYTES * sequences * -(-d.cfg.vocab_size // d.tensor_parallel)
    return Sampling(gemm, logits / dev.memory_bandwidth_bytes_per_sec)


def prompt_attention_seconds(d: Deployment, dev: MatmulDevice, prompt_len: int) -> float:
    """One `prompt_len`-token prompt's attention core (the forward's, FlashAttention's), every layer."""
    return sum(n * matmul.attention_core_seconds(layer, batch=1, seq_len=prompt_len, tp=d.tensor_parallel,
                                                 dev=dev)[0] for layer, n in blocks.distinct(d.cfg))


def pass_time(d: Deployment, hw: Hardware, dev: MatmulDevice, *, tokens: int, sequences: int,
              cache_read_bytes: float, launch: Launch, prompts: float = 0.0,
              prompt_len: int = 0, host_seconds_per_op: float = EAGER_HOST_S_PER_OP) -> PassTime:
    """One forward of `tokens` new tokens, reading `cache_read_bytes` of cached keys and values,
    then sampling one token for each of `sequences`. `prompts` of `prompt_len` tokens are among the
    tokens (a prefill: all of them; a chunked-prefill step: a fraction of a prompt's worth), their
    attention as FlashAttention computes it. `dev` carries the efficiencies: its MAMF rate and its
    bandwidth are what the GEMMs reach."""
    body = forward_parts(d, hw, dev, tokens)
    head = sampling_parts(d, dev, sequences)
    attention = prompts * prompt_attention_seconds(d, dev, prompt_len) if prompts else 0.0
    attention += cache_read_bytes / dev.memory_bandwidth_bytes_per_sec
    return assemble(d, launch, gemm=body.gemm_seconds + head.gemm_seconds, attention=attention,
                    other=body.other_seconds + head.other_seconds, comm=body.communication_seconds,
                    host_seconds_per_op=host_seconds_per_op)


def assemble(d: Deployment, launch: Launch, *, gemm: float, attention: float, other: float, comm: float,
             host_seconds_per_op: float) -> PassTime:
    """The pass from its pieces: the kernels' floors beside them, and the host's launches."""
    count = step_kernels(d.cfg, d.tensor_parallel, launch)
    floors = count * KERNEL_FLOOR_S
    gpu = gemm + attention + other + comm + floors
    host = count * host_seconds_per_op if launch in ("python", "eager") else 0.0
    return PassTime(gemm_seconds=gemm, attention_seconds=attention, other_seconds=other,
                    communication_seconds=comm, kernels=count, kernel_floor_seconds=floors, gpu_seconds=gpu,
                    host_seconds=host, seconds=max(gpu, host), launch=launch)
