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
    """Service levels (seconds; None: not asked). A request meeting every one counts toward goodput; a
    deployment meets them when the `percentile` of each metric over the requests does, unsaturated."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: float = 99.0

    __pydantic_config__ = RECORD

    def met(self, ttft: float, tpot: float, e2e: float) -> bool:
        return (
            (self.ttft_s is None or ttft <= self.ttft_s)
            and (self.tpot_s is None or tpot <= self.tpot_s)
            and (self.e2e_s is None or e2e <= self.e2e_s)
        )


@dataclass(frozen=True, slots=True)
class Latencies:
    """Each request's TTFT, TPOT (0 for a single output token, as vLLM's goodput counts it) and E2E."""

    ttft: list[float]
    tpot: list[float]
    e2e: list[float]
    output_tokens: list[int]

    @classmethod
    def of(cls, out: Outcome) -> "Latencies":
        ttft = [f - a for f, a in zip(out.first_token_s, out.arrival_s, strict=True)]
        e2e = [f - a for f, a in zip(out.finish_s, out.arrival_s, strict=True)]
        tpot = [
            (e - t) / (o - 1) if o > 1 else 0.0 for e, t, o in zip(e2e, ttft, out.output_tokens, strict=True)
        ]
        return cls(ttft, tpot, e2e, out.output_tokens)

    @property
    def decoding_tpot(self) -> list[float]:
        """TPOT over the requests of more than one output token (vLLM's reported statistic)."""
        return [v for v, o in zip(self.tpot, self.output_tokens, strict=True) if o > 1]

    def at(self, q: float) -> tuple[float, float, float]:
        """(TTFT, TPOT, E2E) at percentile q."""
        return tuple(metrics.percentile(sorted(v), q) for v in (self.ttft, self.decoding_tpot, self.e2e))

    def good(self, slo: Slo) -> int:
        return sum(slo.met(t, p, e) for t, p, e in zip(self.ttft, self.tpot, self.e2e, strict=True))

    def meet(self, slo: Slo) -> bool:
        return slo.met(*self.at(slo.percentile))


@dataclass(slots=True)
class RatePoint:
    """One rate of a sweep: its percentiles (seconds), or only that it saturated."""

    rate_per_s: float
    saturated: bool
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None
    e2e_p99: float | None
    requests_per_sec: float | None
    goodput_requests_per_sec: float | None
    slo_met: bool | None
    """The SLO's percentile of each metric within its target, unsaturated; null without an SLO."""

    __pydantic_config__ = RECORD


def rate_point(out: Outcome, rate: float, slo: Slo | None) -> RatePoint:
    if out.gave_up:
        return RatePoint(rate, True, None, None, None, None, None, None, None, False if slo else None)
    lat = Latencies.of(out)
    duration = max(out.finish_s) - min(out.arrival_s)
    saturated = metrics.saturated(out.arrival_s, out.finish_s)
    (t50, p50, _), (t99, p99, e99) = lat.at(50), lat.at(99)
    return RatePoint(
        rate,
        saturated,
        t50,
        t99,
        p50,
        p99,
        e99,
        len(lat.ttft) / duration,
        None if slo is None else lat.good(slo) / duration,
        None if slo is None else lat.meet(slo) and not saturated,
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
    slo_met: bool | None
    """The SLO's percentile of each metric within its target, unsaturated; null without an SLO."""
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
    by_rate: list[RatePoint] = field(default_factory=list)
    """With sweep_rates: the same traffic at each rate (a run past saturation stops early)."""
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
    lat = Latencies.of(out)
    ttft, e2e = lat.ttft, lat.e2e
    start, end = min(out.arrival_s), max(out.finish_s)
    duration = end - start
    span = out.arrival_s[-1] - out.arrival_s[0]
    prompt, output = sum(out.prompt_tokens), sum(out.output_tokens)
    pools = [metrics.pool_series(name, runs, out.blocks[name], end) for name, runs in out.series.items()]
    good = attainment = goodput = met = None
    aggregated = list(out.series) == ["replica"]
    saturated = metrics.saturated(out.arrival_s, out.finish_s)
    if slo is not None:
        good = lat.good(slo)
        attainment, goodput = good / n, good / duration
        met = lat.meet(slo) and not saturated
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
        time_per_output_token=metrics.spread(lat.decoding_tpot),
        end_to_end=metrics.spread(e2e),
        requests_per_sec=n / duration,
        output_tokens_per_sec=output / duration,
        total_tokens_per_sec=(prompt + output) / duration,
        slo=slo,
        goodput_requests_per_sec=goodput,
        slo_attainment=attainment,
        slo_met=met,
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
