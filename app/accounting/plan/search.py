"""The layout search: every valid way to run a step on the cluster, timed and sized, and the
fastest that fit.

The candidates are the product of tensor x context x pipeline degrees whose product divides the
GPU count (data parallel takes the rest), the pipeline's stage splits, expert-parallel degrees
dividing data parallel, ZeRO stages, micro-batch sizes dividing a data-parallel rank's share of
the batch, virtual stages dividing a stage's layers, and recompute settings, each narrowed by the
request's limits. A candidate no framework runs is refused with its reason (layout.REASONS) and
counted, not timed.

Context parallelism is tried, unless limits name its degrees, only where each rank keeps at least
CONTEXT_MIN_TOKENS of a sequence: below that the K/V exchange outweighs what it saves (Megatron-LM
and Llama 3 use it from 32k-token sequences up). Stage splits, unless limits name the first and
last stage's layers: the even one (stages differ by at most a layer, the first and last shorter,
sharding.split_layers) and, with three stages or more, the one with a layer fewer on each end
(where the embedding and the LM head sit).
"""

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product
from typing import NamedTuple

from app.accounting.errors import InvalidInput
from app.accounting.plan.layout import Layout, divisors, refusal
from app.accounting.training.sharding import interleaves, split_layers
from app.accounting.plan.step import StepTime, Workload, memory_of, step_time
from app.accounting.records import RECORD
from app.accounting.training.activations import TrainRecompute


@dataclass(frozen=True, slots=True)
class Limits:
    """Values each axis may take; None: any valid one."""

    tensor_parallel: tuple[int, ...] | None = None
    pipeline_parallel: tuple[int, ...] | None = None
    context_parallel: tuple[int, ...] | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    expert_parallel: tuple[int, ...] | None = None
    zero_stage: tuple[int, ...] = (0, 1, 2, 3)
    micro_batch: tuple[int, ...] | None = None
    virtual_stages: tuple[int, ...] | None = None
    recompute: tuple[TrainRecompute, ...] = ("none", "selective", "full")
    allow_tensor_parallel_across_nodes: bool = False
    sequence_parallel: bool = True
    """With tensor parallelism (Korthikanti et al. 2022): same bytes on the wire, 1/t of the
    norm and dropout activations."""


@dataclass(slots=True)
class Point:
    """One evaluated layout, for a scatter: its step time and bytes per GPU."""

    step_seconds: float
    memory_bytes: int
    fits: bool
    label: str

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class SearchResult:
    best: list[StepTime]
    """The fastest layouts that fit, fastest first."""
    evaluated: int
    fitting: int
    refused: dict[str, int]
    """Candidates not timed, by reason (layout.REASONS)."""
    least_memory: StepTime | None = None
    """When nothing fits: the layout needing the fewest bytes per GPU."""
    points: list[Point] = field(default_factory=list)

    __pydantic_config__ = RECORD


def label(lo: Layout) -> str:
    parts = [f"dp{lo.data_parallel}", f"tp{lo.tensor_parallel}", f"pp{lo.pipeline_parallel}"]
    if lo.context_parallel > 1:
        parts.insert(2, f"cp{lo.context_parallel}")
    if len(set(lo.pipeline_split)) > 1:
        parts.append("split " + "/".join(map(str, lo.pipeline_split)))
    if lo.virtual_stages > 1:
        parts.append(f"v{lo.virtual_stages}")
    if lo.expert_parallel > 1:
        parts.append(f"ep{lo.expert_parallel}")
    parts += [f"zero{lo.zero_stage}", f"mb{lo.micro_batch}x{lo.micro_batches}", lo.recompute]
    return " ".join(parts)


def _allowed(values: list[int], limit: tuple[int, ...] | None) -> list[int]:
    return values if limit is None else [v for v in values if v in limit]


# Each timed layout costs about 0.1 ms here (bench/plan_search.py): a search that would time more
# is refused before it starts, naming the limits that narrow it.
MAX_TIMED = 50_000


def search(w: Workload, limits: Limits, *, top_k: int = 5, points: bool = False) -> SearchResult:
    cfg, g = w.model, w.cluster.gpus_per_node
    if (size := _upper_bound(w, limits)) > MAX_TIMED:
        raise InvalidInput("limits", f"the search would time up to {size:,} layouts (at most "
                                     f"{MAX_TIMED:,}): narrow it with limits (tensor_parallel, "
                                     "pipeline_parallel, micro_batch, virtual_stages, zero_stage, recompute)")
    refused: Counter[str] = Counter()
    timed: list[StepTime] = []
    dots: list[Point] = []
    for s in _splits(w, limits):
        inner = list(product(limits.zero_stage, s.batches, s.chunks, limits.recompute))
        for ep in s.eps:
            why = refusal(cfg, tp=s.tp, pp=s.pp, dp=s.dp, ep=ep, gpus_per_node=g,
                          tp_across_nodes=limits.allow_tensor_parallel_across_nodes, seq_len=w.seq_len, cp=s.cp)
            if why or s.stage_split is None:
                refused[why or "pipeline_layers"] += len(inner)
                continue
            for zero, b, v, rec in inner:
                why = _inner_refusal(pp=s.pp, b=b, v=v, m=s.share // b if b else 0, split=s.stage_split)
                if why:
                    refused[why] += 1
                    continue
                lo = Layout(data_parallel=s.dp, tensor_parallel=s.tp, pipeline_parallel=s.pp,
                            expert_parallel=ep,
                            zero_stage=zero, micro_batch=b, micro_batches=s.share // b, virtual_stages=v,
                            recompute=rec, sequence_parallel=limits.sequence_parallel and s.tp > 1,
                            context_parallel=s.cp, pipeline_split=s.stage_split if s.pp > 1 else ())
                st = step_time(w, lo, memory_of(w, lo))
                timed.append(st)
                if points:
                    dots.append(Point(st.step_seconds, st.memory_bytes, st.fits, label(lo)))
    fitting = sorted((s for s in timed if s.fits), key=lambda s: (s.step_seconds, s.memory_bytes))
    closest = None if fitting or not timed else min(timed, key=lambda s: (s.memory_bytes, s.step_seconds))
    return SearchResult(best=fitting[:top_k], evaluated=len(timed), fitting=len(fitting),
                        refused=dict(sorted(refused.items())), least_memory=closest, points=dots)


class _Split(NamedTuple):
    """Tensor x context x pipeline degrees and a stage split, data parallelism the rest, and the
    values the inner axes may take."""

    tp: int
    cp: int
    pp: int
    stage_split: tuple[int, ...] | None
    """Layers per stage; None when the limits' split does not fit this pp (refused)."""
    dp: int
    share: int
    """Sequences per data-parallel rank (0 when dp does not divide the batch)."""
    eps: list[int]
    batches: list[int]
    """Micro-batch sizes dividing share; [0] (refused as "batch") when dp does not divide the batch."""
    chunks: list[int]


CONTEXT_MIN_TOKENS = 8192
"""Tokens of a sequence each context-parallel rank keeps, at least, for the search to try it."""


def _contexts(w: Workload, limits: Limits, n: int) -> list[int]:
    if limits.context_parallel is not None:
        return [c for c in divisors(n) if c in limits.context_parallel]
    return [c for c in divisors(n) if c == 1 or (w.seq_len % (2 * c) == 0 and w.seq_len // c >= CONTEXT_MIN_TOKENS)]


def stage_splits(n_layers: int, pp: int, limits: Limits) -> list[tuple[int, ...] | None]:
    """The stage splits tried for pp stages (module docstring); [None] when the limits' split
    cannot be laid over pp stages."""
    if pp == 1:
        return [(n_layers,)]
    try:
        if limits.first_stage_layers is not None or limits.last_stage_layers is not None:
            return [split_layers(n_layers, pp, limits.first_stage_layers, limits.last_stage_layers)]
        even = split_layers(n_layers, pp)
    except InvalidInput:
        return [None]
    out = [even]
    if pp > 2 and min(even[0], even[-1]) > 1:
        try:
            out.append(split_layers(n_layers, pp, even[0] - 1, even[-1] - 1))
        except InvalidInput:
            pass
    return out


def _splits(w: Workload, limits: Limits) -> Iterator[_Split]:
    cfg, n = w.model, w.cluster.gpus
    for tp in _allowed(divisors(n), limits.tensor_parallel):
        for cp in _contexts(w, limits, n // tp):
            for pp in _allowed(divisors(n // (tp * cp)), limits.pipeline_parallel):
                dp = n // (tp * cp * pp)
                share, whole = divmod(w.global_batch, dp)
                share = 0 if whole else share
                for split in stage_splits(cfg.n_layers, pp, limits) if pp <= cfg.n_layers else [None]:
                    chunks = [1] if split is None else sorted(
                        v for v in {*divisors(max(split)), *divisors(split[0] + 1)}
                        if pp > 1 and interleaves(split, v)) or [1]
                    yield _Split(tp, cp, pp, split, dp, share,
                                 _allowed(divisors(dp) if cfg.moe else [1], limits.expert_parallel),
                                 _allowed(divisors(share) if share else [0], limits.micro_batch),
                                 _allowed(chunks, limits.virtual_stages) if limits.virtual_stages is None
                                 else list(limits.virtual_stages))  # named ones are tried, or refused


def _upper_bound(w: Workload, limits: Limits) -> int:
    """Layouts the search could time: its candidates, before the refusals that need a layout."""
    per = len(limits.zero_stage) * len(limits.recompute)
    inside = w.cluster.gpus_per_node
    return sum(len(s.eps) * len(s.batches) * len(s.chunks) * per for s in _splits(w, limits)
               if (s.tp <= inside or limits.allow_tensor_parallel_across_nodes)
               and s.share and s.stage_split is not None)


def _inner_refusal(*, pp: int, b: int, v: int, m: int, split: tuple[int, ...]) -> str | None:
    if not b:
        return "batch"
    if v > 1 and (pp == 1 or not interleaves(split, v) or m % pp):
        return "virtual_stages"
    return None
