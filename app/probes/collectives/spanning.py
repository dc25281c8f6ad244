"""The collectives probe across boxes, torch-free: each box's link and each pair's link measured
alone (app/bench/collectives_nodes.py), fitted, and the whole world's collectives predicted
from those two fits beside what was measured.

Two compositions of the same measured links, since they are not the same algorithm:
- hierarchical, as NCCL runs a collective across nodes (app/accounting/comm/collectives.py): a
  reduce-scatter inside each box, the shard between boxes, an all-gather inside again;
- flat, a ring over every rank where each step waits on the slowest link, as gloo runs it (gloo
  has no hierarchical algorithm: its all_reduce is one ring or halving-doubling over all ranks).
On GPUs, a third line: the catalogue's node link and its reference network (one NIC share per GPU)
through the same engine. That one is a prediction for NCCL across real nodes, and stays labelled
so until such a run is measured. Seconds, bytes and bytes/s per rank per direction.
"""

from dataclasses import dataclass
from typing import Any, Literal

from app.accounting import hardware
from app.accounting.comm import collectives as cc
from app.accounting.comm import links
from app.accounting.comm.collectives import FittedLink
from app.accounting.records import RECORD
from app.probes.results import Stats, stats

PREDICTION = cc.ACROSS_NODES


@dataclass(slots=True)
class LevelPoint:
    size_bytes: int
    time: Stats
    """Per timed run the slowest rank's seconds."""
    busbw_bytes_per_sec: float
    """S / median x all_reduce's bus factor over this level's ranks."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class LevelSweep:
    """One box's ranks alone (what: node), or the first ranks of two boxes (what: link)."""

    what: Literal["node", "link"]
    nodes: list[int]
    boxes: list[str]
    ranks: int
    points: list[LevelPoint]
    fit: FittedLink
    """all_reduce's latency-bandwidth fit over this level's points."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class SpannedPoint:
    """One point of the sweep over every rank, beside its predictions from the parts."""

    collective: str
    size_bytes: int
    measured_seconds: float
    hierarchical_seconds: float
    """NCCL's hierarchical scheme over the slowest box's link and the slowest pair's link."""
    hierarchical_error: float
    """hierarchical / measured - 1."""
    flat_seconds: float
    """A ring over every rank, each step at the slowest pair's link (gloo's kind)."""
    flat_error: float
    catalogue_seconds: float | None
    """GPUs: the catalogue's links through the engine (PREDICTION); null on a CPU."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Spanning:
    nodes: int
    ranks_per_node: int
    boxes: list[str]
    """By node rank, as the rendezvous numbered them."""
    per_node: list[LevelSweep]
    """Empty with one rank per box."""
    per_link: list[LevelSweep]
    """One per pair of boxes."""
    points: list[SpannedPoint]
    catalogue: str | None
    """What the catalogue line assumes, labelled a prediction; null on a CPU."""

    __pydantic_config__ = RECORD


def _level(what: str, raw: dict[str, Any], nodes: list[int], boxes: list[str]) -> LevelSweep:
    ranks = raw["ranks"]
    factor = cc.bus_factor("all_reduce", ranks)
    points = [
        LevelPoint(p["size_bytes"], s := stats(p["seconds"]), p["size_bytes"] / s.median * factor)
        for p in raw["points"]
    ]
    fit = cc.fit_link("all_reduce", ranks, [p.size_bytes for p in points], [p.time.median for p in points])
    return LevelSweep(what, nodes, boxes, ranks, points, fit)  # type: ignore[arg-type]


def _slowest(levels: list[LevelSweep]) -> cc.Link:
    """The level whose fit is slowest at the largest size: the one every collective waits for."""
    size = max(p.size_bytes for level in levels for p in level.points)
    slowest = max(levels, key=lambda level: level.fit.seconds(size))
    fitted = slowest.fit
    if fitted.bytes_per_sec is None:  # the times did not grow with size: latency alone
        return cc.Link(float("inf"), fitted.latency_s, achieved=True)
    return cc.Link(fitted.bytes_per_sec, fitted.latency_s, achieved=True)


def _catalogue(device_name: str | None) -> tuple[cc.Link, cc.Link, str] | None:
    acc = hardware.for_device(device_name) if device_name else None
    if acc is None:
        return None
    intra = links.node_link(acc, None, None, cc.NVLINK_STEP_LATENCY_S)
    inter = links.network_link(acc, None, None, cc.NETWORK_STEP_LATENCY_S)
    if intra is None or inter is None:
        return None
    return (
        intra,
        inter,
        (
            f"{acc.id}: node link {intra.bytes_per_sec / 1e9:g} GB/s, network "
            f"{inter.bytes_per_sec / 1e9:g} GB/s per GPU; {PREDICTION}"
        ),
    )


def summarize(
    raw: dict[str, Any] | None, world: list[tuple[str, int, float]], device_name: str | None
) -> Spanning | None:
    """`raw`: rank 0's per-node and per-link sweeps (None on one box); `world`: (collective, S,
    median seconds) of the sweep over every rank; `device_name`: a GPU's, for the catalogue line."""
    if raw is None:
        return None
    nodes, g = raw["nodes"], raw["ranks_per_node"]
    per_node = [_level("node", n, [n["node"]], [n["box"]]) for n in raw["per_node"]]
    per_link = [_level("link", k, k["nodes"], k["boxes"]) for k in raw["per_link"]]
    inter = _slowest(per_link)
    intra = _slowest(per_node) if per_node else inter
    catalogue = _catalogue(device_name)
    ranks = nodes * g
    points = []
    for op, size, measured in world:
        # Measured links are achieved bandwidths, so rings at those rates (achievable=False), and no
        # base latency beyond the fits' intercepts.
        hier = cc.collective_time(
            op, size, ranks, gpus_per_node=g, intra=intra, inter=inter, base_latency_s=0.0, achievable=False
        ).seconds
        flat = cc.collective_time(
            op, size, ranks, gpus_per_node=ranks, intra=inter, base_latency_s=0.0, achievable=False
        ).seconds
        cat = (
            None
            if catalogue is None
            else cc.collective_time(
                op, size, ranks, gpus_per_node=g, intra=catalogue[0], inter=catalogue[1]
            ).seconds
        )
        points.append(
            SpannedPoint(op, size, measured, hier, hier / measured - 1, flat, flat / measured - 1, cat)
        )
    return Spanning(
        nodes, g, list(raw["boxes"]), per_node, per_link, points, None if catalogue is None else catalogue[2]
    )
