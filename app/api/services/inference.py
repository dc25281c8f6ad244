"""Serving: memory per GPU, what fits, and prefill/decode time."""

import dataclasses
from functools import lru_cache
from typing import Any, Literal, NamedTuple

from pydantic import Field

from app.accounting import dtypes, hardware, matmul
from app.accounting.calibration import surface
from app.accounting.calibration.profile import Profile
from app.accounting.comm import collectives
from app.accounting.errors import InvalidInput
from app.accounting.inference import capacity, engines, formats, kernels, kv_cache, latency, weights
from app.accounting.inference.roofline import Hardware
from app.accounting.inference.setup import Setup
from app.api.services import serving_advice
from app.api.services.time import Currency
from app.inputs.calibration import CALIBRATION_HELP, CalibrationRef
from app.inputs.fields import byte_count, count, number, sequence_length
from app.inputs.schemas import GpuInput, ModelSpec, engine_model, gpu_label, named
from app.measured.here import Here

WeightFormat = named("weight format", tuple(formats.FORMATS), formats.QUANTIZATION_LISTING,
                      lambda name: formats.lookup_format(name).id)
Component = Literal[weights.COMPONENTS]  # type: ignore[valid-type]
ModelDtype = Literal["bfloat16", "float16", "float32"]
_CACHE_DTYPES = ("auto", *kv_cache.CACHE_FORMATS)


def _cache_dtype(name: str) -> str:
    fmt = dtypes.lookup(name, field="cache_dtype")
    if fmt.name not in _CACHE_DTYPES:
        listed = ", ".join(_CACHE_DTYPES)
        raise InvalidInput("cache_dtype", f"{name!r} cannot hold a KV cache; use one of {listed}")
    return fmt.name


CacheDtype = named("cache dtype", _CACHE_DTYPES, dtypes.DTYPES_LISTING, _cache_dtype)
# Formats whose matmuls run on quantized activations too, by format id (W8A8 as vLLM runs FP8 and
# INT8; MXFP8 on MX tensor cores; NVFP4 W4A4, its checkpoints carrying the activations' input_scale)
# on GPUs with that peak; every other format is dequantized to `dtype` on the fly (Marlin, GGUF
# kernels, and gpt-oss's MXFP4 experts through triton_kernels' matmul_ogs with bf16 activations).
W8A8_PEAK = {"fp8_e4m3": "float8_e4m3fn", "fp8_e4m3_block128": "float8_e4m3fn",
             "int8_channel": "int8", "mxfp8": "float8_e4m3fn", "nvfp4": "float4_e2m1fn"}

DEFAULT_MEMORY_EFFICIENCY = 0.9
# From profiling FasterTransformer on an A100 (kipply, "Transformer Inference Arithmetic", 2022), as
# llm-analysis takes it; the highest the model's memory-bound parts reached. The matmuls' default is
# each part's own Maximum Achievable Matmul FLOPS (app/accounting/data/matmul.toml), in whole waves.


class ServingRequest(GpuInput):
    model: ModelSpec
    weight_format: WeightFormat = Field(
        "bfloat16", description="How the weights are stored (GET /api/v1/quantization lists the formats "
                                "with their bits per weight).")
    group_size: count(-1, 1 << 20) = Field(
        128, description="Weights per scale for group-wise formats (GPTQ and AWQ int4); -1 is one group per "
                         "input column.")
    unquantized: list[Component] | None = Field(  # type: ignore[valid-type]
        None, description="Components kept in `dtype` rather than the weight format; null is the format's "
                          "own rule (GET /api/v1/quantization says which for each).")
    dtype: ModelDtype = Field(
        "bfloat16", description="Activations, and any weight the format leaves unquantized.")
    cache_dtype: CacheDtype = Field(  # type: ignore[valid-type]
        "auto", description="Dtype of the KV cache; auto is `dtype`.")
    mla_cache: kv_cache.MlaCache = Field(
        "latent", description="Latent attention only: cache the latent (kv_lora_rank + qk_rope_head_dim per "
                              "token per layer, as vLLM and FlashMLA do) or decompressed keys and values "
                              "(as eager transformers does).")
    block_size: count(1, 1 << 16) | None = Field(
        16, description="vLLM's paged-attention block in tokens (its default 16): each sequence's cache is "
                        "rounded up to whole blocks. null: unpaged, exact. Other engines lay out their own "
                        "cache (SGLang a slot a token, llama.cpp 256-token padding, transformers unpaged).")
    engine: engines.EngineName = Field(
        "vllm", description="Whose conventions budget each GPU and lay out the cache: vllm (`vllm serve`, V1 "
                            "engine), sglang, llama.cpp or transformers (generate with its DynamicCache). "
                            "docs/api/inference.md gives each one's rules and sources.")
    num_gpus: count(1, 1 << 20) = Field(
        1, description="GPUs of this kind; num_gpus / tensor_parallel replicas of the model.")
    tensor_parallel: count(1, 1024) | None = Field(
        None, description="GPUs each replica splits its weights and KV heads over (KV heads are replicated "
                          "when it exceeds them). null: the fewest GPUs per replica, of those dividing "
                          "num_gpus, at which the asked sequences fit (else one does, else num_gpus): "
                          "more replicas serve more, as vLLM's data parallel does.")
    gpu_memory_utilization: number(gt=0, le=1, text=False) | None = Field(
        None, description="vLLM only: the share of each GPU's total it may use; null is vLLM's default 0.9.")
    mem_fraction_static: number(gt=0, le=1, text=False) | None = Field(
        None, description="SGLang only: the share of the memory free at start it keeps for weights and the "
                          "token pool; null is SGLang's default for this GPU and tensor_parallel.")
    max_num_batched_tokens: count(1, 1 << 24) | None = Field(
        None, description="Tokens in the largest forward, which sets the activation memory: vLLM's "
                          "max_num_batched_tokens, SGLang's chunked_prefill_size, llama.cpp's n_ubatch, "
                          "transformers' batch x prompt. null: the engine's default for this GPU (vllm serve: "
                          "8192 on a GPU of 70 GiB or more that is not an A100, else 2048).")
    max_num_seqs: count(1, 1 << 20) | None = Field(
        None, description="Sequences sampled in one step (vLLM's max_num_seqs: its sampler's memory; llama.cpp's "
                          "-np; transformers' batch). null: the engine's default (vllm serve: 1024 on a GPU of "
                          "70 GiB or more that is not an A100, else 256).")
    cuda_graphs: bool = Field(
        True, description="The engine captures CUDA graphs (false: vLLM's enforce_eager, SGLang's "
                          "disable_cuda_graph); sets vLLM's memory outside torch and the graph pool.")
    free_memory_bytes: byte_count(1, 10**15) | None = Field(
        None, description="Memory free on each GPU when the engine starts (SGLang's 'Load weight begin. avail "
                          "mem'; nvidia-smi's free). null: the total less a CUDA context (and NCCL's "
                          "communicator across GPUs). Another process or a display holds the difference.")
    overhead_bytes: byte_count(0, 10**13) | None = Field(
        None, description="vLLM: its memory outside torch (NCCL, cuBLAS handles) in place of the modelled "
                          "figure (0.25 GiB on one GPU, 2.1 GiB across GPUs, from vLLM 0.19's logs). null: "
                          "modelled.")

    def setup(self, tensor_parallel: int | None = None) -> Setup:
        """The deployment; tensor_parallel null (here and in the request) is the one that fits."""
        tp = tensor_parallel or self.tensor_parallel
        if tp is None:
            return fitting_setup(self)
        self._check_engine_fields()
        acc = self.accelerator()
        picked = engines.defaults(self.engine, memory_bytes=acc.memory_bytes, gpu_id=acc.id, tensor_parallel=tp)
        fraction = (self.gpu_memory_utilization if self.engine == "vllm" else
                    self.mem_fraction_static if self.engine == "sglang" else None)
        block = self.block_size if self.engine == "vllm" else picked["block_size"]
        return _deployment(
            cfg=engine_model(self.model), weight_format=self.weight_format, group_size=self.group_size,
            keep=None if self.unquantized is None else tuple(self.unquantized), model_dtype=self.dtype,
            cache_dtype=self.cache_dtype, mla_cache=self.mla_cache, block_size=block, tensor_parallel=tp,
            num_gpus=self.num_gpus, memory_bytes=acc.memory_bytes,
            memory_fraction=picked["memory_fraction"] if fraction is None else fraction,
            max_num_batched_tokens=self.max_num_batched_tokens or picked["max_num_batched_tokens"],
            max_num_seqs=self.max_num_seqs or picked["max_num_seqs"], overhead_bytes=self.overhead_bytes,
            engine=self.engine, memory_note=hardware.memory_note(acc), cuda_graphs=self.cuda_graphs,
            free_memory_bytes=self.free_memory_bytes)

    def _check_engine_fields(self) -> None:
        """A setting of another engine is refused rather than silently ignored."""
        own = {"gpu_memory_utilization": "vllm", "mem_fraction_static": "sglang", "overhead_bytes": "vllm",
               "block_size": "vllm"}
        for field, engine in own.items():
            if field in self.model_fields_set and engine != self.engine:
                raise InvalidInput(field, f"is {engine}'s setting; engine {self.engine!r} does not read it "
                                          "(docs/api/inference.md lists each engine's settings)")

    def asked_context(self, setup: Setup) -> int:
        """Tokens per sequence the request asks to hold (memory: context; time: prompt + output)."""
        return setup.cfg.max_seq_len

    def asked_concurrency(self) -> int:
        return getattr(self, "concurrency", 1)


def fitting_setup(body: ServingRequest) -> Setup:
    """The deployment at the fewest GPUs per replica (divisors of num_gpus, smallest first) at
    which the asked sequences fit; else at which one sequence fits; else at num_gpus. A divisor
    the heads or shards refuse is skipped; if all are refused, num_gpus's refusal is raised."""
    candidates = [d for d in range(1, body.num_gpus + 1) if body.num_gpus % d == 0 and d <= 1024]
    setups = []
    for tp in candidates:
        try:
            setup = body.setup(tp)
            context = min(body.asked_context(setup), setup.cfg.max_seq_len)
            capacity.memory(setup, context=context, concurrency=1)  # refuses what cannot split
        except InvalidInput:
            continue
        setups.append((setup, context))
    if not setups:
        return body.setup(candidates[-1])  # raises: tensor_parallel named
    for want in (body.asked_concurrency(), 1):
        for setup, context in setups:
            if capacity.max_sequences(setup, context) >= want:
                return setup
    return setups[-1][0]


@lru_cache(maxsize=64)  # x Setup.memo's 256 entries bounds what a stream of odd requests can hold
def _deployment(**fields: Any) -> Setup:
    """One Setup per deployment, so its weights, workspace and cache budget are worked out once
    while a user varies the prompt, output and concurrency (as training/stages.plan_of is per layout)."""
    return Setup(**fields)


def _context(setup: Setup, value: int | None, field: str = "context") -> int:
    top = setup.cfg.max_seq_len
    if value is None:
        return top
    if value > top:
        raise InvalidInput(field, f"{value} tokens exceed the model's {top} positions (max_seq_len)")
    return value


class InferenceMemoryRequest(ServingRequest):
    context: sequence_length(1, 10_000_000) | None = Field(
        None, description="Tokens per sequence (prompt and output); null means the model's max_seq_len.")
    concurrency: count(1, 1 << 24) = Field(1, description="Sequences in flight over all replicas.")

    def asked_context(self, setup: Setup) -> int:
        return self.context or setup.cfg.max_seq_len


class TimedServingRequest(ServingRequest):
    """A deployment and how its passes are timed: the efficiencies, the links, the launches, a price."""

    flops_efficiency: number(ge=1e-6, le=1, text=False) | Literal["measured"] | None = Field(
        None, description='Share of the dense peak the largest matmuls reach; each GEMM then pays for whole '
                          "waves of tiles below it. null: the part's published Maximum Achievable Matmul FLOPS "
                          "(stas00/ml-engineering's table: 0.86 on an A100, 0.80 on an H100 in bfloat16, "
                          '0.73 in float8; data/matmul.toml). "measured": the best matmul of this server\'s '
                          "device at the compute dtype (GET /api/v1/calibration).")
    memory_efficiency: number(ge=1e-6, le=1, text=False) | Literal["measured"] = Field(
        DEFAULT_MEMORY_EFFICIENCY,
        description='Share of the memory bandwidth reads reach (0.9 stated, as above). "measured": this '
                    "device's bandwidth probe.")
    interconnect_bytes_per_sec: number(ge=1, le=1e15) | None = Field(
        None, description="Per-direction bandwidth between a replica's GPUs for the all-reduces; null is the "
                          "catalogue's (NVLink, or PCIe where there is none).")
    allreduce_latency_s: number(ge=0, le=1, text=False) | None = Field(
        None, description="Fixed time of each all-reduce. null: NCCL's LL ring, which its tuner picks for a "
                          "step's small messages: 6.6 us + 2 (tensor_parallel - 1) hops of 0.6 us over NVLink "
                          "(1.0 us over PCIe), from NCCL's src/graph/tuning.cc.")
    launch: kernels.Launch | None = Field(
        None, description="How the engine issues a pass's kernels: graph (a CUDA graph replayed), native "
                          "(fused kernels launched from C++, as TensorRT-LLM does), python (the same fused "
                          "kernels launched from Python) or eager (PyTorch op by op, unfused). null: the "
                          "engine's own (vllm, sglang, llama.cpp: graph; with cuda_graphs false vllm and sglang "
                          "python, llama.cpp native; transformers: eager).")
    price_per_gpu_hour: number(ge=0, le=1e6) | None = Field(
        None, description="Price of one GPU-hour in `currency`, for the cost per million tokens.")
    currency: Currency = "USD"
    calibration: CalibrationRef | None = Field(
        None, description=CALIBRATION_HELP + " Here: flops_efficiency and memory_efficiency left out become "
        "the profile's (its matmul ceiling at the compute dtype over the dense peak, its copy bandwidth over "
        "the catalogue's), and an eager or python launch costs the profile's measured seconds per op.")


class InferenceTimeRequest(TimedServingRequest):
    prompt_tokens: sequence_length(1, 10_000_000) = Field(512, description="Tokens in each prompt.")
    output_tokens: sequence_length(1, 10_000_000) = Field(128, description="Tokens generated per request.")
    concurrency: count(1, 1 << 24) = Field(
        1, description="Requests in flight over all replicas; each replica decodes its share in one batch.")
    batching: latency.Batching | None = Field(
        None, description="How prompts meet decode steps: continuous (chunked prefill: each decode step carries "
                          "its share of the prompts, as vLLM, SGLang and llama.cpp's server run) or static (a "
                          "batch prefills, then decodes alone: transformers' generate, TensorRT-LLM's and "
                          "FasterTransformer's benchmarks). null: the engine's.")

    def asked_context(self, setup: Setup) -> int:
        return self.prompt_tokens + self.output_tokens


def memory(body: InferenceMemoryRequest) -> capacity.InferenceMemory:
    setup = body.setup()
    context = _context(setup, body.context)
    answer = capacity.memory(setup, context=context, concurrency=body.concurrency)
    answer.advice = serving_advice.advice(body, setup, context, body.concurrency)
    return answer


def serving_capacity(body: InferenceMemoryRequest) -> capacity.ServingCapacity:
    setup = body.setup()
    context = _context(setup, body.context)
    answer = capacity.capacity(setup, context=context, concurrency=body.concurrency)
    answer.advice = serving_advice.advice(body, setup, context, body.concurrency)
    return answer


def reads_store(body: TimedServingRequest) -> bool:
    """Whether `serving_time` needs what is measured here (app/measured/here.py)."""
    return "measured" in (body.flops_efficiency, body.memory_efficiency)


def compute_dtype(weight_format: str, dtype: str, acc: hardware.Accelerator) -> str:
    """The peak a format's matmuls run at: fp8 and int8 weights with quantized activations
    (W8A8, as vLLM runs them) where the GPU has that peak, else the activations' dtype (the
    weights are dequantized on the fly, as Marlin kernels do)."""
    w8a8 = W8A8_PEAK.get(formats.FORMATS[weight_format].id)
    return w8a8 if w8a8 and dtypes.peak_key(w8a8) in acc.peak_flop_per_sec else dtype


class Timing(NamedTuple):
    """How a deployment's passes are timed: the device as the kernels see it, and where its figures came
    from."""

    on: latency.Device
    peak_dtype: str
    sources: tuple[str, str]
    calibrated: list[str]


def timing(body: TimedServingRequest, setup: Setup, here: Here | None, profile: Profile | None,
           batching: latency.Batching | None = None) -> Timing:
    """`here` (read when reads_store(body)) only for measured efficiencies; `profile`, the one
    `calibration` names (read by the caller: services.calibration.resolve)."""
    acc = body.accelerator()
    peak_dtype = compute_dtype(body.weight_format, body.dtype, acc)
    link = body.interconnect_bytes_per_sec or acc.interconnect_bytes_per_sec
    if setup.tensor_parallel > 1 and link is None:
        raise InvalidInput("interconnect_bytes_per_sec",
                           f"{acc.id} has no interconnect figure in the catalogue; give one for "
                           "tensor_parallel > 1")
    flops_eff, mem_eff = body.flops_efficiency, body.memory_efficiency
    sources = tuple("given" if name in body.model_fields_set else "default"
                    for name in ("flops_efficiency", "memory_efficiency"))
    if "measured" in (flops_eff, mem_eff):
        assert here is not None, "reads_store(body): the caller reads what is measured here"
        flops_eff, mem_eff, sources = _measured(body, here, peak_dtype, sources)
    gemms = matmul.device(acc, peak_dtype, field="weight_format")
    peak = hardware.peak_flop_per_sec(acc, peak_dtype)
    calibrated: list[str] = []
    host_per_op = kernels.EAGER_HOST_S_PER_OP
    if profile is not None:
        flops_eff, mem_eff, sources, host_per_op, calibrated = _calibrated(
            body, profile, acc, peak, peak_dtype, (flops_eff, mem_eff), sources)
    if flops_eff is None:
        flops_eff = gemms.mamf_flop_per_sec / peak
        sources = (f"default: {acc.id}'s Maximum Achievable Matmul FLOPS share (data/matmul.toml)", sources[1])
    hw = Hardware(peak_flop_per_sec=peak, bandwidth_bytes_per_sec=acc.memory_bandwidth_bytes_per_sec,
                  flops_efficiency=flops_eff, memory_efficiency=mem_eff, interconnect_bytes_per_sec=link,
                  allreduce_latency_s=_allreduce_latency(body, acc, setup.tensor_parallel))
    gemms = dataclasses.replace(gemms, mamf_flop_per_sec=peak * flops_eff,
                                memory_bandwidth_bytes_per_sec=acc.memory_bandwidth_bytes_per_sec * mem_eff)
    on = latency.Device(hw, gemms, body.launch or engines.launch(body.engine, body.cuda_graphs),
                        batching or engines.batching(body.engine), host_per_op)
    return Timing(on, peak_dtype, sources, calibrated)  # type: ignore[arg-type]


def serving_time(body: InferenceTimeRequest, here: Here | None = None,
                 profile: Profile | None = None) -> latency.InferenceTime:
    """`here` (read when reads_store(body)) only for measured efficiencies; `profile`, the one
    `calibration` names (read by the caller: services.calibration.resolve)."""
    setup = body.setup()
    _context(setup, body.prompt_tokens, "prompt_tokens")
    _context(setup, body.prompt_tokens + body.output_tokens, "output_tokens")
    on, peak_dtype, sources, calibrated = timing(body, setup, here, profile, body.batching)
    answer = latency.serving_time(setup, on, prompt=body.prompt_tokens, output=body.output_tokens,
                                  concurrency=body.concurrency, price_per_gpu_hour=body.price_per_gpu_hour,
                                  currency=body.currency, peak_dtype=peak_dtype, sources=sources)
    answer.advice = serving_advice.advice(body, setup, body.prompt_tokens + body.output_tokens, body.concurrency)
    answer.calibration = calibrated
    return answer


def _calibrated(body: TimedServingRequest, profile: Profile, acc: hardware.Accelerator, peak: float,
                peak_dtype: str, given: tuple[Any, Any], sources: tuple[str, ...],
                ) -> tuple[Any, Any, tuple[str, ...], float, list[str]]:
    """The efficiencies the request left out, and the host's seconds per op, from `profile`; with
    the lines saying which figure came from which jobs."""
    if profile.catalogue_id != acc.id:
        where = profile.catalogue_id or "a device outside the catalogue"
        raise InvalidInput("calibration", f"{profile.label} was measured on {where}, not {gpu_label(body.gpu)}")
    flops_eff, mem_eff = given
    said: list[str] = []
    if "flops_efficiency" not in body.model_fields_set:
        try:
            surf = surface.fit(list(profile.matmul), peak_dtype)
        except InvalidInput:
            said.append(f"{profile.label} has no {peak_dtype} matmul runs: the compute rate stays the default")
        else:
            flops_eff = min(1.0, surf.ceiling_flop_per_s / peak)
            jobs = sorted({j for s in profile.matmul if s.dtype == peak_dtype for j in s.jobs})
            sources = (f"calibrated: the fastest {peak_dtype} matmul of {profile.label} (matmul jobs "
                       f"{', '.join(map(str, jobs))})", sources[1])
    copy = profile.copy_bytes_per_s
    if "memory_efficiency" not in body.model_fields_set and copy is not None:
        mem_eff = min(1.0, copy.value / acc.memory_bandwidth_bytes_per_sec)
        sources = (sources[0], f"calibrated: the copy bandwidth of {profile.label} (bandwidth jobs "
                               f"{', '.join(map(str, copy.jobs))})")
    host = kernels.EAGER_HOST_S_PER_OP
    if profile.launch_eager_s is not None:
        host = profile.launch_eager_s.value
        said.append(f"an eager or python launch: {host * 1e6:.3g} us an op, {profile.label} (generate jobs "
                    f"{', '.join(map(str, profile.launch_eager_s.jobs))})")
    return flops_eff, mem_eff, sources, host, said + [*sources, *profile.flags]


def _allreduce_latency(body: TimedServingRequest, acc: hardware.Accelerator, tp: int) -> float:
    if body.allreduce_latency_s is not None:
        return body.allreduce_latency_s
    ic = acc.interconnect
    return collectives.small_all_reduce_seconds(tp, nvlink=bool(ic and ic.link == "nvlink"))


def _measured(body: TimedServingRequest, here: Here, peak_dtype: str,
              sources: tuple[str, ...]) -> tuple[float, float, tuple[str, ...]]:
    on = here.device
    if on.catalogue_id != body.gpu:
        field = "flops_efficiency" if body.flops_efficiency == "measured" else "memory_efficiency"
        raise InvalidInput(field, f"this server's device is {on.catalogue_id or on.name}, not "
                                  f"{gpu_label(body.gpu)}: measured efficiencies hold only where they were measured")
    cal = here.calibration
    flops_eff, mem_eff = body.flops_efficiency, body.memory_efficiency
    if flops_eff == "measured":
        key = dtypes.peak_key(peak_dtype)
        peak = next((p for d, p in cal.matmul.items() if dtypes.peak_key(d) == key and p.mfu), None)
        if peak is None:
            raise InvalidInput("flops_efficiency", f"no matmul probe has measured {key} on this device yet: "
                                                   'run one (POST /api/v1/jobs {"probe": "matmul"}), or give '
                                                   "a number")
        flops_eff = min(peak.mfu, 1.0)
        shape = f"{peak.m}x{peak.k}x{peak.n}"
        sources = (f"measured: matmul job {peak.job_id} ({peak.dtype}, {shape})", sources[1])
    if mem_eff == "measured":
        bw = cal.bandwidth
        if bw is None or bw.fraction_of_catalogue is None:
            raise InvalidInput("memory_efficiency", "no bandwidth probe has run on this device yet: run "
                                                    'one (POST /api/v1/jobs {"probe": "bandwidth"}), or give '
                                                    "a number")
        mem_eff = min(bw.fraction_of_catalogue, 1.0)
        sources = (sources[0], f"measured: bandwidth job {bw.job_id}")
    return flops_eff, mem_eff, sources
