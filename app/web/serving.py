"""The Serving page: POST /api/v1/inference/simulate's request as a form, and its answer
(app/api/services/simulate.py, the function the route calls) as figures, latency percentiles against
the request rate, and the queue and KV cache over time.

The form is flat: the traffic's lengths, the SLOs, speculative decoding and the prefill pool are
objects in the request, which a form of one level cannot hold. ServingForm is the request's own fields
with theirs beside them, each field's type, bounds and default taken from the request models, so the
page validates and refuses as the API does; `request` nests them back. The page always asks for the
same traffic at a spread of rates around the asked one (sweep_rates), for the chart."""

from typing import Any

from pydantic import ValidationError, create_model
from pydantic.fields import FieldInfo

from app.accounting.errors import InvalidInput
from app.api.compute import Narrow
from app.api.services.simulate import (
    DisaggregatedIn,
    LengthsIn,
    SimulateRequest,
    SloIn,
    SpeculativeIn,
    simulate,
)
from app.inputs.fields import Input as InputModel
from app.jobs.store import Store
from app.web.spec import Calculator, Input

SWEEP = (0.25, 0.5, 0.75, 1.25, 1.5, 2.0)
"""The chart's rates, as multiples of the asked rate."""
TOP = (
    "model",
    "gpu",
    "num_gpus",
    "tensor_parallel",
    "weight_format",
    "rate_per_s",
    "requests",
    "burstiness",
    "prefix_tokens",
    "prefix_groups",
    "prefix_hit_rate",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "price_per_gpu_hour",
    "currency",
    "seed",
)
NESTED = {  # form field -> (request field, its model's field)
    "distribution": ("lengths", "distribution"),
    "prompt_mean": ("prompt_tokens", "mean"),
    "prompt_spread": ("prompt_tokens", "spread"),
    "prompt_max": ("prompt_tokens", "maximum"),
    "output_mean": ("output_tokens", "mean"),
    "output_spread": ("output_tokens", "spread"),
    "output_max": ("output_tokens", "maximum"),
    "slo_ttft_s": ("slo", "ttft_s"),
    "slo_tpot_s": ("slo", "tpot_s"),
    "slo_percentile": ("slo", "percentile"),
    "speculative_method": ("speculative", "method"),
    "num_speculative_tokens": ("speculative", "num_speculative_tokens"),
    "acceptance_rate": ("speculative", "acceptance_rate"),
    "prefill_gpus": ("disaggregated", "prefill_gpus"),
}
MODELS = {
    "prompt_tokens": LengthsIn,
    "output_tokens": LengthsIn,
    "lengths": LengthsIn,
    "slo": SloIn,
    "speculative": SpeculativeIn,
    "disaggregated": DisaggregatedIn,
}
DEFAULTS = {
    "rate_per_s": 10,
    "requests": 1000,
    "prompt_mean": 512,
    "output_mean": 256,
    "distribution": "lognormal",
    "prompt_spread": 0.8,
    "output_spread": 0.8,
    "slo_ttft_s": 0.5,
    "slo_tpot_s": 0.05,
    "slo_percentile": 99,
}
"""The page's opening question, where the request has no default of its own (or a fixed 1024/128)."""


def _field(name: str) -> tuple[Any, FieldInfo]:
    """(annotation, FieldInfo) of the request field behind a form field: the page's opening value where
    DEFAULTS has one; a nested field otherwise optional (its object is sent only when given)."""
    group = NESTED.get(name)
    info = MODELS[group[0]].model_fields[group[1]] if group else SimulateRequest.model_fields[name]
    if name in DEFAULTS:
        return info.annotation, FieldInfo.merge_field_infos(info, default=DEFAULTS[name])
    if group:
        return info.annotation | None, FieldInfo.merge_field_infos(info, default=None)
    return info.annotation, info


ServingForm = create_model(
    "ServingForm",
    __base__=InputModel,
    __doc__="SimulateRequest with its traffic, SLOs, drafter and prefill pool flat (the page's form).",
    **{n: _field(n) for n in (*TOP, *NESTED)},
)


def _nested(group: str, values: dict) -> Any:
    """One of the request's objects from its flat fields; a refusal names the form's field."""
    try:
        return MODELS[group].model_validate(values)
    except ValidationError as e:
        first = e.errors()[0]
        inner = first["loc"][0] if first["loc"] else ""
        name = next((n for n, (g, i) in NESTED.items() if i == inner and g in (group, "lengths")), group)
        raise InvalidInput(name, first["msg"].removeprefix("Value error, ")) from None


def request(form: Any) -> SimulateRequest:
    """The API's request from the page's, the flat fields nested back; only what the form was given (and
    the page's opening question) is passed, so the answer's defaults_applied are the request's."""
    given = form.model_fields_set | set(DEFAULTS)
    body: dict[str, Any] = {n: getattr(form, n) for n in TOP if n in given}
    nested: dict[str, dict] = {}
    for name, (group, inner) in NESTED.items():
        value = getattr(form, name)
        if name in given and value is not None:
            nested.setdefault(group, {})[inner] = value
    shape = nested.pop("lengths", {})
    for group in ("prompt_tokens", "output_tokens"):
        if group in nested:
            nested[group] |= shape
    if "speculative" in nested and "acceptance_rate" not in nested["speculative"]:
        nested.pop("speculative")  # a method or a count alone asks nothing
    body |= {group: _nested(group, values) for group, values in nested.items()}
    rate = body["rate_per_s"]
    body["sweep_rates"] = [rate * k for k in SWEEP]
    return SimulateRequest.model_validate(body)


def _simulate(form: Any, jobs: Store) -> Any:
    return simulate(request(form))


def _charts(body: Any, answer: dict, jobs: Store) -> dict:
    points = sorted(
        [
            *answer["by_rate"],
            {
                "rate_per_s": body.rate_per_s,
                "saturated": answer["saturated"],
                "ttft_p50": answer["time_to_first_token"]["p50"],
                "ttft_p99": answer["time_to_first_token"]["p99"],
                "tpot_p50": answer["time_per_output_token"]["p50"],
                "tpot_p99": answer["time_per_output_token"]["p99"],
            },
        ],
        key=lambda p: p["rate_per_s"],
    )
    slo = answer["slo"] or {}

    def curve(key: str) -> list[dict]:
        return [{"x": p["rate_per_s"], "y": p[key] * 1e3} for p in points if p[key] is not None]

    def rate_chart(metric: str, title: str, target: float | None) -> dict:
        return {
            "type": "series_lines",
            "x": "requests/s",
            "y": f"{title} (ms)",
            "log_y": True,
            "series": [
                {"label": "p50", "points": curve(f"{metric}_p50")},
                {"label": "p99", "points": curve(f"{metric}_p99"), "dash": True},
            ],
            "hlines": [] if target is None else [{"label": f"SLO {target * 1e3:g} ms", "y": target * 1e3}],
            "vlines": [{"label": f"asked: {body.rate_per_s:.3g}/s", "x": body.rate_per_s}],
            "saturated": [p["rate_per_s"] for p in points if p["saturated"]],
        }

    over_time = {
        "type": "series_lines",
        "x": "seconds",
        "y": "requests",
        "log_y": False,
        "series": [
            {
                "label": f"{p['pool']} running",
                "points": [{"x": q["time_s"], "y": q["running"]} for q in p["points"]],
            }
            for p in answer["pools"]
        ]
        + [
            {
                "label": f"{p['pool']} waiting",
                "dash": True,
                "points": [{"x": q["time_s"], "y": q["waiting"]} for q in p["points"]],
            }
            for p in answer["pools"]
        ],
        "hlines": [],
        "vlines": [],
        "saturated": [],
    }
    kv = {
        "type": "series_lines",
        "x": "seconds",
        "y": "KV cache used (%)",
        "log_y": False,
        "max_y": 100,
        "series": [
            {
                "label": f"{p['pool']} ({p['replicas']} × {p['blocks_per_replica']:,} blocks)",
                "points": [{"x": q["time_s"], "y": 100 * q["kv_cache_used"]} for q in p["points"]],
            }
            for p in answer["pools"]
        ],
        "hlines": [],
        "vlines": [],
        "saturated": [],
    }
    return {
        "ttft": rate_chart("ttft", "time to first token", slo.get("ttft_s")),
        "tpot": rate_chart("tpot", "time per output token", slo.get("tpot_s")),
        "queue": over_time,
        "kv": kv,
    }


PAGE = Calculator(
    "serving",
    "Serving",
    "A traffic of requests served step by step as vLLM V1 schedules them (chunked prefill, paged KV "
    "blocks with preemption, prefix caching, speculative decoding, a prefill pool): time to first token, "
    "time per output token and end-to-end latency percentiles, throughput and goodput under the SLOs, "
    "against the request rate, and the queue and KV cache over time. The answer of "
    "POST /api/v1/inference/simulate.",
    ServingForm,
    _simulate,
    (
        Input("model", "Model", "llama3.1-8b"),
        Input("gpu", "GPU", "h100-sxm"),
        Input("num_gpus", "GPUs", hint="replicas = GPUs / tensor parallel"),
        Input(
            "tensor_parallel", "Tensor-parallel ranks", hint="GPUs per replica; empty: the fewest that fit"
        ),
        Input("weight_format", "Weight format", hint="bits per weight: GET /api/v1/quantization"),
        Input("rate_per_s", "Requests/s", hint="Poisson arrivals"),
        Input("requests", "Requests", hint="simulated"),
        Input("distribution", "Lengths", hint="fixed, uniform (vLLM's random dataset) or lognormal"),
        Input("prompt_mean", "Prompt tokens", hint="mean"),
        Input("prompt_spread", "Prompt spread", hint="uniform: range ratio; lognormal: sigma"),
        Input("output_mean", "Output tokens", hint="mean"),
        Input("output_spread", "Output spread"),
        Input("slo_ttft_s", "TTFT SLO (s)"),
        Input("slo_tpot_s", "TPOT SLO (s)"),
        Input("slo_percentile", "SLO percentile", hint="the deployment meets the SLOs at this percentile"),
        Input("price_per_gpu_hour", "Price per GPU-hour", hint="optional, for the cost per million tokens"),
        Input("prompt_max", "Longest prompt", hint="tokens; draws above are cut", more=True),
        Input("output_max", "Longest output", more=True),
        Input("burstiness", "Burstiness", hint="1: Poisson; below 1 burstier", more=True),
        Input(
            "prefix_tokens", "Shared prefix", hint="tokens before each prompt (a system prompt)", more=True
        ),
        Input("prefix_groups", "Distinct prefixes", more=True),
        Input(
            "prefix_hit_rate", "Prefix hit rate", hint="instead: this share of each prompt cached", more=True
        ),
        Input("enable_prefix_caching", "Prefix caching", more=True),
        Input("enable_chunked_prefill", "Chunked prefill", more=True),
        Input("max_num_seqs", "max_num_seqs", hint="empty: vLLM's default for the GPU", more=True),
        Input("max_num_batched_tokens", "max_num_batched_tokens", hint="the step's token budget", more=True),
        Input("gpu_memory_utilization", "GPU memory utilization", hint="empty: 0.9", more=True),
        Input(
            "speculative_method", "Drafter", hint="mtp or draft_model (give the acceptance rate)", more=True
        ),
        Input("num_speculative_tokens", "Drafts a step", more=True),
        Input(
            "acceptance_rate",
            "Acceptance rate",
            hint="each draft's, once the ones before were accepted",
            more=True,
        ),
        Input("prefill_gpus", "Prefill GPUs", hint="disaggregated: a prefill pool of these GPUs", more=True),
        Input("currency", "Currency", hint="ISO 4217 code of the price", more=True),
        Input("seed", "Seed", more=True),
    ),
    _charts,
    takes_model="model",
    heavy=Narrow("requests", "fewer requests, or a lower rate"),
)
