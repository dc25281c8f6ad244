"""Serving time on the roofline: time to first token, inter-token latency, throughput and
cost per million tokens.

Conventions, each stated in the answer:
- Time to first token is one prompt's prefill alone on its replica (no queueing).
- A decode step serves every sequence of a replica at once (continuous batching), each at
  the mean context of its generation: prompt + output/2.
- A step reads this GPU's dense weights once, the routed experts its tokens pick
  (roofline.experts_read), every sequence's cached keys and values, and writes the new ones.
- Batching, by engine: `continuous` (vLLM, SGLang, llama.cpp's server) mixes the prompts into
  the decode steps as chunked prefill does: vLLM V1's scheduler fills each step's token budget
  with the running requests' decode tokens first, then the waiting prompts, whole or the chunk
  that fits (vllm/v1/core/sched/scheduler.py). In steady state the steps carry, on average, the
  prompt tokens that keep `batch` requests in flight, batch x prompt / output (at most the budget
  left): when that is less than a prompt, a share of the steps carries one and the rest decode
  alone. The inter-token latency is the mean step, and requests/s batch / output a step.
  `static` (transformers' generate, TensorRT-LLM's and FasterTransformer's benchmarks): a batch's
  prompts prefill together, then `output` decode steps alone.
- Cost splits GPU time by phase: the decode-alone step is charged to output tokens, the rest
  (the prefill, or a mixed step's extra) to input tokens.
- Every time answered is kernels.py's: the pass kernel by kernel (GEMMs in whole waves at the
  part's achievable rate, each kernel's floor, the host's launches unless a CUDA graph replays
  them). The roofline's Pass beside it is the ideal; the difference is the overhead.
"""

import math
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from app.accounting import blocks
from app.accounting.inference import kernels, roofline
from app.accounting.inference.capacity import fits
from app.accounting.inference.kernels import Launch, PassTime
from app.accounting.inference.roofline import Hardware, Pass
from app.accounting.inference.setup import Setup
from app.accounting.matmul import MatmulDevice
from app.accounting.records import RECORD
from app.accounting.units import SECONDS_PER_HOUR

MAX_BATCH = 1 << 20
Batching = Literal["continuous", "static"]


@dataclass(slots=True)
class DecodePoint:
    """One decode step at a batch size (the tokens/s chart's x)."""

    batch: int
    seconds: float
    """The step kernel by kernel (kernels.py)."""
    tokens_per_sec: float
    """batch / seconds, one replica."""
    bound: str
    """The roofline's bound."""
    roofline_seconds: float
    """max(compute, memory) + all-reduces: the ideal step."""
    overhead_seconds: float
    """seconds - roofline_seconds: waves, kernel floors and host launches."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class InferenceTime:
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    sequences_per_replica: int
    replicas: int
    tensor_parallel: int
    prefill: Pass
    """One prompt alone, on the roofline."""
    decode: Pass
    """One step of sequences_per_replica sequences at context prompt + output/2, on the roofline."""
    prefill_kernels: PassTime
    """The same prefill kernel by kernel: its seconds are time_to_first_token_s."""
    decode_kernels: PassTime
    """The same step kernel by kernel, decoding alone: the inter-token latency under static
    batching (continuous batching's is the mean of it and step_kernels)."""
    launch: Launch
    """How the engine issues its kernels (kernels.Launch)."""
    batching: Batching
    """How prompts meet decode steps: continuous (chunked prefill mixed in) or static."""
    prefill_tokens_per_step: float
    """Continuous batching: the prompt tokens a decode step carries on average in steady state
    (sequences_per_replica x prompt / output, at most the token budget left); 0 static."""
    prompt_step_share: float
    """The share of steps that carry prompt tokens: the scheduler takes a waiting prompt whole (or
    what fits the budget), so when fewer are needed than a prompt a step, some steps carry one and
    the rest decode alone; the inter-token latency is the mean over them."""
    step_kernels: PassTime
    """A step that carries prompt tokens, kernel by kernel (decode_kernels itself when none do)."""
    time_to_first_token_s: float
    inter_token_latency_s: float
    tokens_per_sec_per_user: float
    output_tokens_per_sec: float
    """Over all replicas."""
    requests_per_sec: float
    """Over all replicas."""
    compute_bound_batch: int | None
    """The smallest decode batch per replica whose step is compute-bound at this context; null
    when every sequence's cache read outweighs its FLOPs (decode stays memory-bound)."""
    decode_curve: list[DecodePoint]
    cost_per_million_input_tokens: float | None
    cost_per_million_output_tokens: float | None
    currency: str
    flops_efficiency: float
    flops_efficiency_source: str
    """"given", "default", or the matmul job of this device it was measured by."""
    memory_efficiency: float
    memory_efficiency_source: str
    """"given", "default", or the bandwidth job of this device it was measured by."""
    peak_flop_per_sec: float
    """One GPU's dense peak at the matmuls' dtype (float8 or int8 for W8A8 formats)."""
    peak_dtype: str
    fits: bool
    """concurrency sequences of prompt + output tokens fit in memory (POST /api/v1/inference/capacity).
    When not, the times are what the passes would take were there room: the pages show none of
    them, and `advice` says what would make it fit."""
    conventions: list[str]
    advice: str | None = None
    """As InferenceMemory's."""
    calibration: list[str] = field(default_factory=list)
    """With `calibration`: which figures came from which profile and jobs, and the profile's flags."""

    __pydantic_config__ = RECORD


CONVENTIONS = [
    "Time to first token: one prompt's prefill alone on its replica, no queueing.",
    "Decode: every sequence of a replica steps together at the mean context prompt + output/2.",
    "Each pass is timed kernel by kernel: each GEMM the slower of its whole waves at the part's achievable "
    "matmul rate and its bytes, the attention core, the sampler, the all-reduces, a floor per kernel, and "
    "the host's launches where no CUDA graph replays them; prefill and decode kernels do not overlap.",
    "MoE decode reads the experts its tokens pick, top_k of n_experts each, uniformly at random.",
    "The LM head runs on each sequence's last position only.",
    "Continuous batching (vLLM, SGLang, llama.cpp's server) carries each step's share of the prompts as "
    "chunked prefill, whole prompts in a share of the steps: the inter-token latency is the mean step; static "
    "batching (transformers) prefills a batch, then decodes it alone.",
    "Cost charges the decode-alone step to output tokens and the rest (prefill, or a mixed step's extra) to "
    "input tokens.",
]


def prefill(setup: Setup, hw: Hardware, *, prompt: int, sequences: int = 1) -> Pass:
    """`sequences` prompts in one forward (roofline.prefill_pass) on this deployment."""
    return roofline.prefill_pass(setup.cfg, hw, prompt=prompt, sequences=sequences,
                                 weights_bytes=setup.weights_per_gpu,
                                 cache_bytes=setup.kv_per_gpu(context=prompt, batch=1, paged=False),
                                 act_bytes=setup.act_bytes, tensor_parallel=setup.tensor_parallel)


class _Decode(NamedTuple):
    """What one sequence adds to a decode step at a context; a step is linear in these."""

    flops: int
    cache_bytes: int
    new_bytes: int


def _per_sequence(setup: Setup, context: int) -> _Decode:
    return _Decode(roofline.decode_flops(setup.cfg, context=context, mla_cache=setup.mla_cache),
                   setup.kv_per_gpu(context=context, batch=1, paged=False),
                   setup.kv_per_gpu(context=1, batch=1, paged=False))


def _bytes(setup: Setup, one: _Decode, batch: int) -> int:
    return roofline.decode_step_bytes(setup.cfg, weights_bytes=setup.weights_per_gpu,
                                      routed_bytes=setup.routed_bytes_per_gpu,
                                      embedding_bytes=setup.embedding_bytes_per_gpu, batch=batch,
                                      cache_bytes=one.cache_bytes, new_bytes=one.new_bytes)


def _compute_bound(setup: Setup, hw: Hardware, one: _Decode, batch: int) -> bool:
    """roofline.run's test, without building the Pass."""
    compute = batch * one.flops / setup.tensor_parallel / (hw.peak_flop_per_sec * hw.flops_efficiency)
    return compute >= _bytes(setup, one, batch) / (hw.bandwidth_bytes_per_sec * hw.memory_efficiency)


def deployment(setup: Setup) -> kernels.Deployment:
    """What kernels.py needs of the deployment."""
    w = setup.weights
    return kernels.Deployment(cfg=setup.cfg, tensor_parallel=setup.tensor_parallel,
                              weight_bytes_per_param=w.total_bytes / w.params, act_bytes=setup.act_bytes,
                              kv_bytes_per_token=setup.kv_token_bytes_per_gpu)


class Device(NamedTuple):
    """The hardware twice: the roofline's scalars, and the GEMMs' view (its MAMF rate and its
    bandwidth already at the request's efficiencies), with how the engine launches and batches."""

    hw: Hardware
    dev: MatmulDevice
    launch: Launch
    batching: Batching = "continuous"
    host_seconds_per_op: float = kernels.EAGER_HOST_S_PER_OP
    """What the host spends launching one op (python, eager): Tally's H200 measurement, or a
    calibration profile's (launch_eager_s)."""


def decode_kernels(setup: Setup, on: Device, one: _Decode, batch: int, chunk: int = 0,
                   prompt: int = 0) -> PassTime:
    """One decode step of `batch` sequences, kernel by kernel; with `chunk` prompt tokens of
    `prompt`-token prompts riding along (chunked prefill), a mixed step."""
    return kernels.pass_time(deployment(setup), on.hw, on.dev, tokens=batch + chunk, sequences=batch,
                             cache_read_bytes=batch * one.cache_bytes, launch=on.launch,
                             host_seconds_per_op=on.host_seconds_per_op,
                             prompts=chunk / prompt if chunk else 0.0, prompt_len=prompt)


def prefill_kernels(setup: Setup, on: Device, *, prompt: int, sequences: int = 1) -> PassTime:
    """`sequences` prompts of `prompt` tokens in one forward, kernel by kernel."""
    return kernels.pass_time(deployment(setup), on.hw, on.dev, tokens=sequences * prompt, sequences=sequences,
                             cache_read_bytes=0, launch=on.launch, prompts=sequences, prompt_len=prompt,
                             host_seconds_per_op=on.host_seconds_per_op)


def _curve(setup: Setup, on: Device, one: _Decode, top: int) -> list[DecodePoint]:
    """Decode steps at batches 1, 2, 4, ... up to `top` (the chart's points): kernel by kernel,
    with the roofline's time and bound beside each."""
    points = []
    for i in range(top.bit_length()):
        batch = 1 << i
        ideal = _step(setup, on.hw, one, batch)
        seconds = decode_kernels(setup, on, one, batch).seconds
        points.append(DecodePoint(batch, seconds, batch / seconds, ideal.bound, ideal.seconds,
                                  seconds - ideal.seconds))
    return points


def _step(setup: Setup, hw: Hardware, one: _Decode, batch: int) -> Pass:
    comm = roofline.allreduce_seconds(setup.cfg, hw, tokens=batch, act_bytes=setup.act_bytes,
                                      tensor_parallel=setup.tensor_parallel)
    return roofline.run(hw, flops=batch * one.flops, bytes=_bytes(setup, one, batch),
                        tensor_parallel=setup.tensor_parallel, comm_seconds=comm)


def decode_step(setup: Setup, hw: Hardware, *, batch: int, context: int) -> Pass:
    """One step of `batch` sequences, each at `context` tokens."""
    return _step(setup, hw, _per_sequence(setup, context), batch)


def compute_bound_batch(setup: Setup, hw: Hardware, *, context: int,
                        one: _Decode | None = None) -> int | None:
    """Bisection for the first batch whose step is compute-bound. Compute grows by a fixed
    amount per sequence while memory grows by its cache (and, for MoE, saturating expert
    reads), so once compute wins it keeps winning."""
    one = one or _per_sequence(setup, context)
    if not _compute_bound(setup, hw, one, MAX_BATCH):
        return None
    if not blocks.routed(setup.cfg):  # both times are linear in the batch: solve, then settle rounding
        per_flop = one.flops / setup.tensor_parallel / (hw.peak_flop_per_sec * hw.flops_efficiency)
        rate = hw.bandwidth_bytes_per_sec * hw.memory_efficiency
        per_byte = (one.cache_bytes + one.new_bytes) / rate
        guess = max(1, math.ceil(_bytes(setup, one, 0) / rate / (per_flop - per_byte)))
        while guess > 1 and _compute_bound(setup, hw, one, guess - 1):
            guess -= 1
        while not _compute_bound(setup, hw, one, guess):
            guess += 1
        return guess
    lo, hi = 0, MAX_BATCH  # memory-bound at lo (or lo = 0), compute-bound at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _compute_bound(setup, hw, one, mid):
            hi = mid
        else:
            lo = mid
    return hi


def _decode_table(setup: Setup, on: Device, context: int) -> tuple[_Decode, int | None, list[DecodePoint]]:
    """A step's per-sequence terms at `context`, the compute-bound batch and the decode curve:
    they depend on the deployment, the hardware and the context alone, so a deployment keeps
    them while requests vary concurrency, output length and price."""
    key = ("decode", on, context)
    table = setup.memo.get(key)
    if table is None:
        one = _per_sequence(setup, context)
        knee = compute_bound_batch(setup, on.hw, context=context, one=one)
        table = setup.remember(key, (one, knee, _curve(setup, on, one, max(knee or 1, 256) * 2)))
    return table


def serving_time(setup: Setup, on: Device, *, prompt: int, output: int, concurrency: int,
                 price_per_gpu_hour: float | None, currency: str, peak_dtype: str,
                 sources: tuple[str, str] = ("given", "given")) -> InferenceTime:
    hw = on.hw
    per_replica = -(-concurrency // setup.replicas)
    context = prompt + output // 2
    first = prefill(setup, hw, prompt=prompt)
    one, knee, curve = _decode_table(setup, on, context)
    step = _step(setup, hw, one, per_replica)
    first_k = prefill_kernels(setup, on, prompt=prompt)
    alone = decode_kernels(setup, on, one, per_replica)
    if on.batching == "static":
        chunk, itl, share = 0.0, alone, 0.0
        mean = alone.seconds
        batched = prefill_kernels(setup, on, prompt=prompt, sequences=per_replica)
        requests = per_replica / (batched.seconds + output * alone.seconds)  # a batch's whole life
        output_rate = per_replica / alone.seconds
        input_seconds = batched.seconds / (per_replica * prompt)  # GPU-seconds per input token
    else:
        room = max(setup.max_num_batched_tokens - per_replica, 0)  # the budget past the decode tokens
        need = per_replica * prompt / output  # prompt tokens a step must carry, on average
        piece = min(prompt, room)  # the scheduler takes a waiting prompt whole, or what fits
        if need <= piece:  # a share of the steps carries one piece, the others decode alone
            chunk, share = need, need / piece if piece else 0.0
            itl = decode_kernels(setup, on, one, per_replica, piece, prompt) if piece else alone
            mean = share * itl.seconds + (1 - share) * alone.seconds
        else:  # every step carries prompts, as many as fit
            chunk, share = min(need, room), 1.0
            itl = decode_kernels(setup, on, one, per_replica, math.ceil(chunk), prompt)
            mean = itl.seconds
        per_step = chunk / prompt  # requests a step completes (per_replica / output unless capped)
        requests = per_step / mean
        output_rate = per_step * output / mean
        input_seconds = (mean - alone.seconds) / chunk if chunk else 0.0
    if 2 * per_replica > curve[-1].batch:  # more sequences than the table reaches
        curve = _curve(setup, on, one, 2 * per_replica)
    gpu_hours_per_sec = setup.num_gpus / SECONDS_PER_HOUR / setup.replicas  # one replica's GPUs
    if price_per_gpu_hour is None:
        cost_in = cost_out = None
    else:  # GPU-hours per token: the decode-alone step to output, the rest to input
        cost_out = 1e6 * alone.seconds / per_replica * gpu_hours_per_sec * price_per_gpu_hour
        cost_in = 1e6 * input_seconds * gpu_hours_per_sec * price_per_gpu_hour
    return InferenceTime(
        prompt_tokens=prompt, output_tokens=output, concurrency=concurrency,
        sequences_per_replica=per_replica,
        replicas=setup.replicas, tensor_parallel=setup.tensor_parallel, prefill=first, decode=step,
        prefill_kernels=first_k, decode_kernels=alone, launch=on.launch, batching=on.batching,
        prefill_tokens_per_step=chunk, step_kernels=itl,
        time_to_first_token_s=first_k.seconds, inter_token_latency_s=mean,
        tokens_per_sec_per_user=1 / mean, prompt_step_share=share,
        output_tokens_per_sec=setup.replicas * output_rate,
        requests_per_sec=setup.replicas * requests, compute_bound_batch=knee,
        decode_curve=curve, cost_per_million_input_tokens=cost_in, cost_per_million_output_tokens=cost_out,
        currency=currency, flops_efficiency=hw.flops_efficiency, flops_efficiency_source=sources[0],
        memory_efficiency=hw.memory_efficiency, memory_efficiency_source=sources[1],
        peak_flop_per_sec=hw.peak_flop_per_sec, peak_dtype=peak_dtype,
        fits=fits(setup, context=prompt + output, concurrency=concurrency), conventions=CONVENTIONS)
