"""The calculator pages: each is a form over one request model and its service function
(app/api/services), a result fragment and, where a chart needs more than one answer,
further calls to the same functions. The spec of a page (its inputs, taken from the request
model) is app/web/spec.py; the serving page, which answers three routes at once, is
app/web/inference.py; "Will it run on my GPU?" is app/web/fit.py; Scale and its collective
calculator are app/web/scale.py."""

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from app import numbers
from app.accounting.errors import InvalidInput
from app.api.compute import Narrow
from app.api.responses import jsonable
from app.api.services import dtypes, flops, memory, time
from app.inputs.schemas import engine_model, gpu_label
from app.jobs.store import Store
from app.measured.here import read_if
from app.web import data, fit, forms, inference, scale, serving
from app.web import tensors as tensors_page
from app.web.spec import Calculator, Compute, Input, choices

__all__ = ["CALCULATORS", "Calculator", "Input", "choices", "flops_label"]


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
    here = read_if(time.reads_store(body), jobs)
    points = [{"x": g, "y": time.training(body.model_copy(update={"num_gpus": g}), here).days}
              for g in gpus]
    label = f"this run: {answer['num_gpus']:,} GPUs, {numbers.sig(answer['days'])} days"
    return {"days": {"type": "days_vs_gpus", "points": points,
                     "current": {"x": answer["num_gpus"], "y": answer["days"], "label": label}}}


STACK = ("parameters", "gradients", "optimizer_state", "master_weights", "weight_copies", "activations",
         "transient", "inputs", "peak_phase_extra")
"""The kinds held at the start of backward, bottom up, then what the step's peak moment holds
beyond them (its LM head's weight gradient, say): the bar's height is the answer's total."""


def _bar(label: str, body: memory.TrainingMemoryRequest) -> dict | None:
    """Per-GPU GB by kind for one variant of the request; None where the engine refuses it
    (tensor ranks that no longer divide, say)."""
    try:
        a = jsonable(memory.training(body))
    except InvalidInput:
        return None
    a["peak_phase_extra"] = a["total"] - a["start_of_backward"]
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
    gpu = body.gpu.model_dump(mode="json") if isinstance(body.gpu, BaseModel) else body.gpu or "h100-sxm"
    biggest = _answer(memory.MaxModelRequest, {
        "gpu": gpu, "num_gpus": body.num_gpus, "precision": body.precision, "optimizer": body.optimizer,
        "zero_stage": body.zero_stage}, memory.max_model)
    capacity = None if answer["gpu_memory_bytes"] is None else answer["gpu_memory_bytes"] / 1e9
    return {"stack": {"type": "memory_stack", "bars": bars, "kinds": list(STACK), "capacity_gb": capacity,
                      "gpu": gpu_label(body.gpu) or gpu, "x": x, "why": why}, "max_model": biggest}


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
    tensors_page.PAGE,
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
        "Days, GPU-hours, cost, energy and CO2e of a run: 6 × parameters × tokens FLOPs at a share (MFU) "
        "of the GPUs' dense peak; GPU-hours × power × PUE × the grid's carbon intensity. The course's "
        "example is filled in: 70B parameters on 15T tokens (on its 1,024 H100s, 144 days). Or pick a "
        "model: its active parameters are N.",
        time.TrainingTimeRequest, lambda body, jobs: time.training(body, read_if(time.reads_store(body), jobs)),
        (Input("params", "Parameters", "70e9", "N, e.g. 70e9"),
         Input("tokens", "Training tokens", "15e12", "D, e.g. 15e12"),
         Input("gpu", "GPU", "h100-sxm"),
         Input("dtype", "Precision"),
         Input("num_gpus", "GPUs"),
         Input("mfu", "MFU", hint='0 to 1, or "measured"', typed=True),
         Input("price_per_gpu_hour", "Price per GPU-hour", hint="optional, for the cost"),
         Input("currency", "Currency", hint="ISO 4217 code of the price: USD, EUR, ..."),
         Input("power_watts", "Power per GPU (W)", hint='average; empty: the board power x utilisation; '
               'or "measured"', typed=True),
         Input("power_utilization", "Share of board power", hint="0 to 1; 1: the board power (model cards)"),
         Input("pue", "PUE", hint="data centre energy / IT energy, >= 1"),
         Input("region", "Grid"),
         Input("grid_g_per_kwh", "Grid intensity (g/kWh)", hint="instead of a named grid", more=True)),
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
         Input("gpu", "GPU", "h100-sxm", "checks the total against its memory"),
         Input("first_stage_layers", "First stage's layers", hint="empty: stages differ by at most a layer",
               more=True),
         Input("last_stage_layers", "Last stage's layers", hint="the middle stages share the rest", more=True),
         Input("virtual_stages", "Chunks per pipeline rank", hint="interleaved schedule", more=True),
         Input("context_parallel", "Context-parallel ranks", hint="each keeps 1/c of every sequence", more=True),
         Input("context_parallel_algorithm", "Context-parallel exchange", more=True),
         Input("activation_offload", "Offload activations", hint="saved tensors in host memory", more=True),
         Input("loss_chunks", "Loss chunks", hint="more than 1: a fused chunked cross-entropy", more=True)),
        _memory_charts, takes_model="model",
        heavy=Narrow("model", "a smaller model (fewer layers)")),
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
    inference.PAGE,
    serving.PAGE,
    fit.PAGE,
    scale.PAGE,
    scale.COLLECTIVE,
    data.PAGE,
    data.CHECKPOINT,
)}
