"""The collectives probe across boxes: the two links a hierarchical collective crosses, each
measured alone, so the whole world's figures stand beside a prediction built from its parts.

After the sweep over every rank (app/bench/collectives.py), with the boxes' ranks numbered
node by node (the elastic launcher's rule: global rank = node x ranks per node + local rank):
- per node: an all_reduce sweep over each box's own ranks, every box at once (the link inside
  a box: NVLink or PCIe on GPUs, shared memory on a CPU);
- per link: an all_reduce sweep between the first ranks of each pair of boxes, one pair at a
  time (the network between them).
All_reduce alone: it fits each link's latency and bandwidth (app/accounting/comm/collectives.py's
fit_link), which time every collective. Times are each run's slowest rank, medians over runs.
"""

import os
import socket
from collections.abc import Callable
from itertools import combinations
from typing import Any

import torch
import torch.distributed as dist

from app.probes.collectives.params import CollectivesParams, CollectivesPlan


def _box() -> str:
    return os.environ.get("TALLY_BOX_NAME") or socket.gethostname()


def _all_reduce_sweep(
    p: CollectivesParams,
    plan: CollectivesPlan,
    group: Any,
    members: int,
    device: torch.device,
    dtype: torch.dtype,
    timed: Callable,
    buffers: Callable,
) -> list[dict]:
    """[{size_bytes, seconds}] of all_reduce over `group` (this rank one of its `members`)."""
    width = torch.empty((), dtype=dtype).element_size()
    out = []
    for size in plan.sizes_bytes:
        elements = size // width
        if elements == 0:
            continue
        _, _, run = buffers("all_reduce", elements, members, dtype, device, group)
        for _ in range(p.warmup_iterations):
            run()
        dist.barrier(group=group)
        seconds = torch.tensor(timed(run, device, p.iterations), dtype=torch.float64, device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=group)
        out.append({"size_bytes": elements * width, "seconds": seconds.tolist()})
    return out


def sweep(
    rank: int,
    world: int,
    p: CollectivesParams,
    plan: CollectivesPlan,
    device: torch.device,
    dtype: torch.dtype,
    *,
    timed: Callable,
    buffers: Callable,
) -> dict | None:
    """Per-node and per-link sweeps when the ranks span boxes (GROUP_WORLD_SIZE, set by the
    elastic launcher, above 1): rank 0 gets {nodes, ranks_per_node, boxes, per_node, per_link},
    the others {}; None on one box. Every rank calls it: groups are made by all."""
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    if nodes < 2:
        return None
    g = world // nodes
    boxes: list[Any] = [None] * world
    dist.all_gather_object(boxes, _box())
    mine: dict[str, Any] = {}
    node_groups = (
        [dist.new_group(ranks=list(range(k * g, (k + 1) * g))) for k in range(nodes)] if g > 1 else []
    )
    if node_groups:
        k = rank // g
        points = _all_reduce_sweep(p, plan, node_groups[k], g, device, dtype, timed, buffers)
        if rank % g == 0:
            mine["node"] = {"node": k, "box": boxes[rank], "ranks": g, "points": points}
    for a, b in combinations(range(nodes), 2):
        pair = [a * g, b * g]
        group = dist.new_group(ranks=pair)
        if rank in pair:
            points = _all_reduce_sweep(p, plan, group, 2, device, dtype, timed, buffers)
            if rank == pair[0]:
                mine.setdefault("links", []).append(
                    {"nodes": [a, b], "boxes": [boxes[pair[0]], boxes[pair[1]]], "ranks": 2, "points": points}
                )
        dist.barrier()  # one pair at a time: no two share a box's network meanwhile
    gathered: list[Any] = [None] * world if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if rank != 0:
        return {}
    return {
        "nodes": nodes,
        "ranks_per_node": g,
        "boxes": [boxes[k * g] for k in range(nodes)],
        "per_node": sorted((m["node"] for m in gathered if "node" in m), key=lambda n: n["node"]),
        "per_link": [link for m in gathered for link in m.get("links", [])],
    }
