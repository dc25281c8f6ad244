"""The deployment search's answer: every deployment it simulated, the cheapest that meets the SLOs,
and the frontier of cost against latency (the deployments no other beats on cost and both latencies)."""

from dataclasses import dataclass, field

from app.accounting.records import RECORD


@dataclass(slots=True)
class Candidate:
    gpu: str
    weight_format: str
    tensor_parallel: int
    max_num_seqs: int
    replicas: int
    """Aggregated replicas, or the decode pool's replicas when disaggregated."""
    prefill_replicas: int
    """Disaggregated: the prefill pool's replicas (each tensor_parallel GPUs); 0 aggregated."""
    num_gpus: int
    cost_per_hour: float
    cost_per_million_output_tokens: float | None
    """cost_per_hour over the output tokens an hour at the simulated throughput; null when saturated."""
    saturated: bool
    ttft_s: float | None
    """The SLO's percentile of TTFT (seconds); null when the run saturated and stopped early."""
    tpot_s: float | None
    e2e_s: float | None
    slo_met: bool

    __pydantic_config__ = RECORD

    @property
    def disaggregated(self) -> bool:
        return self.prefill_replicas > 0


@dataclass(slots=True)
class DeploymentSearch:
    rate_per_s: float
    objective: str
    """"per_million_tokens" or "per_hour": what `best` is the cheapest by."""
    percentile: float
    best: Candidate | None
    """The cheapest deployment meeting every SLO at the rate; null when none of those searched does."""
    frontier: list[Candidate]
    """Unsaturated deployments no other beats on cost, TTFT and TPOT together, cheapest first."""
    candidates: list[Candidate]
    """Every deployment simulated, in the order searched."""
    skipped: list[str]
    """Deployments not simulated, and why (the model does not fit, the heads do not split)."""
    currency: str = "USD"
    notes: list[str] = field(default_factory=list)

    __pydantic_config__ = RECORD


def cost(c: Candidate, objective: str) -> float:
    if objective == "per_hour":
        return c.cost_per_hour
    return c.cost_per_million_output_tokens if c.cost_per_million_output_tokens is not None else float("inf")


def cheapest(cands: list[Candidate], objective: str) -> Candidate | None:
    """The cheapest meeting the SLOs; ties go to the lower TTFT, then TPOT."""
    met = [c for c in cands if c.slo_met]
    return min(met, key=lambda c: (cost(c, objective), c.ttft_s or 0.0, c.tpot_s or 0.0), default=None)


def pareto(cands: list[Candidate], objective: str) -> list[Candidate]:
    """Unsaturated candidates that no other is at least as good as on cost, TTFT and TPOT, and better on
    one; cheapest first."""
    done = [c for c in cands if not c.saturated and c.ttft_s is not None and c.tpot_s is not None]

    def key(c: Candidate) -> tuple[float, float, float]:
        return cost(c, objective), c.ttft_s, c.tpot_s  # type: ignore[return-value]

    front = []
    for c in done:
        k = key(c)
        if not any(all(a <= b for a, b in zip(key(o), k, strict=True)) and key(o) != k for o in done):
            front.append(c)
    return sorted(front, key=key)
