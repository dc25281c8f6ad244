"""The calculator pages: each is a form over one request model and its service function
(app/api/services), a result fragment and, where a chart needs more than one answer,
further calls to the same functions. Choice lists come from the request models' types."""

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal, Union

from annotated_types import Ge, Le
from pydantic import BaseModel

from app.accounting import dtypes as formats
from app.api.responses import jsonable
from app.api.services import dtypes, flops, memory, tensors, time
from app.jobs.store import Store
from app.web import forms

Compute = Callable[[Any, Store], Any]
"""(validated request, job store) -> the engine's result; only a measured MFU reads the store."""


@dataclass(frozen=True)
class Input:
    name: str
    label: str
    default: str
    hint: str = ""
    choices: tuple[str, ...] = ()
    """Filled from the request model's type: its Literal values, true/false, or a small int range."""
    is_list: bool = False
    """Comma-separated integers, sent as a JSON list."""
    typed: bool = False
    """A text box even where the type lists values beside a number (mfu: 0.5 or "measured")."""


def _members(hint: Any) -> list[Any]:
    """The types a hint admits, through Annotated and unions."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _members(typing.get_args(hint)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in typing.get_args(hint) for m in _members(arg)]
    return [hint]


def _offered(value: Any) -> bool:
    """A format's alias (bf16, fp32) is not offered beside its name."""
    if not isinstance(value, str) or value not in formats.accepted_names():
        return True
    return formats.lookup(value).name == value


def choices(model: type[BaseModel], name: str) -> tuple[str, ...]:
    info = model.model_fields[name]
    members = _members(info.annotation)
    values = [v for m in members if typing.get_origin(m) is Literal for v in typing.get_args(m)]
    if values:
        return tuple(str(v) for v in values if _offered(v))
    if members == [bool]:
        return ("false", "true")
    lo = next((m.ge for m in info.metadata if isinstance(m, Ge)), None)
    hi = next((m.le for m in info.metadata if isinstance(m, Le)), None)
    if members == [int] and lo is not None and hi is not None and hi - lo < 8:
        return tuple(str(v) for v in range(lo, hi + 1))
    return ()


Charts = Callable[[Any, dict, Store], dict]
"""(validated request, the answer as the API's JSON, job store) -> chart specs."""


@dataclass(frozen=True)
class Calculator:
    slug: str
    title: str
    lead: str
    request: type[BaseModel]
    compute_with: Compute
    inputs: tuple[Input, ...]
    charts: Charts | None = None

    def __post_init__(self) -> None:
        filled = tuple(i if i.choices or i.typed else replace(i, choices=choices(self.request, i.name))
                       for i in self.inputs)
        object.__setattr__(self, "inputs", filled)

    def form(self, query: dict[str, str], *, defaults: bool) -> dict[str, str]:
        given = {i.name: query[i.name] for i in self.inputs if i.name in query}
        return ({i.name: i.default for i in self.inputs} if defaults else {}) | given

    def compute(self, jobs: Store, form: dict[str, str]) -> dict[str, Any]:
        """The fragment's context. Blocking (a measured MFU reads the database): run it off the loop."""
        payload = forms.body(form, [i.name for i in self.inputs],
                             lists={i.name for i in self.inputs if i.is_list})
        outcome, refused = forms.run(self.request, payload,
                                     lambda body: (body, self.compute_with(body, jobs)))
        if refused is not None:
            return {"errors": forms.field_errors(refused), "message": refused["message"]}
        body, result = outcome
        answer = jsonable(result)
        charts = self.charts(body, answer, jobs) if self.charts else {}
        return {"answer": answer, "errors": {}, "charts": charts}


def _pure(service: Callable[[Any], Any]) -> Compute:
    return lambda body, jobs: service(body)


def _answer(model: type[BaseModel], payload: dict, service: Callable[[Any], Any]) -> dict:
    """A further answer for a chart: the result as JSON, or the refusal's error body."""
    result, refused = forms.run(model, payload, service)
    return refused if refused is not None else jsonable(result)


GPU_SWEEP = (8, 64, 256, 1024, 4096, 16384)


def _time_charts(body: time.TrainingTimeRequest, answer: dict, jobs: Store) -> dict:
    points = [{"x": gpus, "y": time.training(body.model_copy(update={"num_gpus": gpus}), store=jobs).days}
              for gpus in GPU_SWEEP]
    return {"days": {"type": "days_vs_gpus", "points": points,
                     "current": {"x": answer["num_gpus"], "y": answer["days"]}}}


STACK = ("parameters", "gradients", "optimizer_state", "master_weights", "weight_copies", "activations",
         "transient")


def _memory_charts(body: memory.TrainingMemoryRequest, answer: dict, jobs: Store) -> dict:
    """Per-GPU bytes under each ZeRO stage, stacked by kind, against the GPU's capacity;
    and the largest model that fits on these GPUs."""
    bars = []
    for stage in range(4):
        a = jsonable(memory.training(body.model_copy(update={"zero_stage": stage})))
        bars.append({"label": f"ZeRO {stage}", **{k: (a.get(k) or 0) / 1e9 for k in STACK}})
    gpu = body.gpu or "h100-sxm"
    biggest = _answer(memory.MaxModelRequest, {
        "gpu": gpu, "num_gpus": body.num_gpus, "precision": body.precision, "optimizer": body.optimizer,
        "zero_stage": body.zero_stage}, memory.max_model)
    capacity = None if answer["gpu_memory_bytes"] is None else answer["gpu_memory_bytes"] / 1e9
    return {"stack": {"type": "memory_stack", "bars": bars, "kinds": list(STACK), "capacity_gb": capacity,
                      "gpu": gpu}, "max_model": biggest}


PARTS = ("attention_qkv", "attention_scores", "attention_values", "attention_output", "mlp", "lm_head")


def _flops_charts(body: flops.TransformerRequest, answer: dict, jobs: Store) -> dict:
    return {"parts": {"type": "flops_parts", "labels": [p.replace("_", " ") for p in PARTS],
                      "forward": [answer["forward"][p] for p in PARTS],
                      "backward": [answer["backward"][p] for p in PARTS]}}


def _mlp_charts(body: flops.MlpRequest, answer: dict, jobs: Store) -> dict:
    layers = answer["layers"]
    return {"parts": {"type": "flops_parts", "labels": [f"W{i + 1} ({x['d_in']}×{x['d_out']})"
                                                         for i, x in enumerate(layers)],
                      "forward": [x["forward"] for x in layers], "backward": [x["backward"] for x in layers]}}


CALCULATORS = {c.slug: c for c in (
    Calculator(
        "tensors", "Tensor layout",
        "Where each element of a strided tensor lives in storage, whether the tensor is contiguous, "
        "and whether view() can reshape it without a copy, by PyTorch's own rule. The example is a "
        "transposed 2 x 3 matrix: x.t() has shape (3, 2) and strides (1, 3).",
        tensors.LayoutRequest, _pure(tensors.layout),
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
        dtypes.EncodeRequest, _pure(dtypes.encode_value),
        (Input("value", "Value", "0.15625", "any decimal, e.g. 1e-8 or 65520"),
         Input("dtype", "Format", "float16"))),
    Calculator(
        "time", "Training time",
        "Days, GPU-hours and cost of a run: 6 × parameters × tokens FLOPs at a share (MFU) of the "
        "GPUs' dense peak. The course's example is filled in: 70B parameters on 15T tokens.",
        time.TrainingTimeRequest, lambda body, jobs: time.training(body, store=jobs),
        (Input("params", "Parameters", "70e9", "N, e.g. 70e9"),
         Input("tokens", "Training tokens", "15e12", "D, e.g. 15e12"),
         Input("gpu", "GPU", "h100-sxm"),
         Input("dtype", "Precision", "bfloat16"),
         Input("num_gpus", "GPUs", "1024"),
         Input("mfu", "MFU", "0.5", '0 to 1, or "measured"', typed=True),
         Input("price_per_gpu_hour", "Price per GPU-hour", "", "optional, for the cost")),
        _time_charts),
    Calculator(
        "memory", "Training memory",
        "Bytes on each GPU: parameters, gradients, optimizer state, master weights and activations, "
        "under ZeRO, tensor and pipeline parallelism; and the largest model these GPUs hold.",
        memory.TrainingMemoryRequest, _pure(memory.training),
        (Input("model", "Model", "llama2-7b"),
         Input("precision", "Precision", "bf16_mixed"),
         Input("optimizer", "Optimizer", "adamw"),
         Input("batch_size", "Micro-batch", "1", "sequences per data-parallel rank"),
         Input("seq_len", "Sequence length", "4096"),
         Input("recompute", "Recompute", "selective"),
         Input("zero_stage", "ZeRO stage", "1"),
         Input("data_parallel", "Data-parallel ranks", "8"),
         Input("tensor_parallel", "Tensor-parallel ranks", "1"),
         Input("pipeline_parallel", "Pipeline stages", "1"),
         Input("gpu", "GPU", "h100-sxm")),
        _memory_charts),
    Calculator(
        "matmul", "Matmul FLOPs",
        "(m × k) @ (k × n): 2·m·k·n FLOPs, one multiply and one add per multiply-accumulate; with a "
        "dtype, the bytes a kernel must move at least and the arithmetic intensity a roofline needs.",
        flops.MatmulRequest, _pure(flops.matmul),
        (Input("m", "m", "1024"), Input("k", "k", "256"), Input("n", "n", "64"),
         Input("batch", "Batch", "1", "independent matmuls"),
         Input("dtype", "dtype", "bfloat16"))),
    Calculator(
        "mlp", "Linear stack FLOPs",
        "The course's stack of bias-free linear layers: forward 2·B·D·K per layer, backward twice that "
        "(the first layer skips dL/dx unless its input needs a gradient), beside 6 × tokens × params.",
        flops.MlpRequest, _pure(flops.mlp),
        (Input("batch", "Batch", "1024", "rows of x (tokens)"),
         Input("dims", "Widths", "256, 256, 64", "D0, D1, ..., Dn", is_list=True),
         Input("input_requires_grad", "Input needs a gradient", "false")),
        _mlp_charts),
    Calculator(
        "flops", "Transformer FLOPs",
        "Exact matmul FLOPs of one training step (forward, and backward at twice the forward), "
        "by component, beside the 6 × N × D rule. One multiply-add is 2 FLOPs.",
        flops.TransformerRequest, _pure(flops.transformer),
        (Input("model", "Model", "gpt2"),
         Input("batch_size", "Batch", "8", "sequences"),
         Input("seq_len", "Sequence length", "1024"),
         Input("causal", "Attention count", "full", "full: every score, as FlopCounterMode; halved: "
               "the causal triangle")),
        _flops_charts),
)}
