"""The Inference page: one form, three answers. POST /api/v1/inference/time's request with the
memory request's `context` beside it; the page asks the time, memory and capacity services
(app/api/services/inference.py) with the fields each route takes, so every figure is the one
the API gives for the same body, and every refusal names the field the API names."""

from dataclasses import dataclass

from pydantic import Field

from app import numbers
from app.accounting.inference.capacity import InferenceMemory, ServingCapacity
from app.accounting.inference.latency import InferenceTime
from app.accounting.records import RECORD
from app.api.compute import Narrow
from app.api.services import inference as service
from app.api.services.inference import InferenceMemoryRequest, InferenceTimeRequest
from app.inputs.schemas import gpu_label
from app.jobs.store import Store
from app.measured.here import read_if
from app.web.spec import Calculator, Input


class InferencePageRequest(InferenceTimeRequest):
    """The page's form: the time request and the memory request's `context` (the time request
    covers every other memory field)."""

    context: InferenceMemoryRequest.model_fields["context"].annotation = Field(  # type: ignore[name-defined]
        None, description="Tokens per sequence for memory and capacity; null is prompt + output.")


@dataclass(slots=True)
class InferenceAnswer:
    """The three routes' answers to one form."""

    time: InferenceTime
    """POST /api/v1/inference/time."""
    memory: InferenceMemory
    """POST /api/v1/inference/memory, at `context` (prompt + output when the form leaves it out)."""
    capacity: ServingCapacity
    """POST /api/v1/inference/capacity, at the same context."""

    __pydantic_config__ = RECORD


def _fields(body: InferencePageRequest, route: type[InferenceTimeRequest | InferenceMemoryRequest]) -> dict:
    """The fields the form set that `route` takes, as JSON: the body a client of that route
    would send, so its answer says the same defaults applied."""
    sent = body.model_dump(mode="json", exclude_unset=True)
    return {k: v for k, v in sent.items() if k in route.model_fields}


def serve(body: InferencePageRequest, jobs: Store) -> InferenceAnswer:
    """Time first: a prompt or output past the model's positions is refused naming its own
    field, before the memory request (whose context defaults to their sum) could name context."""
    asked = InferenceTimeRequest.model_validate(_fields(body, InferenceTimeRequest))
    time = service.serving_time(asked, read_if(service.reads_store(asked), jobs))
    context = body.context or body.prompt_tokens + body.output_tokens
    fields = _fields(body, InferenceMemoryRequest) | {"context": context}
    asked = InferenceMemoryRequest.model_validate(fields)
    return InferenceAnswer(time=time, memory=service.memory(asked), capacity=service.serving_capacity(asked))


KINDS = ("weights", "kv_cache", "workspace", "overhead")
"""The stack of InferenceMemory's by_concurrency, bottom up: MemoryPoint's <kind>_bytes."""
LABELS = {"kv_cache": "KV cache", "workspace": "activations", "overhead": "outside torch"}
"""What the chart's legend calls them: the engine's activation peak and its memory outside torch."""


def _memory_stack(body: InferencePageRequest, memory: dict) -> dict:
    """GB per GPU by kind as concurrency doubles (the answer's by_concurrency), with this
    request's own point where it is no power of two, against the usable memory."""
    points = list(memory["by_concurrency"])
    if memory["concurrency"] not in {p["concurrency"] for p in points}:
        points = sorted([*points, memory], key=lambda p: p["concurrency"])
    bars = [{"label": f"{p['concurrency']:,}", "total": p["total_bytes"] / 1e9,
             **{k: p[f"{k}_bytes"] / 1e9 for k in KINDS}} for p in points]
    current = [p["concurrency"] for p in points].index(memory["concurrency"])
    usable = numbers.gb(memory["usable_bytes"])
    return {"type": "memory_stack", "bars": bars, "kinds": list(KINDS), "labels": LABELS,
            "capacity_gb": memory["usable_bytes"] / 1e9, "capacity_label": f"usable: {usable}",
            "gpu": gpu_label(body.gpu), "current": current,
            "x": "sequences in flight (concurrency, all replicas)"}


def _decode_curve(time: dict, capacity: dict) -> dict:
    """Decode tokens/s of one replica against its batch (the answer's decode_curve, kernel by
    kernel), the roofline's beside it (the gap between them is the overhead: waves, kernel floors,
    host launches), with the compute-bound batch, the most sequences that fit, and this request's
    batch marked."""
    per_replica = time["sequences_per_replica"]
    most = capacity["max_sequences"] // capacity["replicas"]
    points = [{"x": p["batch"], "y": p["tokens_per_sec"], "bound": p["bound"]} for p in time["decode_curve"]]
    roofline = [{"x": p["batch"], "y": p["batch"] / p["roofline_seconds"]} for p in time["decode_curve"]]
    return {"type": "decode_curve", "points": points, "roofline": roofline, "launch": time["launch"],
            "knee": time["compute_bound_batch"], "most": most or None,
            "current": {"x": per_replica, "y": time["output_tokens_per_sec"] / time["replicas"]}}


def _charts(body: InferencePageRequest, answer: dict, jobs: Store) -> dict:
    return {"stack": _memory_stack(body, answer["memory"]),
            "decode": _decode_curve(answer["time"], answer["capacity"])}


PAGE = Calculator(
    "inference", "Inference",
    "Serving a model: bytes per GPU as the engine (vLLM, SGLang, llama.cpp, transformers) budgets them "
    "(weights in their format, the KV cache, the engine's activation peak and what it keeps outside "
    "torch) against its share of the GPU, how many users fit, and time to "
    "first token, inter-token latency, tokens/s and cost per million tokens on the roofline. The "
    "answers of POST /api/v1/inference/memory, /capacity and /time for one set of inputs.",
    InferencePageRequest, serve,
    (Input("model", "Model", "llama3.1-8b"),
     Input("weight_format", "Weight format", hint="bits per weight: GET /api/v1/quantization"),
     Input("cache_dtype", "KV cache dtype", hint="auto: the model's dtype"),
     Input("gpu", "GPU", "h100-sxm"),
     Input("num_gpus", "GPUs"),
     Input("tensor_parallel", "Tensor-parallel ranks", hint="GPUs per replica; replicas = GPUs / this"),
     Input("engine", "Engine", hint="whose memory conventions: vllm serve, SGLang, llama.cpp, transformers"),
     Input("context", "Context", hint="tokens per sequence for memory; empty: prompt + output"),
     Input("concurrency", "Concurrency", hint="sequences in flight, all replicas"),
     Input("prompt_tokens", "Prompt tokens"),
     Input("output_tokens", "Output tokens"),
     Input("price_per_gpu_hour", "Price per GPU-hour", hint="optional, for the cost per million tokens"),
     Input("currency", "Currency", hint="ISO 4217 code of the price: USD, EUR, ..."),
     Input("dtype", "Activation dtype", hint="and the weights a format leaves unquantized", more=True),
     Input("group_size", "Group size", hint="weights per scale (GPTQ, AWQ); -1: one group per column",
           more=True),
     Input("unquantized", "Kept unquantized", hint="components, comma-separated; empty: the format's rule",
           is_list=True, more=True),
     Input("mla_cache", "Latent attention cache", hint="latent models only", more=True),
     Input("block_size", "KV block", hint="vLLM: tokens per paged block", more=True),
     Input("gpu_memory_utilization", "GPU memory utilization", hint="vLLM: its share of the total; empty: 0.9",
           more=True),
     Input("mem_fraction_static", "mem_fraction_static", hint="SGLang: its share of the free memory; empty: its "
                                                              "default", more=True),
     Input("max_num_batched_tokens", "Batched tokens", hint="the largest forward (SGLang's chunked prefill, "
                                                            "llama.cpp's n_ubatch); empty: the engine's", more=True),
     Input("max_num_seqs", "Sequences per step", hint="vLLM's sampler rows; empty: the engine's", more=True),
     Input("cuda_graphs", "CUDA graphs", hint="false: vLLM's enforce_eager", more=True),
     Input("free_memory_bytes", "Free memory at start", hint="per GPU, if another process holds some", more=True),
     Input("overhead_bytes", "Outside torch", hint="vLLM: NCCL, cuBLAS (\"2GiB\"); empty: modelled", more=True),
     Input("flops_efficiency", "FLOPs efficiency", hint='0 to 1, or "measured"; empty: the GPU\'s MAMF share',
           typed=True, more=True),
     Input("memory_efficiency", "Memory efficiency", hint='0 to 1, or "measured"', typed=True, more=True),
     Input("interconnect_bytes_per_sec", "Interconnect bytes/s", hint="per direction; empty: the catalogue's",
           more=True),
     Input("launch", "Kernel launch", hint="graph, native (C++), python or eager; empty: the engine's", more=True),
     Input("batching", "Batching", hint="continuous (chunked prefill) or static; empty: the engine's", more=True),
     Input("allreduce_latency_s", "All-reduce latency (s)", hint="empty: NCCL's LL ring", more=True)),
    _charts, takes_model="model",
    heavy=Narrow("model", "a smaller model (fewer layers), or fewer prompt tokens and output tokens"))
