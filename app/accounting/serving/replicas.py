"""Requests over a deployment's replicas: aggregated (each replica prefills and decodes), or
disaggregated (a prefill pool sends each prompt's cache to a decode pool).

Requests are dealt round-robin in arrival order, as a load balancer in front of independent
replicas deals them, so each replica runs alone. Disaggregated serving follows vLLM's P/D flow
(vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py and the toy proxy of its tests):
the prefill instance serves the request with max_tokens 1 and keeps its blocks until the cache is
sent; the transfers from one prefill replica go one after another over its link; the decode instance
admits the request with its prompt's cache computed but the last token, which it computes to emit
the first token the client sees.
"""

from dataclasses import dataclass, field

from app.accounting.serving.engine import Engine, EngineConfig, Req, Series
from app.accounting.serving.steps import Drafter, StepModel
from app.accounting.serving.traffic import Requests


@dataclass(frozen=True)
class Pool:
    """Identical replicas of one engine."""

    config: EngineConfig
    step: StepModel
    replicas: int
    drafter: Drafter | None = None


@dataclass(frozen=True, slots=True)
class Transfer:
    """The prompt's cache from a prefill replica to a decode replica."""

    bytes_per_token: int
    """KV bytes a prompt token sends (every layer, every rank)."""
    link_bytes_per_sec: float
    latency_s: float


@dataclass
class Outcome:
    """Per request (arrival order) and per replica of each pool."""

    arrival_s: list[float]
    first_token_s: list[float]
    finish_s: list[float]
    prompt_tokens: list[int]
    output_tokens: list[int]
    preemptions: list[int]
    series: dict[str, list[Series]] = field(default_factory=dict)
    """Pool name ("replica", or "prefill" and "decode") -> each replica's steps."""
    blocks: dict[str, int] = field(default_factory=dict)
    """Pool name -> blocks of one replica's cache."""
    transfer_s: list[float] = field(default_factory=list)
    """Disaggregated: each request's cache transfer (queueing for the link included)."""
    gave_up: bool = False
    """A replica's queue passed give_up_waiting: saturated, the run left unfinished."""


def _deal(reqs: list[Req], replicas: int) -> list[list[Req]]:
    return [reqs[k::replicas] for k in range(replicas)]


def _run(
    pool: Pool,
    reqs: list[Req],
    prefix_tokens: int,
    seed: int,
    name: str,
    out: Outcome,
    release_after=None,
    give_up_waiting: int | None = None,
) -> None:
    out.series[name] = []
    for k, part in enumerate(_deal(reqs, pool.replicas)):
        engine = Engine(
            pool.config,
            pool.step,
            drafter=pool.drafter,
            seed=seed + k,
            release_after=None if release_after is None else release_after(k),
            give_up_waiting=give_up_waiting,
        )
        out.series[name].append(engine.run(part, prefix_tokens))
        if engine.gave_up:
            out.gave_up = True
            return
    out.blocks[name] = pool.config.num_blocks


def simulate(
    requests: Requests,
    pool: Pool,
    *,
    seed: int = 0,
    prefill: Pool | None = None,
    transfer: Transfer | None = None,
    give_up_waiting: int | None = None,
) -> Outcome:
    """Serve every request; `prefill` and `transfer` together make the deployment disaggregated, `pool`
    then being its decode pool. With `give_up_waiting`, a replica whose queue passes it ends the run
    (`gave_up`: saturated, the times unfinished)."""
    n = len(requests)
    out = Outcome(
        list(requests.arrival_s),
        [0.0] * n,
        [0.0] * n,
        list(requests.prompt_tokens),
        list(requests.output_tokens),
        [0] * n,
    )
    reqs = [
        Req(
            i,
            requests.arrival_s[i],
            requests.prompt_tokens[i],
            requests.output_tokens[i],
            requests.prefix_group[i],
        )
        for i in range(n)
    ]
    if prefill is None or transfer is None:
        _run(pool, reqs, requests.prefix_tokens, seed, "replica", out, give_up_waiting=give_up_waiting)
    else:
        for r in reqs:
            r.max_out = 1  # the prefill instance samples one token, which the proxy drops
        sent, ended = [0.0] * n, [0.0] * n
        link_free = [0.0] * prefill.replicas

        def release_after(k: int):
            def sent_at(r: Req, end: float) -> float:
                start = max(end, link_free[k])
                seconds = (
                    transfer.latency_s + r.prompt * transfer.bytes_per_token / transfer.link_bytes_per_sec
                )
                link_free[k] = start + seconds
                sent[r.i], ended[r.i] = link_free[k], end
                return link_free[k]

            return sent_at

        _run(prefill, reqs, requests.prefix_tokens, seed, "prefill", out, release_after, give_up_waiting)
        if out.gave_up:
            return out
        for r in reqs:
            out.preemptions[r.i] = r.preemptions
        order = sorted(range(n), key=lambda i: sent[i])
        reqs = [
            Req(i, sent[i], requests.prompt_tokens[i], requests.output_tokens[i], remote=True) for i in order
        ]
        _run(pool, reqs, 0, seed + 7919, "decode", out, give_up_waiting=give_up_waiting)
        out.transfer_s = [sent[i] - ended[i] for i in range(n)]
    if out.gave_up:
        return out
    for r in reqs:
        out.first_token_s[r.i] = r.first
        out.finish_s[r.i] = r.finish
        out.preemptions[r.i] += r.preemptions
    return out
