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
from app.accounting import models
from app.accounting.errors import InvalidInput
from app.accounting.models import count_params
from app.api.responses import defaults_applied, jsonable
from app.api.services import dtypes, flops, memory, tensors, time
from app.contract.schemas import TransformerConfigIn, engine_model
from app.jobs.store import Store
from app.web import forms, numbers, picker

Compute = Callable[[Any, Store], Any]
"""(validated request, job store) -> the engine's result; only a measured MFU reads the store."""


@dataclass(frozen=True)
class Input:
    name: str
    label: str
    default: str | None = None
    """None: the request model's own default (the one source: a page never opens on a value
    the API would not use). Given only where the model has none: a required field's example
    (params, m), or an optional field's (stride, gpu), which the API computes without."""
    hint: str = ""
    choices: tuple[str, ...] = ()
    """Filled from the request model's type: its Literal values, true/false, or a small int range;
    led by "" (none) where the field is optional."""
    is_list: bool = False
    """Comma-separated integers, sent as a JSON list."""
    typed: bool = False
    """A text box even where the type lists values beside a number (mfu: 0.5 or "measured")."""
    text: bool = False
    """Sent as a JSON string, never as a number: the model reads a string exactly (value: "0.1")."""


def _text(value: Any) -> str:
    """A model default as a form field holds it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    return str(value)


def _with_default(model: type[BaseModel], field: Input) -> Input:
    info = model.model_fields[field.name]
    own = None if info.is_required() else info.default
    if own is not None:
        if field.default is not None:
            raise ValueError(f"{model.__name__}.{field.name} has a default ({own!r}): the page takes it")
        return replace(field, default=_text(own))
    if field.default is None and info.is_required():
        raise ValueError(f"{model.__name__}.{field.name} is required: give the page an example")
    return field if field.default is not None else replace(field, default="")


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
    takes_model: Literal["model", "params"] | None = None
    """The page's model picker (app/web/picker.py), with its box for a pasted config. "model":
    the input named model is the picker, sent as the request's `model` (a preset name, or the
    config inline). "params": the request takes a parameter count, and the picker (a field of
    the page only, "" for none) sends the picked model's active parameters as `params`."""

    def __post_init__(self) -> None:
        filled = []
        for i in self.inputs:
            i = _with_default(self.request, i)
            if not (i.choices or i.typed):
                listed = choices(self.request, i.name)
                optional = listed and self.request.model_fields[i.name].default is None \
                    and not self.request.model_fields[i.name].is_required()
                i = replace(i, choices=("", *listed) if optional else listed)
            filled.append(i)
        object.__setattr__(self, "inputs", tuple(filled))

    @property
    def names(self) -> set[str]:
        return {i.name for i in self.inputs} | set(self.page_fields)

    @property
    def page_fields(self) -> tuple[str, ...]:
        """Fields of the page that are no field of the request: the pasted config, and the
        picker itself where the request takes a parameter count."""
        return {"model": (picker.CONFIG,), "params": ("model", picker.CONFIG), None: ()}[self.takes_model]

    def form(self, query: dict[str, str], *, defaults: bool) -> dict[str, str]:
        names = [i.name for i in self.inputs] + list(self.page_fields)
        given = {name: query[name] for name in names if name in query}
        if self.takes_model and query.get(picker.CONFIG, "").strip() and "model" not in query:
            given["model"] = picker.CUSTOM  # /flops?config=...: a shared config needs no more
        base = {i.name: i.default for i in self.inputs} | {name: "" for name in self.page_fields}
        return (base if defaults else {}) | given

    def compute(self, jobs: Store, form: dict[str, str]) -> dict[str, Any]:
        """The fragment's context. Blocking (a measured MFU reads the database): run it off the loop."""
        payload = forms.body(form, [i.name for i in self.inputs],
                             lists={i.name for i in self.inputs if i.is_list},
                             texts={i.name for i in self.inputs if i.text})
        picked = None
        if self.takes_model:
            picked = picker.pick(form.get("model", ""), form.get(picker.CONFIG, ""))
            refused = picked.refused or self._send_model(picked, payload)
            if refused is not None:
                return self._refusal(refused, form, all_config=True)
        outcome, refused = forms.run(self.request, payload,
                                     lambda body: (body, self.compute_with(body, jobs)))
        if refused is not None:
            return self._refusal(refused, form)
        body, result = outcome
        # Fields the page has no input for, or left empty, and what the answer took for them.
        answer = jsonable(result) | {"defaults_applied": defaults_applied(body)}
        charts = self.charts(body, answer, jobs) if self.charts else {}
        return {"answer": answer, "errors": {}, "charts": charts, "picked": picked}

    def _send_model(self, picked: picker.Picked, payload: dict[str, Any]) -> dict | None:
        """Put the picked model into the request body: as `model`, or as its active parameters
        (`params`: 6 x N x D reads N as the FLOPs page's 6ND does). The refusal of a model that
        does not count, else None."""
        if picked.model is None:
            return None
        if self.takes_model == "model":
            payload["model"] = picked.model
            return None
        if isinstance(picked.model, str):
            cfg, refused = forms.run(picker.NAME, picked.model, models.preset)
        else:
            cfg, refused = forms.run(TransformerConfigIn, picked.model, lambda c: c.to_engine())
        if refused is None:
            picked.params = payload["params"] = count_params(cfg).active
        return refused

    def _refusal(self, refused: dict, form: dict[str, str], all_config: bool = False) -> dict[str, Any]:
        """The context of a refused form: each message beside its input, and those of fields
        the page has no input for above the result (a refusal never leaves a blank result).
        A pasted config's messages (all of the import's, or the request's model.*) go beside
        its box, each naming its key."""
        detail, config = refused["detail"], []
        if form.get("model") == picker.CUSTOM:
            config = detail if all_config else [i for i in detail if i["field"].split(".")[0] == "model"]
            detail = [i for i in detail if i not in config]
        errors = forms.field_errors({"detail": detail})
        if config:
            errors[picker.CONFIG] = picker.config_errors(config)
        unplaced = [f"{i['field']}: {i['msg']}" for i in detail if i["field"].split(".")[0] not in self.names]
        return {"errors": errors, "message": refused["message"], "unplaced": unplaced,
                "launch": refused.get("launch")}


def _pure(service: Callable[[Any], Any]) -> Compute:
    return lambda body, jobs: service(body)


def _answer(model: type[BaseModel], payload: dict, service: Callable[[Any], Any]) -> dict:
    """A further answer for a chart: the result as JSON, or the refusal's error body."""
    result, refused = forms.run(model, payload, service)
    return refused if refused is not None else jsonable(result)


def _powers_of_two(centre: int, span: int, lo: int, hi: int) -> list[int]:
    """Powers of 2 from centre/span to centre*span, within [lo, hi], and centre itself."""
    first, last = max(lo, centre // span), min(hi, centre * span)
    points, p = {centre}, 1
    while p <= last:
        if p >= first:
            points.add(p)
        p *= 2
    return sorted(points)


def _time_charts(body: time.TrainingTimeRequest, answer: dict, jobs: Store) -> dict:
    """Days against the number of GPUs, 1/16 to 16 times this run's (a range centred on it,
    in powers of 2), at this MFU; the run itself is marked."""
    gpus = _powers_of_two(body.num_gpus, 16, 1, 10_000_000)
    points = [{"x": g, "y": time.training(body.model_copy(update={"num_gpus": g}), store=jobs).days}
              for g in gpus]
    label = f"this run: {answer['num_gpus']:,} GPUs, {numbers.sig(answer['days'])} days"
    return {"days": {"type": "days_vs_gpus", "points": points,
                     "current": {"x": answer["num_gpus"], "y": answer["days"], "label": label}}}


STACK = ("parameters", "gradients", "optimizer_state", "master_weights", "weight_copies", "activations",
         "transient")


def _bar(label: str, body: memory.TrainingMemoryRequest) -> dict | None:
    """Per-GPU GB by kind for one variant of the request; None where the engine refuses it
    (tensor ranks that no longer divide, say)."""
    try:
        a = jsonable(memory.training(body))
    except InvalidInput:
        return None
    return {"label": label, "total": a["total"] / 1e9, **{k: (a.get(k) or 0) / 1e9 for k in STACK}}


def _sweep(body: memory.TrainingMemoryRequest, field: str, values: list[int], label: str) -> list[dict]:
    bars = [_bar(label.format(v), body.model_copy(update={field: v})) for v in values]
    return [b for b in bars if b is not None]


def _flat(bars: list[dict]) -> bool:
    return len({round(b["total"], 9) for b in bars}) <= 1


def _memory_charts(body: memory.TrainingMemoryRequest, answer: dict, jobs: Store) -> dict:
    """Per-GPU bytes, stacked by kind, against the GPU's capacity: under each ZeRO stage; or,
    where ZeRO changes nothing (one data-parallel rank), against what does change them: the
    number of data-parallel ranks at this ZeRO stage, else the sequence length. And the
    largest model that fits on these GPUs."""
    if body.seq_len is None and not isinstance(body.model, int):  # null: the model's own context
        body = body.model_copy(update={"seq_len": engine_model(body.model).max_seq_len})
    bars, x, why = _sweep(body, "zero_stage", [0, 1, 2, 3], "ZeRO {}"), "ZeRO stage", ""
    if _flat(bars):
        ranks = _sweep(body, "data_parallel", [2**i for i in range(11)], "{}")
        seqs = _sweep(body, "seq_len", _powers_of_two(body.seq_len or 4096, 8, 1, 10_000_000), "{}")
        if not _flat(ranks):
            bars, x = ranks, "data-parallel ranks"
            why = (f"With {body.data_parallel} data-parallel rank(s) every ZeRO stage holds the same bytes, "
                   f"so this shows how ZeRO {body.zero_stage} shares them out as ranks are added.")
        elif not _flat(seqs):
            bars, x = seqs, "sequence length (tokens)"
            why = (f"At ZeRO {body.zero_stage} with {body.data_parallel} data-parallel rank(s) neither the "
                   "ZeRO stage nor more ranks change the bytes per GPU, so this shows what does: the "
                   "sequence length (activations).")
    gpu = body.gpu or "h100-sxm"
    biggest = _answer(memory.MaxModelRequest, {
        "gpu": gpu, "num_gpus": body.num_gpus, "precision": body.precision, "optimizer": body.optimizer,
        "zero_stage": body.zero_stage}, memory.max_model)
    capacity = None if answer["gpu_memory_bytes"] is None else answer["gpu_memory_bytes"] / 1e9
    return {"stack": {"type": "memory_stack", "bars": bars, "kinds": list(STACK), "capacity_gb": capacity,
                      "gpu": gpu, "x": x, "why": why}, "max_model": biggest}


PARTS = ("attention_latent", "attention_qkv", "attention_scores", "attention_values", "attention_output",
         "router", "routed_experts", "shared_experts", "mlp", "lm_head")
"""FlopsBreakdown's components in the order a token meets them; a page shows those that are not 0."""


def flops_label(part: str, answer: dict) -> str:
    """'attention qkv'; the MLP is the dense layers' where a model also has experts."""
    if part == "mlp" and answer["forward"]["routed_experts"]:
        return "dense mlp"
    return part.replace("_", " ")


def _flops_charts(body: flops.TransformerRequest, answer: dict, jobs: Store) -> dict:
    shown = [p for p in PARTS if answer["forward"][p] or answer["backward"][p]]
    return {"parts": {"type": "flops_parts", "keys": shown, "labels": [flops_label(p, answer) for p in shown],
                      "forward": [answer["forward"][p] for p in shown],
                      "backward": [answer["backward"][p] for p in shown]}}


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
         Input("storage_offset", "Storage offset"),
         Input("index", "Element", "2, 1", "an index to locate in storage", is_list=True),
         Input("view_shape", "View as", "2, 3", "a shape for view(); one entry may be -1", is_list=True))),
    Calculator(
        "formats", "Number formats",
        "How a value is stored: sign, exponent and mantissa bits, the value it becomes, and whether it "
        "underflows to zero or overflows. The course starts from 0.15625 in float32 (exact in every "
        "float); try 1e-8 (zero in float16, kept by bfloat16).",
        dtypes.EncodeRequest, _pure(dtypes.encode_value),
        (Input("value", "Value", "0.15625", "a decimal, read exactly (e.g. 1e-8, 65520, 1e999), a hex "
               "float (0x1.8p-3), inf or nan", text=True),
         Input("dtype", "Format", "float32"))),
    Calculator(
        "time", "Training time",
        "Days, GPU-hours and cost of a run: 6 × parameters × tokens FLOPs at a share (MFU) of the "
        "GPUs' dense peak. The course's example is filled in: 70B parameters on 15T tokens (on its "
        "1,024 H100s, 144 days). Or pick a model: its active parameters are N.",
        time.TrainingTimeRequest, lambda body, jobs: time.training(body, store=jobs),
        (Input("params", "Parameters", "70e9", "N, e.g. 70e9"),
         Input("tokens", "Training tokens", "15e12", "D, e.g. 15e12"),
         Input("gpu", "GPU", "h100-sxm"),
         Input("dtype", "Precision"),
         Input("num_gpus", "GPUs"),
         Input("mfu", "MFU", hint='0 to 1, or "measured"', typed=True),
         Input("price_per_gpu_hour", "Price per GPU-hour", hint="optional, for the cost"),
         Input("currency", "Currency", hint="ISO 4217 code of the price: USD, EUR, ...")),
        _time_charts, takes_model="params"),
    Calculator(
        "memory", "Training memory",
        "Bytes on each GPU: parameters, gradients, optimizer state, master weights and activations, "
        "under ZeRO, tensor and pipeline parallelism; and the largest model these GPUs hold.",
        memory.TrainingMemoryRequest, _pure(memory.training),
        (Input("model", "Model", "llama2-7b"),
         Input("precision", "Precision"),
         Input("optimizer", "Optimizer"),
         Input("batch_size", "Micro-batch", hint="sequences per data-parallel rank"),
         Input("seq_len", "Sequence length", hint="tokens; empty for the model's context length"),
         Input("recompute", "Recompute"),
         Input("zero_stage", "ZeRO stage"),
         Input("data_parallel", "Data-parallel ranks"),
         Input("tensor_parallel", "Tensor-parallel ranks"),
         Input("pipeline_parallel", "Pipeline stages"),
         Input("expert_parallel", "Expert-parallel ranks", hint="routed experts split over these ranks, "
               "inside data parallelism; 1 for a dense model"),
         Input("gpu", "GPU", "h100-sxm", "checks the total against its memory")),
        _memory_charts, takes_model="model"),
    Calculator(
        "matmul", "Matmul FLOPs",
        "(m × k) @ (k × n): 2·m·k·n FLOPs, one multiply and one add per multiply-accumulate; with a "
        "dtype, the bytes a kernel must move at least and the arithmetic intensity a roofline needs.",
        flops.MatmulRequest, _pure(flops.matmul),
        (Input("m", "m", "1024"), Input("k", "k", "256"), Input("n", "n", "64"),
         Input("batch", "Batch", hint="independent matmuls"),
         Input("dtype", "dtype", "bfloat16"))),
    Calculator(
        "mlp", "Linear stack FLOPs",
        "The course's stack of bias-free linear layers: forward 2·B·D·K per layer, backward twice that "
        "(the first layer skips dL/dx unless its input needs a gradient), beside 6 × tokens × params.",
        flops.MlpRequest, _pure(flops.mlp),
        (Input("batch", "Batch", "1024", "rows of x (tokens)"),
         Input("dims", "Widths", "256, 256, 64", "D0, D1, ..., Dn", is_list=True),
         Input("input_requires_grad", "Input needs a gradient")),
        _mlp_charts),
    Calculator(
        "flops", "Transformer FLOPs",
        "Exact matmul FLOPs of one training step (forward, and backward at twice the forward), "
        "by component, beside the 6 × N × D rule. One multiply-add is 2 FLOPs.",
        flops.TransformerRequest, _pure(flops.transformer),
        (Input("model", "Model", "gpt2"),
         Input("batch_size", "Batch", hint="sequences"),
         Input("seq_len", "Sequence length"),
         Input("causal", "Attention count", hint="full: every score, as FlopCounterMode; halved: "
               "the causal triangle")),
        _flops_charts, takes_model="model"),
)}
