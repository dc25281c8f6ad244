"""The deployment search: the cheapest GPUs, count, tensor parallelism, weight format and
aggregated or disaggregated serving that meet the SLOs at a rate, each candidate simulated."""

from itertools import product
from typing import Annotated, Literal

from pydantic import Field

from app.accounting.errors import InvalidInput
from app.accounting.serving import frontier, metrics, report
from app.accounting.serving.frontier import Candidate, DeploymentSearch
from app.accounting.units import SECONDS_PER_HOUR
from app.api.services.inference import WeightFormat
from app.api.services.simulate import (
    DisaggregatedIn,
    SimulateRequest,
    check_positions,
    requests_of,
    run,
    served,
    slo_of,
    traffic_field,
)
from app.inputs.fields import count, number
from app.inputs.schemas import GpuId, GpuRef, engine_model

Objective = Literal["per_million_tokens", "per_hour"]
TENSOR_PARALLEL = (1, 2, 4, 8)


class DeploySearchRequest(SimulateRequest):
    gpu: GpuRef | None = Field(None, description="Unused: the search takes its GPUs from `prices`.")
    prices: Annotated[dict[GpuId, number(ge=0, le=1e6)], Field(min_length=1, max_length=12)] = Field(
        description="The GPUs to search, each with its price per GPU-hour in `currency` (no catalogue "
        'carries prices): {"h100-sxm": 2.5, "a100-80gb": 1.6}.'
    )
    max_gpus: count(1, 64) = Field(8, description="GPUs a deployment may use, both pools together.")
    weight_formats: Annotated[list[WeightFormat], Field(min_length=1, max_length=6)] | None = Field(  # type: ignore[valid-type]
        None, description="Weight formats to try; null: weight_format alone."
    )
    search_disaggregated: bool = Field(
        True,
        description="Also try prefill and decode pools (no more GPUs than the cheapest aggregated "
        "deployment found, or max_gpus when none meets the SLOs).",
    )
    objective: Objective = Field(
        "per_million_tokens",
        description="Cheapest by output tokens' cost at the simulated throughput, or by the hour.",
    )
    max_num_seqs_options: Annotated[list[count(1, 1 << 20)],  # type: ignore[valid-type]
                                    Field(min_length=1, max_length=6)] | None = Field(
        None, description="vLLM's max_num_seqs values to try (fewer running requests: shorter steps, a "
                          "longer queue); null: max_num_seqs alone.")
    requests: count(1, 20_000) = Field(
        500, description="Requests each candidate serves (the search draws them once)."
    )


def _candidate(
    body: DeploySearchRequest,
    asked: SimulateRequest,
    reqs,
    price: float,
    tp: int,
    replicas: int,
    prefill: int,
) -> tuple[Candidate, bool]:
    """The deployment simulated, and whether its decoding falls short (too slow a token, or its decode pool
    saturated): more prefill replicas at the same count would only make that worse."""
    deployment = served(asked)
    out = run(asked, deployment, reqs, max(32, len(reqs) // (4 * deployment.pool.replicas)))
    slo = slo_of(body)
    gpus = deployment.num_gpus
    per_hour = gpus * price
    where = dict(gpu=str(asked.gpu), weight_format=asked.weight_format, tensor_parallel=tp,
                 max_num_seqs=deployment.setup.max_num_seqs, replicas=replicas, prefill_replicas=prefill,
                 num_gpus=gpus, cost_per_hour=per_hour)
    if out.gave_up:
        c = Candidate(**where, cost_per_million_output_tokens=None, saturated=True, ttft_s=None, tpot_s=None,
                      e2e_s=None, slo_met=False)
        return c, "decode" in out.series or "replica" in out.series
    lat = report.Latencies.of(out)
    duration = max(out.finish_s) - min(out.arrival_s)
    saturated = metrics.saturated(out.arrival_s, out.finish_s)
    per_token = None if saturated else per_hour / (sum(out.output_tokens) / duration * SECONDS_PER_HOUR) * 1e6
    ttft, tpot, e2e = lat.at(slo.percentile)
    short = (slo.tpot_s is not None and tpot > slo.tpot_s) or (slo.e2e_s is not None and e2e > slo.e2e_s)
    c = Candidate(**where, cost_per_million_output_tokens=per_token, saturated=saturated, ttft_s=ttft,
                  tpot_s=tpot, e2e_s=e2e, slo_met=lat.meet(slo) and not saturated)
    return c, short


def search(body: DeploySearchRequest) -> DeploymentSearch:
    for name in ("flops_efficiency", "memory_efficiency"):
        if getattr(body, name) == "measured":
            raise InvalidInput(
                name, "the search spans GPUs; a measured efficiency holds on this server's device only"
            )
    if body.calibration is not None:
        raise InvalidInput("calibration", "the search spans GPUs; a calibration profile is one device's")
    if body.slo is None or not any((body.slo.ttft_s, body.slo.tpot_s, body.slo.e2e_s)):
        raise InvalidInput("slo", "the search needs a service level to meet (ttft_s, tpot_s or e2e_s)")
    if body.trace is None and body.rate_per_s is None:
        raise InvalidInput("rate_per_s", "give the request rate to serve (or a trace)")
    reqs = requests_of(body)
    check_positions(reqs, engine_model(body.model).max_seq_len, traffic_field(body))
    formats = body.weight_formats or [body.weight_format]
    cands: list[Candidate] = []
    skipped: list[str] = []
    tps = [t for t in TENSOR_PARALLEL if t <= body.max_gpus]
    seqs_options = body.max_num_seqs_options or [None]
    for (gpu, price), fmt, tp, seqs in product(body.prices.items(), formats, tps, seqs_options):
        base = {"gpu": gpu, "weight_format": fmt, "tensor_parallel": tp, "disaggregated": None,
                "sweep_rates": None, "gpu_overrides": None}
        if seqs is not None:
            base["max_num_seqs"] = seqs
        found, fits = None, True
        for replicas in range(1, body.max_gpus // tp + 1):
            asked = body.model_copy(update=base | {"num_gpus": replicas * tp})
            try:
                c, _ = _candidate(body, asked, reqs, price, tp, replicas, 0)
            except InvalidInput as e:
                skipped.append(f"{gpu} {fmt} tensor_parallel {tp}: {e.field}: {e.message}")
                fits = False
                break
            cands.append(c)
            if c.slo_met:
                found = c
                break
        if body.search_disaggregated and fits:
            top = found.replicas if found else body.max_gpus // tp
            _disaggregated(body, reqs, price, tp, base, top, cands)
    if not cands and skipped:
        raise InvalidInput("prices", "no GPU searched can serve this traffic: " + "; ".join(skipped[:4]))
    best = frontier.cheapest(cands, body.objective)
    notes = []
    if best is None:
        notes.append(
            "No deployment searched meets the SLOs at this rate: raise max_gpus, add GPUs or formats, "
            "or relax the SLOs."
        )
    return DeploymentSearch(
        rate_per_s=len(reqs) / (reqs.arrival_s[-1] - reqs.arrival_s[0]) if len(reqs) > 1 else 0.0,
        objective=body.objective,
        percentile=slo_of(body).percentile,
        best=best,
        frontier=frontier.pareto(cands, body.objective),
        candidates=cands,
        skipped=skipped,
        currency=body.currency,
        notes=notes,
    )


def _disaggregated(
    body: DeploySearchRequest, reqs, price: float, tp: int, base: dict, top: int, cands: list[Candidate]
) -> None:
    """Prefill and decode pools of tp-GPU replicas, no more replicas in all than `top`; the first total
    at which some split meets the SLOs ends the search (more would only cost more). The link is the one
    the request gives (`disaggregated`), else the catalogue's."""
    given = body.disaggregated
    link = given.kv_transfer_bytes_per_sec if given else None
    latency = given.kv_transfer_latency_s if given else 0.0
    for total in range(2, top + 1):
        met = False
        for prefill in range(1, total):
            split = DisaggregatedIn(
                prefill_gpus=prefill * tp,
                prefill_tensor_parallel=tp,
                kv_transfer_bytes_per_sec=link,
                kv_transfer_latency_s=latency,
            )
            asked = body.model_copy(
                update=base | {"num_gpus": (total - prefill) * tp, "disaggregated": split}
            )
            try:
                c, short = _candidate(body, asked, reqs, price, tp, total - prefill, prefill)
            except InvalidInput:
                return
            cands.append(c)
            met = met or c.slo_met
            if short:  # fewer decode replicas would be slower still
                break
        if met:
            return
