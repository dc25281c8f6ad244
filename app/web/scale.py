"""The Scale page: POST /api/v1/plan/training's request as a form, and its answer (app/api/services/
plan.py, the function the route calls) as a scatter of every layout it evaluated (bytes per GPU
against step time), the fastest fitting layouts' step times stacked by kind, and a table of them.
And /scale/collective: POST /api/v1/comm/collective's request as a form, its answer in figures.

The plan's form is flat: the search's limits (zero stages, recompute, ...) are fields of the
request's `limits` object, which a form of one level cannot hold. ScaleForm is the request's own
fields with the limits' own beside them (each field's type, bounds and default taken from the
request models, so the page validates, and refuses, as the API does), and `plan` nests them back.
The charts are the answer's own seconds and bytes in GB; nothing here computes a figure but the
compute that is not recompute (the answer's compute includes its recompute)."""

from typing import Any
from urllib.parse import urlencode

from pydantic import create_model

from app.accounting.plan import search
from app.accounting.plan.layout import Layout
from app.accounting.units import GB
from app.api.compute import Narrow
from app.api.services import comm
from app.api.services import plan as service
from app.api.services.plan import PlanLimits, TrainingPlanRequest
from app.inputs.fields import Input as InputModel
from app.inputs.schemas import accelerator
from app.jobs.store import Store
from app.measured.here import read_if
from app.web.spec import Calculator, Input

LIMITS = ("zero_stage", "recompute", "allow_tensor_parallel_across_nodes", "tensor_parallel",
          "pipeline_parallel", "context_parallel", "first_stage_layers", "last_stage_layers", "virtual_stages",
          "expert_parallel", "micro_batch")
"""PlanLimits' fields the page offers, flat beside the request's."""
POINTS = "include_points"
"""Always true from the page: the scatter needs every layout."""


def _fields(model: type[InputModel], names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """(annotation, FieldInfo) of each named field: its type, bounds, validators and default."""
    return {n: (model.model_fields[n].annotation, model.model_fields[n]) for n in names}


ScaleForm = create_model(
    "ScaleForm", __base__=InputModel,
    __doc__="TrainingPlanRequest with its limits flat (the page's form).",
    **_fields(TrainingPlanRequest, [n for n in TrainingPlanRequest.model_fields
                                    if n not in ("limits", POINTS)]),
    **_fields(PlanLimits, LIMITS))


def request(form: Any) -> TrainingPlanRequest:
    """The API's request from the page's: the limits nested back, the points asked for. Only the
    fields the form was given are passed, so the answer's defaults_applied are the request's."""
    given = form.model_fields_set
    limits = PlanLimits.model_validate({n: getattr(form, n) for n in LIMITS if n in given})
    top = {n: getattr(form, n) for n in given if n not in LIMITS}
    return TrainingPlanRequest.model_validate(top | {"limits": limits, POINTS: True})


STACK = {"compute": "compute", "recompute": "recompute", "tensor_parallel": "tensor parallel",
         "context_parallel": "context parallel", "activation_offload": "activation offload",
         "expert_parallel": "expert parallel", "pipeline_p2p": "pipeline sends",
         "pipeline_bubble": "pipeline bubble", "data_parallel": "data parallel (exposed)"}
"""A step's exposed seconds by kind (Breakdown), in the order the bar stacks them, and their names."""


def segments(breakdown: dict) -> dict[str, float]:
    """Seconds by STACK kind, summing to the step: Breakdown.compute includes its recompute, so the
    bar's compute is the rest of it and recompute stands beside it."""
    return {k: breakdown["compute"] - breakdown["recompute"] if k == "compute" else breakdown[k]
            for k in STACK}


def rows(answer: dict) -> list[dict]:
    """The layouts the table and the bars show: the fastest that fit, numbered; else the closest."""
    if answer["best"]:
        return [{"name": f"#{i + 1}", **s} for i, s in enumerate(answer["best"])]
    return [{"name": "closest", **answer["least_memory"]}] if answer["least_memory"] else []


def time_link(body: Any, answer: dict) -> str:
    """The Time page asked about this run: its model, GPU and GPUs, the fastest layout's MFU, the
    training tokens; so its days agree with this page's (both are FLOPs over the achieved rate)."""
    asked: dict[str, Any] = {"num_gpus": answer["num_gpus"]}
    if isinstance(body.model, str):
        asked["model"] = body.model
    if isinstance(body.gpu, str):
        asked["gpu"] = answer["gpu"]
    if answer["best"]:
        asked["mfu"] = f"{answer['best'][0]['mfu']:.4g}"
    if body.training_tokens:
        asked["tokens"] = body.training_tokens
    if body.price_per_gpu_hour is not None:
        asked |= {"price_per_gpu_hour": body.price_per_gpu_hour, "currency": body.currency}
    return "/time?" + urlencode(asked)


def _charts(body: Any, answer: dict, jobs: Store) -> dict:
    if not answer["evaluated"]:
        return {"time_link": time_link(body, answer)}
    memory_bytes = accelerator(body.gpu, body.gpu_overrides).memory_bytes
    points = {"fits": [], "over": []}
    for p in answer["points"]:
        points["fits" if p["fits"] else "over"].append(
            {"x": p["step_seconds"], "y": p["memory_bytes"] / GB, "label": p["label"]})
    shown = rows(answer)
    bars = [{"label": r["name"], **segments(r["breakdown"])} for r in shown]
    kinds = [k for k in STACK if any(b[k] for b in bars)]
    chosen = shown[0] if shown else None
    return {
        "layouts": {"type": "layout_scatter", "fits": points["fits"], "over": points["over"],
                    "memory_gb": memory_bytes / GB, "memory_label": f"{answer['gpu']} memory",
                    "chosen": None if chosen is None else {
                        "x": chosen["step_seconds"], "y": chosen["memory_bytes"] / GB,
                        "label": f"{chosen['name']}: " + search.label(Layout(**chosen["layout"]))}},
        "steps": {"type": "step_bars", "bars": bars, "kinds": kinds, "names": [STACK[k] for k in kinds]},
        "time_link": time_link(body, answer),
    }


def _plan(form: Any, jobs: Store) -> Any:
    body = request(form)
    return service.plan_training(body, read_if(body.reads_store(), jobs))


LIST = "comma-separated; empty for any valid"
NARROW = Narrow("tensor_parallel", "search fewer layouts: list fewer tensor-parallel, pipeline or "
                "micro-batch choices, or fewer GPUs")

PAGE = Calculator(
    "scale", "Scale",
    "How to lay a training run out over many GPUs: every split into data, tensor, pipeline and expert "
    "parallelism, ZeRO stage, micro-batch and recompute that a framework runs, each timed (compute, the "
    "communication it cannot hide, the pipeline's bubble) and sized per GPU, and the fastest that fit. "
    "The answer of POST /api/v1/plan/training.",
    ScaleForm, _plan,
    (Input("model", "Model", "llama3-8b"),
     Input("gpu", "GPU", "h100-sxm"),
     Input("num_gpus", "GPUs", "64", "whole nodes when more than one"),
     Input("gpus_per_node", "GPUs per node", hint="empty: the catalogue's board (HGX: 8)"),
     Input("global_batch_sequences", "Global batch (sequences)", "256",
           "per optimizer step; or empty this and give tokens"),
     Input("global_batch_tokens", "Global batch (tokens)", hint="or this, a multiple of the sequence length"),
     Input("seq_len", "Sequence length", "4096", "tokens; empty for the model's context length"),
     Input("precision", "Precision"),
     Input("optimizer", "Optimizer"),
     Input("compute_efficiency", "Compute efficiency",
           hint="share of the dense peak the matmuls reach, 0 to 1"),
     Input("matmul_time", "Matmul time", hint="flat: at the compute efficiency; shaped: each GEMM from its shape",
           more=True),
     Input("zero_stage", "ZeRO stages", hint="comma-separated, of 0 to 3", is_list=True),
     Input("recompute", "Recompute", hint="comma-separated: none, selective, full", is_list=True),
     Input("allow_tensor_parallel_across_nodes", "Tensor parallel across nodes"),
     Input("tensor_parallel", "Tensor-parallel degrees", hint=LIST, is_list=True, more=True),
     Input("pipeline_parallel", "Pipeline degrees", hint=LIST, is_list=True, more=True),
     Input("first_stage_layers", "First stage's layers", hint="empty: stages differ by at most a layer, the "
           "first and last shorter", more=True),
     Input("last_stage_layers", "Last stage's layers", hint="the middle stages share the rest", more=True),
     Input("virtual_stages", "Chunks per pipeline rank", hint="interleaved schedule; " + LIST, is_list=True,
           more=True),
     Input("context_parallel", "Context-parallel degrees", hint="ranks splitting each sequence; empty: 1, or "
           "more where each keeps 8,192 tokens or more", is_list=True, more=True),
     Input("context_parallel_algorithm", "Context-parallel exchange", hint="ring (hidden behind attention) or "
           "all_gather (Llama 3)", more=True),
     Input("fp8_param_gather", "FP8 parameter gathers", hint="with an FP8 precision and ZeRO", more=True),
     Input("activation_offload", "Offload activations", hint="saved tensors in host memory, over PCIe",
           more=True),
     Input("loss_chunks", "Loss chunks", hint="more than 1: a fused chunked cross-entropy", more=True),
     Input("expert_parallel", "Expert-parallel degrees", hint=LIST, is_list=True, more=True),
     Input("micro_batch", "Micro-batch sizes", hint="sequences; " + LIST, is_list=True, more=True),
     Input("overlap_tensor_parallel", "Overlap tensor parallel", hint="Megatron-LM's --tp-comm-overlap, "
           "torchtitan's async TP", more=True),
     Input("overlap_data_parallel", "Overlap data parallel", hint="false: every gradient reduction and "
           "parameter gather is exposed", more=True),
     Input("top_k", "Layouts listed", hint="the fastest fitting ones", more=True),
     Input("training_tokens", "Training tokens", hint="the whole run's, for its days, cost, energy and CO2e"),
     Input("price_per_gpu_hour", "Price per GPU-hour", hint="optional, for the run's cost"),
     Input("currency", "Currency", hint="ISO 4217 code of the price", more=True),
     Input("power_watts", "Power per GPU (W)", hint="average; empty: the board power x utilisation",
           typed=True, more=True),
     Input("power_utilization", "Share of board power", hint="0 to 1", more=True),
     Input("pue", "PUE", hint="data centre energy / IT energy, >= 1", more=True),
     Input("region", "Grid", more=True),
     Input("grid_g_per_kwh", "Grid intensity (g/kWh)", hint="instead of a named grid", more=True)),
    _charts, takes_model="model", heavy=NARROW)


COLLECTIVE = Calculator(
    "scale/collective", "Collective",
    "One NCCL collective's time over a node's link and the network between nodes: a ring inside each "
    "node, and across nodes a ring of nodes; algbw and busbw as nccl-tests defines them. The answer of "
    "POST /api/v1/comm/collective.",
    comm.CollectiveRequest, lambda body, jobs: comm.collective(body),
    (Input("collective", "Collective", "all_reduce"),
     Input("bytes", "Bytes", "1GB", "nccl-tests' size: each rank's buffer (all_reduce, broadcast), or the "
           "whole output (all_gather, reduce_scatter, all_to_all); 1e9 or 1GB"),
     Input("ranks", "Ranks", "64", "GPUs taking part"),
     Input("gpus_per_node", "GPUs per node"),
     Input("gpu", "GPU", "h100-sxm", "its node link from the catalogue"),
     Input("intra_node_bytes_per_sec", "Node link (bytes/s)", hint="per GPU per direction; empty: the GPU's",
           more=True),
     Input("intra_node_latency_s", "Node link latency (s)", hint="per ring step; empty: the GPU's",
           more=True),
     Input("inter_node_bytes_per_sec", "Network (bytes/s)",
           hint="per GPU per direction; empty: the GPU's reference network / GPUs per node", more=True),
     Input("inter_node_latency_s", "Network latency (s)", hint="per ring step; empty: the GPU's", more=True),
     Input("base_latency_s", "Base latency (s)", hint="once per collective", more=True)))
