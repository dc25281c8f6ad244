"""Time of one collective of S bytes over n ranks, as NCCL runs it, in a node or across nodes.

nccl-tests (PERFORMANCE.md) reports algbw = S / t and busbw = algbw x factor(n): the factor
turns the algorithm's bandwidth into the bytes each rank's link carries, so busbw compares
with a link's peak whatever n is. S is nccl-tests' size: the buffer each rank holds for
all_reduce and broadcast, and the whole output (n pieces of S/n) for all_gather, reduce_scatter
and all_to_all.

    all_reduce       2 (n - 1) / n     reduce-scatter, then all-gather
    all_gather       (n - 1) / n
    reduce_scatter   (n - 1) / n
    all_to_all       (n - 1) / n
    broadcast        1

A ring of n ranks takes (n - 1) steps per pass (all_reduce two passes), each paying the link's
latency once, after a fixed launch latency: t = base + steps x latency + factor x S / bandwidth,
with bandwidth per GPU per direction. Latencies are NCCL's own tuning model's for rings with
the Simple protocol, what large messages use (src/graph/tuning.cc: baseLat 8.4 us; hwLat per
step NVLink 3.4 us, PCIe 5.7 us, network 9.6 us in NCCL 2.16, 14 us since 2.18).

The bandwidth is what NCCL achieves, not the line rate (app/accounting/comm/achievable.py): a
link's line rate x the share its kind delivers (a ring over NVLink 4 about 82%). On an NVSwitch
node of Hopper or Blackwell GPUs an all_reduce inside the node runs NVLink SHARP when that is
faster (it is above 4 GPUs): each link carries S (g + 1) / g at NVLS's share, after NCCL's NVLS
latency. Between nodes an all_reduce runs a ring or a tree, whichever is faster. A link given as
`achieved` (a measured busbw, or a fit to measured times) is taken as is; `achievable=False`
times everything at line rate with rings only.

Across nodes (n = nodes x g GPUs per node) the collective is hierarchical, as NCCL runs it over
NVLink inside a node and the network between: all_reduce is a reduce-scatter inside each node,
an all_reduce of each GPU's S/g shard between nodes (every GPU on its own NIC share), and an
all-gather inside the node; all_gather and reduce_scatter run their node and network levels in
turn; all_to_all sends each destination's piece over the link that reaches it, both at once;
broadcast pipelines S through the slower link.
"""

import math
from dataclasses import dataclass
from typing import Literal

from app.accounting.comm import achievable as ach
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD

# NCCL src/graph/tuning.cc (ring, Simple protocol): microseconds, here in seconds.
RING_BASE_LATENCY_S = 8.4e-6
NVLINK_STEP_LATENCY_S = 3.4e-6
PCIE_STEP_LATENCY_S = 5.7e-6
NETWORK_STEP_LATENCY_S = 9.6e-6
# The LL protocol's, which NCCL's tuner picks for the small messages of a decode step (a few KiB):
# ring base 6.6 us, then 0.6 us per step over NVLink and 1.0 us over PCIe (same file, NCCL 2.19+).
LL_RING_BASE_LATENCY_S = 6.6e-6
NVLINK_LL_STEP_LATENCY_S = 0.6e-6
PCIE_LL_STEP_LATENCY_S = 1.0e-6
# DGX H100 / HGX H100 boards: 8 ConnectX-7 NICs at 400 Gb/s (InfiniBand NDR), one per GPU:
# 400e9 / 8 = 50e9 bytes/s each way (NVIDIA DGX H100 user guide, "Hardware Overview").
NDR_BYTES_PER_SEC_PER_GPU = 50e9

# Every figure across nodes says so until an NCCL run across real nodes is measured (docs/clusters.md).
ACROSS_NODES = ("across nodes, a prediction: no NCCL run across real nodes has been measured by Tally "
                "yet, so the network's figures are the catalogue's or the request's, not held to a run")

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
COLLECTIVES: tuple[Collective, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                       "broadcast")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw for `op` over n ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise InvalidInput("collective", f"must be one of {', '.join(COLLECTIVES)}, got {op!r}")


@dataclass(frozen=True, slots=True)
class Link:
    bytes_per_sec: float
    """Per GPU, one direction: the line rate, or (achieved) a bus bandwidth already achieved."""
    latency_s: float
    """Paid once per ring step."""
    kind: ach.Kind | None = None
    """What the link is made of, which sets the share of the line rate NCCL gets; None: a line rate
    of no named kind (a node link's ~80%, a network's 96%)."""
    achieved: bool = False
    """bytes_per_sec is an achieved bus bandwidth (measured, fitted or given as such): not derated."""


@dataclass(slots=True)
class Level:
    """One level of a hierarchical collective."""

    name: str
    """intra_node or inter_node."""
    ranks: int
    bytes: float
    """Bytes each rank's link carries at this level (NVLS: S (g + 1) / g)."""
    steps: int
    """Latencies paid: ring steps, the tree's 2 log2(nodes), or 1 for NVLS."""
    seconds: float
    algorithm: str
    """ring, nvls, tree or p2p (all_to_all), as NCCL would run this level."""
    efficiency: float
    """The share of the link's bytes_per_sec this level runs at (1: line rate, or given as achieved)."""
    bytes_per_sec: float
    """The bandwidth this level runs at: the link's x efficiency."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class CollectiveTime:
    collective: str
    bytes: int
    """nccl-tests' size S."""
    ranks: int
    nodes: int
    gpus_per_node: int
    seconds: float
    """The levels' times (all_to_all: the slower level's) plus the base latency (none for NVLS,
    whose latency is its level's); 0 for one rank."""
    algbw_bytes_per_sec: float
    """S / seconds."""
    busbw_bytes_per_sec: float
    """algbw x bus_factor: comparable with one link's bandwidth (NVLS reads above the line rate)."""
    bus_factor: float
    algorithm: str
    """The levels' algorithms, node level first (e.g. "nvls", "ring + tree"); "none" for one rank."""
    levels: list[Level]
    assumptions: list[str]

    __pydantic_config__ = RECORD


ALGORITHMS = ("NCCL's algorithms: rings, each step paying the link's latency once; NVLink SHARP for an "
              "all_reduce inside one Hopper or Blackwell NVSwitch node, and a ring or tree between nodes, "
              "where faster")


def _share(link: Link, *, network: bool, achievable: bool) -> ach.Efficiency:
    if not achievable:
        return ach.LINE_RATE
    if link.achieved:
        return ach.ACHIEVED
    return ach.ring(link.kind, network=network)


def _level(name: str, ranks: int, sent: float, steps: int, link: Link, share: ach.Efficiency,
           algorithm: str) -> Level:
    bw = link.bytes_per_sec * share.fraction
    return Level(name=name, ranks=ranks, bytes=sent, steps=steps, seconds=steps * link.latency_s + sent / bw,
                 algorithm=algorithm, efficiency=share.fraction, bytes_per_sec=bw)


def _nvls(g: int, s: float, link: Link, share: ach.Efficiency) -> Level:
    """All_reduce by NVLink SHARP over g GPUs of one node: S (g + 1) / g on each link at B (nccl-tests
    PR 239: algbw = B g / (g + 1)), after NCCL's NVLS latency, which replaces the ring's."""
    bw = link.bytes_per_sec * share.fraction
    sent = s * (g + 1) / g
    return Level(name="intra_node", ranks=g, bytes=sent, steps=1, seconds=ach.NVLS_LATENCY_S + sent / bw,
                 algorithm="nvls", efficiency=share.fraction, bytes_per_sec=bw)


def _tree_steps(nodes: int) -> int:
    """A double binary tree's latencies for one all_reduce: up and down, log2(nodes) each (NCCL
    tuning.cc: 2 x log2i(nNodes) x interLat; log2i rounds down)."""
    return 2 * max(1, int(math.log2(nodes)))


def collective_time(op: str, size_bytes: int, ranks: int, *, gpus_per_node: int, intra: Link,
                    inter: Link | None = None, base_latency_s: float = RING_BASE_LATENCY_S,
                    achievable: bool = True) -> CollectiveTime:
    """Seconds of one `op` of nccl-tests' size S over `ranks` GPUs, `gpus_per_node` to a node, with
    the algorithm NCCL would pick at each level; `achievable=False` times rings at line rate."""
    factor = bus_factor(op, ranks)
    if ranks < 1:
        raise InvalidInput("ranks", f"must be at least 1, got {ranks}")
    g = min(gpus_per_node, ranks)
    if ranks % g:
        raise InvalidInput("ranks", f"{ranks} ranks do not fill whole nodes of {gpus_per_node} GPUs")
    nodes = ranks // g
    if nodes > 1 and inter is None:
        raise InvalidInput("inter_node_bytes_per_sec", "ranks span nodes: give the network's bandwidth")
    s = float(size_bytes)
    node_share = _share(intra, network=False, achievable=achievable)
    net_share = _share(inter, network=True, achievable=achievable) if inter is not None else None
    notes: list[str] = []
    levels: list[Level] = []
    seconds, base = 0.0, base_latency_s
    if ranks == 1:  # nothing moves
        pass
    elif op == "all_to_all":
        levels.append(_level("intra_node", g, s * (g - 1) / ranks, ring_steps(op, g), intra, node_share,
                             "p2p"))
        if nodes > 1:
            levels.append(_level("inter_node", ranks, s * (ranks - g) / ranks, ring_steps(op, nodes), inter,
                                 net_share, "p2p"))
        seconds = max((level.seconds for level in levels), default=0.0)  # both links at once
    elif op == "broadcast":
        # Pipelined: every level pays its ring's latencies, and S crosses the slowest link once.
        links = [("intra_node", g, intra, node_share)] + (
            [("inter_node", nodes, inter, net_share)] if nodes > 1 else [])
        slowest = min(links, key=lambda item: item[2].bytes_per_sec * item[3].fraction)[0]
        for name, r, link, share in links:
            bw = link.bytes_per_sec * share.fraction
            carry = s / bw if name == slowest else 0.0
            levels.append(Level(name=name, ranks=r, bytes=s, steps=ring_steps(op, r),
                                seconds=ring_steps(op, r) * link.latency_s + carry, algorithm="ring",
                                efficiency=share.fraction, bytes_per_sec=bw))
        seconds = sum(level.seconds for level in levels)
    else:
        inside = (g - 1) / g * s  # reduce-scatter or all-gather of S inside a node
        passes = 2 if op == "all_reduce" else 1
        if g > 1:
            levels.append(_level("intra_node", g, passes * inside, ring_steps(op, g), intra, node_share,
                                 "ring"))
            nvls_share = ach.nvls(intra.kind) if achievable and not intra.achieved else None
            if op == "all_reduce" and nodes == 1 and nvls_share is not None:
                # NCCL's tuner runs the faster; NVLS pays no ring base latency.
                sharp = _nvls(g, s, intra, nvls_share)
                if sharp.seconds < levels[0].seconds + base_latency_s:
                    levels[0], base = sharp, 0.0
                    notes.append(f"NVLink SHARP (NVLS) all_reduce: B = {nvls_share.fraction:.0%} of the line "
                                 f"rate, algbw = B g / (g + 1), {ach.NVLS_LATENCY_S * 1e6:g} us once "
                                 f"({nvls_share.source})")
        if nodes > 1:
            shard = s / g
            ring = _level("inter_node", nodes, passes * (nodes - 1) / nodes * shard, ring_steps(op, nodes),
                          inter, net_share, "ring")
            if op == "all_reduce" and achievable:
                tree_share = ach.Efficiency(net_share.fraction * ach.TREE_SHARE, net_share.source)
                tree = _level("inter_node", nodes, 2 * shard, _tree_steps(nodes), inter, tree_share, "tree")
                if tree.seconds < ring.seconds:
                    ring = tree
                    notes.append(f"between nodes a double binary tree: {tree.steps} network latencies "
                                 f"where a ring pays {ring_steps(op, nodes)}, each node's shard up and down "
                                 f"at {ach.TREE_SHARE:.0%} of the ring's bandwidth "
                                 "(NCCL src/graph/tuning.cc)")
            levels.append(ring)
        seconds = sum(level.seconds for level in levels)
    seconds += base if ranks > 1 else 0.0
    algbw = s / seconds if seconds else 0.0
    return CollectiveTime(
        collective=op, bytes=size_bytes, ranks=ranks, nodes=nodes, gpus_per_node=g, seconds=seconds,
        algbw_bytes_per_sec=algbw, busbw_bytes_per_sec=algbw * factor, bus_factor=factor,
        algorithm=" + ".join(dict.fromkeys(level.algorithm for level in levels)) or "none", levels=levels,
        assumptions=[ALGORITHMS if achievable else "rings at line rate (achievable=False), each step paying "
                     "the link's latency once",
                     "bandwidths are per GPU per direction; every GPU of a node has its own share of "
                     "the network (one NIC per GPU, as on HGX boards)",
                     *_shares(levels, intra, inter, node_share, net_share), *notes,
                     *([ACROSS_NODES] if nodes > 1 else [])])


def _shares(levels: list[Level], intra: Link, inter: Link | None, node: ach.Efficiency,
            net: ach.Efficiency | None) -> list[str]:
    """One line per link used: the share of its bytes_per_sec the collective runs at, and why."""
    said = []
    for name, link, share in (("intra_node", intra, node), ("inter_node", inter, net)):
        if link is None or share is None or not any(lv.name == name for lv in levels):
            continue
        said.append(f"{name}: {share.fraction:.0%} of {link.bytes_per_sec / 1e9:g} GB/s for rings "
                    f"({share.source})")
    return said


def small_all_reduce_seconds(ranks: int, *, nvlink: bool) -> float:
    """Latency of an all_reduce too small for its bytes to count (a decode step's activations): NCCL's
    LL ring, its base latency and one hop latency per step of 2 (n - 1); 0 on one rank."""
    if ranks <= 1:
        return 0.0
    step = NVLINK_LL_STEP_LATENCY_S if nvlink else PCIE_LL_STEP_LATENCY_S
    return LL_RING_BASE_LATENCY_S + ring_steps("all_reduce", ranks) * step


def ring_steps(op: str, n: int) -> int:
    """Ring steps of `op` over n ranks in one node, each paying the link's latency once (as
    collective_time counts them): all_reduce 2 (n - 1), the others n - 1."""
    bus_factor(op, n)  # refuses an unknown op
    return 2 * (n - 1) if op == "all_reduce" else n - 1


@dataclass(slots=True)
class FittedLink:
    """A link's latency and bandwidth fitted to measured times of one collective (in one node)."""

    collective: str
    ranks: int
    steps: int
    latency_s: float
    """Per ring step: the fit's intercept over `steps`."""
    bytes_per_sec: float | None
    """Per rank per direction; null when the times did not grow with size (no bandwidth term)."""
    points: int
    rms_relative_error: float
    """sqrt(mean((predicted / measured - 1)^2)) over the points fitted."""

    __pydantic_config__ = RECORD

    def link(self) -> Link | None:
        return None if self.bytes_per_sec is None else Link(self.bytes_per_sec, self.latency_s, achieved=True)

    def seconds(self, size_bytes: int) -> float:
        """The fitted time of S bytes: collective_time over this link in one node, no base latency
        (the intercept holds it); the latency alone where no bandwidth was fitted."""
        link = self.link()
        if link is None:
            return self.steps * self.latency_s
        return collective_time(self.collective, size_bytes, self.ranks, gpus_per_node=self.ranks, intra=link,
                               base_latency_s=0.0).seconds


def fit_link(op: str, ranks: int, sizes_bytes: list[int], seconds: list[float]) -> FittedLink:
    """Least squares of t = latency x steps + bus_factor x S / bytes_per_sec over measured
    (S, t), minimising sum((fitted - t)^2 / t): between absolute errors, where the largest size
    alone would set the line, and relative ones, where one slow small message (a scheduler's
    hiccup is a whole run there) pulls the bandwidth as much as a large one. The intercept and
    slope are held non-negative: a negative intercept refits through the origin, a non-positive
    slope refits a constant."""
    if len(sizes_bytes) != len(seconds) or not seconds or min(seconds) <= 0:
        raise InvalidInput("seconds", "give one positive time per size")
    steps = ring_steps(op, ranks)
    factor = bus_factor(op, ranks)
    # Weighted rows [w, x w] . [c0, c1] ~ t w, w = 1 / sqrt(t), x = factor x S: the 2 x 2 normal
    # equations [[suu, suv], [suv, svv]] c = [sub, svb].
    x = [factor * s for s in sizes_bytes]
    u = [t ** -0.5 for t in seconds]
    v = [xi * ui for xi, ui in zip(x, u, strict=True)]
    b = [t ** 0.5 for t in seconds]
    def dot(a: list[float], c: list[float]) -> float:
        return sum(x * y for x, y in zip(a, c, strict=True))

    suu, svv, suv, sub, svb = dot(u, u), dot(v, v), dot(u, v), dot(u, b), dot(v, b)
    det = suu * svv - suv * suv
    singular = det <= 1e-12 * suu * svv  # one size only: latency and bandwidth cannot be told apart
    c0, c1 = (0.0, 0.0) if singular else ((sub * svv - svb * suv) / det, (svb * suu - sub * suv) / det)
    if c1 <= 0 and not singular:
        c0, c1 = sub / suu, 0.0  # no growth with size: a constant
    elif c0 < 0 or singular:
        c0, c1 = 0.0, svb / svv  # through the origin
    fitted = [c0 + c1 * xi for xi in x]
    rms = (sum((f / t - 1) ** 2 for f, t in zip(fitted, seconds, strict=True)) / len(seconds)) ** 0.5
    return FittedLink(collective=op, ranks=ranks, steps=steps, latency_s=c0 / steps if steps else 0.0,
                      bytes_per_sec=1.0 / c1 if c1 > 0 else None, points=len(seconds), rms_relative_error=rms)
