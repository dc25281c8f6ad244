"""A simulated run as the answer states it: latencies, throughput, goodput, the queue and cache over
time, preemptions, and whether the deployment kept up."""

from dataclasses import dataclass, field

from app.accounting.records import RECORD
from app.accounting.serving import metrics
from app.accounting.serving.metrics import Percentiles, PoolSeries
from app.accounting.serving.replicas import Outcome
from app.accounting.units import SECONDS_PER_HOUR


@dataclass(frozen=True, slots=True)
class Slo:
    """Service levels a request must meet to count toward goodput (seconds; None: not asked)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    __pydantic_config__ = RECORD

    def met(self, ttft: float, tpot: float, e2e: float) -> bool:
        return (
            (self.ttft_s is None or ttft <= self.ttft_s)
            and (self.tpot_s is None or tpot <= self.tpot_s)
            and (self.e2e_s is None or e2e <= self.e2e_s)
        )


@dataclass(slots=True)
class Simulation:
    requests: int
    offered_rate_per_s: float
    """Requests over the arrival window's span (the asked rate, as drawn)."""
    duration_s: float
    """From the first arrival to the last completion."""
    time_to_first_token: Percentiles
    time_per_output_token: Percentiles
    """(E2E - TTFT) / (output - 1), requests of more than one output token."""
    end_to_end: Percentiles
    requests_per_sec: float
    output_tokens_per_sec: float
    total_tokens_per_sec: float
    """Prompt and output tokens a second."""
    slo: Slo | None
    goodput_requests_per_sec: float | None
    """Completed requests a second meeting every SLO; null without an SLO."""
    slo_attainment: float | None
    """The share of requests meeting every SLO."""
    preemptions: int
    preempted_requests: int
    prompt_tokens: int
    prefill_tokens_computed: int
    """Prompt tokens the replicas computed: fewer than prompt_tokens by the prefix cache's hits, more by
    what preempted requests recomputed."""
    saturated: bool
    """The queue grows without bound at this rate: the latencies then depend on how long the traffic
    lasts, and the sustained throughput is requests_per_sec."""
    pools: list[PoolSeries]
    mean_requests_in_system: float | None
    """Waiting and running, time-averaged over the run (aggregated serving): Little's law says it
    equals little_law_requests."""
    little_law_requests: float | None
    """The arrival rate times the mean time in the system: sum of E2E over the run's span."""
    draft_acceptance_rate: float | None = None
    """Accepted drafts over drafts scheduled (vLLM's spec-decode metric)."""
    mean_acceptance_length: float | None = None
    """1 + accepted drafts per drafting step (vLLM's, the bonus token included)."""
    kv_transfer: Percentiles | None = None
    """Disaggregated: seconds from a prompt's prefill to its cache at the decode pool (queueing for the
    link included)."""
    gpu_hours: float = 0.0
    cost_per_million_output_tokens: float | None = None
    """All GPU-hours of the run (idle time included) over its output tokens."""
    currency: str = "USD"
    notes: list[str] = field(default_factory=list)
    conventions: list[str] = field(default_factory=list)

    __pydantic_config__ = RECORD


CONVENTIONS = [
    "The scheduler is vLLM V1's (0.11.0): running requests first, then waiting ones in arrival order within "
    "max_num_batched_tokens and max_num_seqs, chunked prefill, recompute preemption of the last running "
    "request, no admission in a step that preempted, prefix hits in whole blocks never covering the last "
    "token.",
    "Requests are dealt round-robin over the replicas, each replica serving alone.",
    "Each step's time is Tally's kernel-by-kernel pass for that step's tokens, sequences sampled, chunks' "
    "attention and cached bytes read (steps.py); no CPU scheduling overhead beyond the launches.",
    "Metrics as vLLM's serving benchmark computes them: TTFT from arrival, "
    "TPOT = (E2E - TTFT) / (output - 1), "
    "percentiles by linear interpolation, goodput as requests meeting every SLO a second.",
]


def summarize(
    out: Outcome, *, slo: Slo | None, num_gpus: int, price_per_gpu_hour: float | None, currency: str
) -> Simulation:
    n = len(out.arrival_s)
    ttft = [f - a for f, a in zip(out.first_token_s, out.arrival_s, strict=True)]
    e2e = [f - a for f, a in zip(out.finish_s, out.arrival_s, strict=True)]
    tpot_all = [
        (e - t) / (o - 1) if o > 1 else 0.0 for e, t, o in zip(e2e, ttft, out.output_tokens, strict=True)
    ]
    tpot = [v for v, o in zip(tpot_all, out.output_tokens, strict=True) if o > 1]
    start, end = min(out.arrival_s), max(out.finish_s)
    duration = end - start
    span = out.arrival_s[-1] - out.arrival_s[0]
    prompt, output = sum(out.prompt_tokens), sum(out.output_tokens)
    pools = [metrics.pool_series(name, runs, out.blocks[name], end) for name, runs in out.series.items()]
    good = attainment = goodput = None
    if slo is not None:
        good = sum(slo.met(t, p, e) for t, p, e in zip(ttft, tpot_all, e2e, strict=True))
        attainment, goodput = good / n, good / duration
    aggregated = list(out.series) == ["replica"]
    saturated = metrics.saturated(out.arrival_s, out.finish_s)
    notes = []
    if saturated:
        notes.append(
            f"Saturated: requests arrive faster than the deployment serves them; the queue grows "
            f"without bound, so the latencies grow with the traffic's length. It sustained "
            f"{n / duration:.3g} requests/s here."
        )
    gpu_hours = num_gpus * duration / SECONDS_PER_HOUR
    cost = None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour / output * 1e6
    runs = [s for pool in out.series.values() for s in pool]
    drafts, accepted, drafting = (
        sum(s.drafts for s in runs),
        sum(s.accepted for s in runs),
        sum(s.draft_steps for s in runs),
    )
    return Simulation(
        requests=n,
        offered_rate_per_s=(n - 1) / span if span > 0 else float(n),
        duration_s=duration,
        time_to_first_token=metrics.spread(ttft),
        time_per_output_token=metrics.spread(tpot),
        end_to_end=metrics.spread(e2e),
        requests_per_sec=n / duration,
        output_tokens_per_sec=output / duration,
        total_tokens_per_sec=(prompt + output) / duration,
        slo=slo,
        goodput_requests_per_sec=goodput,
        slo_attainment=attainment,
        preemptions=sum(out.preemptions),
        preempted_requests=sum(1 for p in out.preemptions if p),
        prompt_tokens=prompt,
        prefill_tokens_computed=sum(s.prefill_tokens for s in runs),
        saturated=saturated,
        pools=pools,
        mean_requests_in_system=pools[0].mean_waiting + pools[0].mean_running if aggregated else None,
        little_law_requests=sum(e2e) / end if aggregated else None,
        draft_acceptance_rate=accepted / drafts if drafts else None,
        mean_acceptance_length=1 + accepted / drafting if drafting else None,
        kv_transfer=metrics.spread(out.transfer_s) if out.transfer_s else None,
        gpu_hours=gpu_hours,
        cost_per_million_output_tokens=cost,
        currency=currency,
        notes=notes,
        conventions=CONVENTIONS,
    )
