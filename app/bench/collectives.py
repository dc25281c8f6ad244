"""collectives: nccl-tests' sweep on torch.distributed. Each collective at each size over every
rank (app/bench/dist.py: NCCL on GPUs, gloo on the CPU): its values checked once, as nccl-tests'
-c does, then warm-ups and timed runs; algbw and busbw as nccl-tests defines them
(doc/PERFORMANCE.md), beside a latency-bandwidth model fitted to this run's own times and, on a
GPU the catalogue lists, the communication engine at the catalogue's link.

Sizes are nccl-tests' S: each rank's buffer for all_reduce and broadcast; for all_gather the
output, for reduce_scatter the input, for all_to_all the send buffer, each n pieces of S / n
(nccl-tests' AllGatherGetBw and ReduceScatterGetBw count the piece times n). S is rounded down
to whole elements, and to a multiple of n where it is split.
"""

import os
import time
from typing import Any

import torch
import torch.distributed as dist
from pydantic import TypeAdapter

from app.accounting.comm import collectives as cc
from app.bench import collectives_nodes as nodes
from app.bench import contention, energy, env
from app.bench import dist as launcher
from app.bench import nodes as multinode
from app.bench.common import to_json
from app.bench.timer import summarize
from app.probes import protocol
from app.probes.collectives import params as spec
from app.probes.collectives import spanning as span
from app.probes.collectives.params import CollectivesParams
from app.probes.collectives.result import CatalogueLink, CollectivePoint, CollectivesResult
from app.probes.energy import Energy
from app.probes.results import Contention, Environment, Skipped

ENVIRONMENT = TypeAdapter(Environment)
ENERGY = TypeAdapter(Energy | None)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SPLIT = ("all_gather", "reduce_scatter", "all_to_all")
"""Collectives whose S is n pieces of S / n."""
CHUNK = 2**24
"""Elements filled or checked at a time, so the check's index tensors stay small beside S."""
PATTERN = 5
"""Rank r's element i holds ((i + 3 r) mod 5) + 1: small integers whose sums over 64 ranks (at
most 320) every dtype here holds exactly, so the check compares exactly."""


def _pattern(rank: int, start: int, length: int, device: torch.device) -> torch.Tensor:
    """Elements start .. start + length of rank's input, as int32 (length,)."""
    i = torch.arange(start, start + length, device=device, dtype=torch.int32)
    return (i + 3 * rank) % PATTERN + 1


def _expected(op: str, rank: int, world: int, start: int, length: int, piece: int,
              device: torch.device) -> torch.Tensor:
    """What rank's output holds at elements start .. start + length, int32 (length,)."""
    if op == "broadcast":
        return _pattern(0, start, length, device)
    if op == "all_reduce":
        return sum(_pattern(q, start, length, device) for q in range(world))
    g = torch.arange(start, start + length, device=device, dtype=torch.int64)
    j, k = g // piece, g % piece  # the output's piece j, element k of it
    if op == "reduce_scatter":  # out[k] = sum over q of in_q[rank * piece + k]
        return sum(((rank * piece + g + 3 * q) % PATTERN + 1) for q in range(world)).to(torch.int32)
    if op == "all_gather":  # out[j piece + k] = in_j[k]
        return ((k + 3 * j) % PATTERN + 1).to(torch.int32)
    return ((rank * piece + k + 3 * j) % PATTERN + 1).to(torch.int32)  # all_to_all: in_j[rank piece + k]


def _fill(buffer: torch.Tensor, rank: int) -> None:
    for start in range(0, buffer.numel(), CHUNK):
        n = min(CHUNK, buffer.numel() - start)
        buffer[start:start + n] = _pattern(rank, start, n, buffer.device).to(buffer.dtype)


def _errors(op: str, out: torch.Tensor, rank: int, world: int, piece: int) -> int:
    wrong = 0
    for start in range(0, out.numel(), CHUNK):
        n = min(CHUNK, out.numel() - start)
        want = _expected(op, rank, world, start, n, piece, out.device)
        wrong += int((out[start:start + n].to(torch.int32) != want).sum().item())
    return wrong


def _buffers(op: str, elements: int, world: int, dtype: torch.dtype, device: torch.device, group=None):
    """(input, output, run): run() does the collective once over `group` (default: every rank),
    synchronously as the API goes."""
    piece = elements // world
    if op in ("all_reduce", "broadcast"):
        buf = torch.zeros(elements, dtype=dtype, device=device)
        if op == "all_reduce":
            return buf, buf, lambda: dist.all_reduce(buf, group=group)
        src = 0 if group is None else dist.get_global_rank(group, 0)
        return buf, buf, lambda: dist.broadcast(buf, src=src, group=group)
    inp = torch.zeros(piece if op == "all_gather" else elements, dtype=dtype, device=device)
    out = torch.zeros(piece if op == "reduce_scatter" else elements, dtype=dtype, device=device)
    # torch 2.10 renamed the tensor forms; older torch (a GPU box's) has only the old names.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    run = {"all_gather": lambda: gather(out, inp, group=group),
           "reduce_scatter": lambda: scatter(out, inp, group=group),
           "all_to_all": lambda: dist.all_to_all_single(out, inp, group=group)}[op]
    return inp, out, run


def _time(run, device: torch.device, iterations: int) -> list[float]:
    """Seconds of each run on this rank: CUDA events on the current stream (which NCCL's work
    joins), perf_counter on the CPU (gloo's calls return when done)."""
    if device.type == "cuda":
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(iterations)]
        for start, end in pairs:
            start.record()
            run()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) / 1e3 for start, end in pairs]
    seconds = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - t0)
    return seconds


def rank_sweep(rank: int, world: int, raw: dict, report) -> dict:
    """One rank's sweep; rank 0 returns the raw measurements (slowest rank per run)."""
    p = CollectivesParams.model_validate(raw)
    device = launcher.local_device(p.device)
    env.seed_everything(p.seed)
    kind = device.type
    dtype = DTYPES[p.dtype]
    width = torch.empty((), dtype=dtype).element_size()
    plan = spec.collectives(p, kind)
    total = len(plan.collectives) * len(plan.sizes_bytes)
    points, skipped = [], []
    report(0, total, "starting")
    for op in plan.collectives:
        for size in plan.sizes_bytes:
            elements = size // width
            if op in SPLIT:
                elements -= elements % world
            if elements == 0 or (op in SPLIT and elements < world):
                skipped.append({"what": f"{op} {size} B", "reason": f"less than one {p.dtype} element per "
                                                                     f"rank's piece over {world} ranks"})
                continue
            inp, out, run = _buffers(op, elements, world, dtype, device)
            errors = None
            if p.check:
                _fill(inp, rank)
                run()
                mine = _errors(op, out, rank, world, elements // world)
                count = torch.tensor([mine], dtype=torch.int64, device=device)
                dist.all_reduce(count)
                errors = int(count.item())
                inp.zero_(), out.zero_()  # timed runs sum zeros: no value grows run over run
            for _ in range(p.warmup_iterations):
                run()
            dist.barrier()
            seconds = torch.tensor(_time(run, device, p.iterations), dtype=torch.float64, device=device)
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # each run's slowest rank
            # The same runs back to back, as many on every rank, for each GPU's energy; summed.
            mine = energy.back_to_back(device, [run], seconds_per_iteration=seconds.median().item(),
                                       agree=lambda runs: launcher.largest(runs, device))
            summed = torch.tensor([0.0] * 3 if mine is None else [mine.joules_per_iteration, mine.watts, 1.0],
                                  dtype=torch.float64, device=device)
            dist.all_reduce(summed)
            points.append({"collective": op, "size_bytes": elements * width, "elements": elements,
                           "seconds": seconds.tolist(), "errors": errors,
                           "energy": ENERGY.dump_python(energy.per_unit(mine, bytes_moved=elements * width),
                                                        mode="json"),
                           "all_ranks": summed.tolist() if int(summed[2].item()) == world else None})
            del inp, out, run
            report(len(points) + len(skipped), total, f"{op} {size} B")
    spanning = nodes.sweep(rank, world, p, plan, device, dtype, timed=_time, buffers=_buffers)
    if rank != 0:
        return None
    return {"points": points, "skipped": skipped, "spanning": spanning,
            "environment": to_json(env.environment(device, seed=p.seed, l2_flush_bytes=0)),
            "ranks": world, "backend": launcher.backend(kind)}


def run(raw: dict, progress) -> dict | None:
    """The sweep's result; None on a box of a job on several that does not hold rank 0."""
    p = CollectivesParams.model_validate(raw)
    device = env.pick_device(p.device)
    kind = device.type
    ranks = spec.collectives(p, kind).ranks or torch.cuda.device_count()
    boxes = protocol.nodes_from_env(os.environ, ranks_per_node=ranks)
    if boxes is not None:  # this box's part of a job on several (app/bench/nodes.py)
        progress(0, 0, f"meeting the other {boxes.count - 1} boxes at {boxes.endpoint}")
        measured = multinode.launch(rank_sweep, raw | {"device": kind}, nodes=boxes, device_type=kind)
        return None if measured is None else to_json(summarize_run(p, measured, None))
    if ranks < 2:
        raise ValueError(f"ranks: the collectives probe needs 2 GPUs at least; this job sees {ranks}")
    watch = contention.Watch()
    pids: list[int] = []
    measured = launcher.launch(rank_sweep, raw | {"device": kind}, ranks=ranks, device_type=kind,
                               progress=progress, pids=pids)
    return to_json(summarize_run(p, measured, launcher.neighbours(watch, pids)))


def summarize_run(p: CollectivesParams, measured: dict[str, Any],
                  contention: Contention | None) -> CollectivesResult:
    """Rank 0's raw times into the result: stats, bandwidths, the fit and the catalogue's link."""
    environment = ENVIRONMENT.validate_python(measured["environment"] | {"contention": contention})
    ranks = measured["ranks"]
    device_name = environment.device_name
    cuda = environment.device == "cuda"
    found = spec.catalogue_link(device_name) if cuda else None
    stats = [(m, summarize(m["seconds"])) for m in measured["points"]]
    for m, s in stats:  # rank 0's GPU; raw points from before energy have none
        s.energy = ENERGY.validate_python(m.get("energy"))
    fits = {}
    for op in dict.fromkeys(m["collective"] for m, _ in stats):
        mine = [(m["size_bytes"], s.median) for m, s in stats if m["collective"] == op]
        fits[op] = cc.fit_link(op, ranks, [x for x, _ in mine], [t for _, t in mine])
    points = []
    for m, s in stats:
        op, size = m["collective"], m["size_bytes"]
        factor = cc.bus_factor(op, ranks)
        fitted = fits[op].seconds(size)
        catalogue = None if found is None else cc.collective_time(op, size, ranks, gpus_per_node=ranks,
                                                                   intra=found[0]).seconds
        points.append(CollectivePoint(
            collective=op, size_bytes=size, elements=m["elements"], time=s,
            algbw_bytes_per_sec=size / s.median, busbw_bytes_per_sec=size / s.median * factor,
            bus_factor=factor,
            errors=m["errors"], fitted_seconds=fitted, fitted_busbw_bytes_per_sec=size / fitted * factor,
            catalogue_seconds=catalogue,
            catalogue_busbw_bytes_per_sec=None if catalogue is None else size / catalogue * factor,
            joules_per_run_all_ranks=None if m.get("all_ranks") is None else m["all_ranks"][0],
            watts_all_ranks=None if m.get("all_ranks") is None else m["all_ranks"][1]))
    checked = [pt.errors for pt in points if pt.errors is not None]
    spanning = span.summarize(measured.get("spanning"), [(pt.collective, pt.size_bytes, pt.time.median)
                                                         for pt in points], device_name if cuda else None)
    link = None if found is None else CatalogueLink(found[0].bytes_per_sec, found[0].latency_s,
                                                    cc.RING_BASE_LATENCY_S, found[1])
    return CollectivesResult(
        probe="collectives", environment=environment, backend=measured["backend"], ranks=ranks, dtype=p.dtype,
        iterations=p.iterations, warmup_iterations=p.warmup_iterations, checked=p.check,
        check_passed=(sum(checked) == 0) if checked else None, points=points,
        fits=list(fits.values()),
        catalogue_link=link, skipped=[Skipped(**s) for s in measured["skipped"]], spanning=spanning,
        assumptions=[
            "time per point: each timed run's slowest rank, then the median over runs; algbw = S / median, "
            "busbw = algbw x bus_factor (nccl-tests doc/PERFORMANCE.md)",
            "the check fills rank r's element i with ((i + 3r) mod 5) + 1 and compares every output element "
            "exactly; the timed runs then move zeros (values do not grow run over run)",
            "fitted: t = latency x ring steps + bus_factor x S / bandwidth, least squares in relative error "
            "over this run's medians, per collective",
            "catalogue: ring algorithms inside one node at the catalogue's link, NCCL's ring latencies",
            "energy (a GPU): after each point's timed runs, as many runs back to back on every rank; "
            "time.energy is rank 0's GPU, joules_per_run_all_ranks the sum over every rank's",
            f"ranks run as {ranks} processes on one host, {measured['backend']} over loopback"
            + (", one per GPU" if cuda else ", sharing the CPU's cores") if spanning is None else
            f"ranks run as {ranks} processes on {spanning.nodes} boxes ({', '.join(spanning.boxes)}), "
            f"{spanning.ranks_per_node} on each, started by torch.distributed's elastic launcher (c10d "
            f"rendezvous), {measured['backend']} between them; catalogue (above): one node of {ranks} GPUs",
        ])
