"""The calculator pages: each is a form over one API route, a result fragment and,
where a chart needs more than one answer, further calls to the same API."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from app.accounting import hardware, memory, models
from app.web import bridge


@dataclass(frozen=True)
class Input:
    name: str
    label: str
    default: str
    hint: str = ""
    choices: tuple[str, ...] = ()
    is_list: bool = False
    """Comma-separated integers, sent as a JSON list."""


@dataclass(frozen=True)
class Calculator:
    slug: str
    title: str
    lead: str
    api: str
    inputs: tuple[Input, ...]
    charts: Callable[[Request, dict, dict], Awaitable[dict]] | None = None

    def form(self, query: dict[str, str], *, defaults: bool) -> dict[str, str]:
        given = {i.name: query[i.name] for i in self.inputs if i.name in query}
        return ({i.name: i.default for i in self.inputs} if defaults else {}) | given

    async def compute(self, request: Request, form: dict[str, str]) -> dict[str, Any]:
        payload = bridge.body(form, [i.name for i in self.inputs],
                              lists={i.name for i in self.inputs if i.is_list})
        status, answer = await bridge.call(request, self.api, payload)
        if status != 200:
            return {"errors": bridge.field_errors(answer), "message": answer.get("message", "")}
        charts = await self.charts(request, payload, answer) if self.charts else {}
        return {"answer": answer, "errors": {}, "charts": charts}


GPU_SWEEP = (8, 64, 256, 1024, 4096, 16384)


async def _time_charts(request: Request, payload: dict, answer: dict) -> dict:
    points = []
    for gpus in GPU_SWEEP:
        _, point = await bridge.call(request, "/api/v1/time/training", payload | {"num_gpus": gpus})
        points.append({"x": gpus, "y": point["days"]})
    return {"days": {"type": "days_vs_gpus", "points": points,
                     "current": {"x": answer["num_gpus"], "y": answer["days"]}}}


STACK = ("parameters", "gradients", "optimizer_state", "master_weights", "weight_copies", "activations",
         "transient")


async def _memory_charts(request: Request, payload: dict, answer: dict) -> dict:
    """Per-GPU bytes under each ZeRO stage, stacked by kind, against the GPU's capacity;
    and the largest model that fits on these GPUs."""
    bars = []
    for stage in range(4):
        _, a = await bridge.call(request, "/api/v1/memory/training", payload | {"zero_stage": stage})
        bars.append({"label": f"ZeRO {stage}", **{k: (a.get(k) or 0) / 1e9 for k in STACK}})
    gpu = payload.get("gpu", "h100-sxm")
    gpus = 1
    for ranks in ("data_parallel", "tensor_parallel", "pipeline_parallel"):
        gpus *= payload.get(ranks, 1)
    _, biggest = await bridge.call(request, "/api/v1/memory/max-model", {
        "gpu": gpu, "num_gpus": gpus, "precision": payload.get("precision", "bf16_mixed"),
        "optimizer": payload.get("optimizer", "adamw"), "zero_stage": payload.get("zero_stage", 3)})
    capacity = None if answer["gpu_memory_bytes"] is None else answer["gpu_memory_bytes"] / 1e9
    return {"stack": {"type": "memory_stack", "bars": bars, "kinds": list(STACK), "capacity_gb": capacity,
                      "gpu": gpu}, "max_model": biggest}


PARTS = ("attention_qkv", "attention_scores", "attention_values", "attention_output", "mlp", "lm_head")


async def _flops_charts(request: Request, payload: dict, answer: dict) -> dict:
    return {"parts": {"type": "flops_parts", "labels": [p.replace("_", " ") for p in PARTS],
                      "forward": [answer["forward"][p] for p in PARTS],
                      "backward": [answer["backward"][p] for p in PARTS]}}


DTYPES = ("float32", "float16", "bfloat16", "tfloat32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
          "float8_e5m2fnuz", "float4_e2m1fn", "float64")
async def _mlp_charts(request: Request, payload: dict, answer: dict) -> dict:
    layers = answer["layers"]
    return {"parts": {"type": "flops_parts", "labels": [f"W{i + 1} ({x['d_in']}×{x['d_out']})"
                                                         for i, x in enumerate(layers)],
                      "forward": [x["forward"] for x in layers], "backward": [x["backward"] for x in layers]}}


PRESETS = tuple(models.presets())
GPUS = tuple(sorted(hardware.catalogue()))
CALCULATORS = {c.slug: c for c in (
    Calculator(
        "tensors", "Tensor layout",
        "Where each element of a strided tensor lives in storage, whether the tensor is contiguous, "
        "and whether view() can reshape it without a copy, by PyTorch's own rule. The example is a "
        "transposed 2 x 3 matrix: x.t() has shape (3, 2) and strides (1, 3).",
        "/api/v1/tensors/layout",
        (Input("shape", "Shape", "3, 2", "comma-separated sizes", is_list=True),
         Input("stride", "Strides", "1, 3", "elements per step; empty for contiguous", is_list=True),
         Input("storage_offset", "Storage offset", "0"),
         Input("index", "Element", "2, 1", "an index to locate in storage", is_list=True),
         Input("view_shape", "View as", "2, 3", "a shape for view(); one entry may be -1", is_list=True))),
    Calculator(
        "formats", "Number formats",
        "How a value is stored: sign, exponent and mantissa bits, the value it becomes, and whether it "
        "underflows to zero or overflows. Try the course's 0.15625 (exact in every float) and 1e-8 (zero "
        "in float16, kept by bfloat16).",
        "/api/v1/dtypes/encode",
        (Input("value", "Value", "0.15625", "any decimal, e.g. 1e-8 or 65520"),
         Input("dtype", "Format", "float16", choices=DTYPES))),
    Calculator(
        "time", "Training time",
        "Days, GPU-hours and cost of a run: 6 × parameters × tokens FLOPs at a share (MFU) of the "
        "GPUs' dense peak. The course's example is filled in: 70B parameters on 15T tokens.",
        "/api/v1/time/training",
        (Input("params", "Parameters", "70e9", "N, e.g. 70e9"),
         Input("tokens", "Training tokens", "15e12", "D, e.g. 15e12"),
         Input("gpu", "GPU", "h100-sxm", choices=GPUS),
         Input("dtype", "Precision", "bfloat16",
               choices=("bfloat16", "float16", "float8_e4m3fn", "tfloat32", "float32")),
         Input("num_gpus", "GPUs", "1024"),
         Input("mfu", "MFU", "0.5", '0 to 1, or "measured"'),
         Input("price_per_gpu_hour", "Price per GPU-hour", "", "optional, for the cost")),
        _time_charts),
    Calculator(
        "memory", "Training memory",
        "Bytes on each GPU: parameters, gradients, optimizer state, master weights and activations, "
        "under ZeRO, tensor and pipeline parallelism; and the largest model these GPUs hold.",
        "/api/v1/memory/training",
        (Input("model", "Model", "llama2-7b", choices=PRESETS),
         Input("precision", "Precision", "bf16_mixed", choices=memory.Precision.__args__),
         Input("optimizer", "Optimizer", "adamw", choices=memory.Optimizer.__args__),
         Input("batch_size", "Micro-batch", "1", "sequences per data-parallel rank"),
         Input("seq_len", "Sequence length", "4096"),
         Input("recompute", "Recompute", "selective", choices=("none", "selective", "full")),
         Input("zero_stage", "ZeRO stage", "1", choices=("0", "1", "2", "3")),
         Input("data_parallel", "Data-parallel ranks", "8"),
         Input("tensor_parallel", "Tensor-parallel ranks", "1"),
         Input("pipeline_parallel", "Pipeline stages", "1"),
         Input("gpu", "GPU", "h100-sxm", choices=GPUS)),
        _memory_charts),
    Calculator(
        "matmul", "Matmul FLOPs",
        "(m × k) @ (k × n): 2·m·k·n FLOPs, one multiply and one add per multiply-accumulate; with a "
        "dtype, the bytes a kernel must move at least and the arithmetic intensity a roofline needs.",
        "/api/v1/flops/matmul",
        (Input("m", "m", "1024"), Input("k", "k", "256"), Input("n", "n", "64"),
         Input("batch", "Batch", "1", "independent matmuls"),
         Input("dtype", "dtype", "bfloat16", choices=DTYPES))),
    Calculator(
        "mlp", "Linear stack FLOPs",
        "The course's stack of bias-free linear layers: forward 2·B·D·K per layer, backward twice that "
        "(the first layer skips dL/dx unless its input needs a gradient), beside 6 × tokens × params.",
        "/api/v1/flops/mlp",
        (Input("batch", "Batch", "1024", "rows of x (tokens)"),
         Input("dims", "Widths", "256, 256, 64", "D0, D1, ..., Dn", is_list=True),
         Input("input_requires_grad", "Input needs a gradient", "false", choices=("false", "true"))),
        _mlp_charts),
    Calculator(
        "flops", "Transformer FLOPs",
        "Exact matmul FLOPs of one training step (forward, and backward at twice the forward), "
        "by component, beside the 6 × N × D rule. One multiply-add is 2 FLOPs.",
        "/api/v1/flops/transformer",
        (Input("model", "Model", "gpt2", choices=PRESETS),
         Input("batch_size", "Batch", "8", "sequences"),
         Input("seq_len", "Sequence length", "1024"),
         Input("causal", "Attention count", "full", "full: every score, as FlopCounterMode; halved: "
               "the causal triangle", choices=("full", "halved"))),
        _flops_charts),
)}
