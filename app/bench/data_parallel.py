"""data_parallel_step: the train_step probe's model and step (app/bench/train_step.py) over
`ranks` processes (app/bench/dist.py), with DDP or FSDP2's fully_shard; its step time, the
communication left exposed, the scaling against one rank, and the peak memory per rank beside
the memory engine's prediction for the matching ZeRO stage (app/probes/data_parallel_step/params.py).

How: rank 0 first times the same step alone (the plain model, the same per-rank batch) while
the others wait at a barrier; then every rank builds the model from the same seed (identical
weights, as DDP's broadcast would make them), draws its own batch, wraps the model and times
its steps. Exposed communication is the data-parallel step's median less the lone step's: what
the all-reduces (DDP) or all-gathers and reduce-scatters (FSDP) add that compute did not hide.
"""

import os

import torch
import torch.distributed as dist
from pydantic import TypeAdapter
from torch import nn

from app.bench import contention, energy, env, train_step
from app.bench import dist as launcher
from app.bench import nodes as multinode
from app.bench.common import to_json
from app.bench.models import Cruncher
from app.bench.timer import Timer
from app.probes import protocol
from app.probes.data_parallel_step.params import DataParallelStepParams, data_parallel_step
from app.probes.data_parallel_step.result import DataParallelStepResult
from app.probes.params import ranks_for
from app.probes.results import Environment, MemoryComparison, Stats

ENVIRONMENT = TypeAdapter(Environment)
STATS = TypeAdapter(Stats)


def blocks(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP2 shards as units: each layer of the cruncher, each transformer block.
    The rest (the cruncher's head; embeddings, final norm and LM head) is the root's unit."""
    return list(model.layers) if isinstance(model, Cruncher) else list(model.blocks)


def wrap(model: nn.Module, strategy: str, device: torch.device) -> nn.Module:
    if strategy == "ddp":
        # Gradients as views of DDP's all-reduce buckets: no second copy of them (ZeRO stage 0's count).
        return nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True)
    from torch.distributed.fsdp import fully_shard
    for block in blocks(model):
        fully_shard(block)
    fully_shard(model)
    return model


def _redraw(batch: tuple[torch.Tensor, ...], vocab: int | None) -> None:
    """Each rank's own batch, in place (same shapes, so the prediction's inputs stay exact)."""
    for t in batch:
        if t.is_floating_point():
            t.normal_()
        else:
            t.random_(0, vocab)


def rank_step(rank: int, world: int, raw: dict, report) -> dict:
    p = DataParallelStepParams.model_validate(raw)
    device = launcher.local_device(p.device)
    timer = Timer(device, warmup_s=p.warmup_s, measure_s=p.measure_s, min_iters=p.min_iters,
                  max_iters=p.max_iters)
    total = (p.warmup_steps + p.steps) * 2
    alone = None
    if rank == 0:  # the same step on one rank, for the scaling and the exposed communication
        env.seed_everything(p.seed)
        work = train_step.workload(p, device)
        opt = train_step.optimizer(p.optimizer, work.model.parameters(), device)
        steps, _ = train_step.phases(work, opt, device, p.precision)
        alone = timer.measure_phases(steps, warmup_runs=p.warmup_steps, iterations=p.steps)[-1]
        energy.per_unit(alone.energy, tokens=p.batch_size * p.seq_len)
        del work, opt, steps
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report(p.warmup_steps + p.steps, total, "one rank timed")
    dist.barrier()

    env.seed_everything(p.seed)  # identical weights on every rank
    work = train_step.workload(p, device)
    torch.manual_seed(p.seed + 1 + rank)
    _redraw(work.batch, None if work.prediction.config is None else work.prediction.config.vocab_size)
    model = wrap(work.model, p.strategy, device)
    opt = train_step.optimizer(p.optimizer, model.parameters(), device)
    steps, losses = train_step.phases(work, opt, device, p.precision, model=model)
    if device.type == "cuda":  # the first steps allocate gradients and optimizer state
        for _ in range(p.warmup_steps):
            for phase in steps:
                phase()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    fwd, bwd, opt_step, whole = timer.measure_phases(
        steps, warmup_runs=0 if device.type == "cuda" else p.warmup_steps, iterations=p.steps,
        progress=lambda i: report(p.warmup_steps * 2 + p.steps + i, total, f"step {i}/{p.steps}"),
        agree=lambda runs: launcher.largest(runs, device))
    energy.per_unit(whole.energy, tokens=p.batch_size * p.seq_len)
    # Each rank's joules per step and watts, summed over ranks; the third sum counts the ranks that
    # had a figure (a sum is reported only when every rank had one).
    mine = whole.energy
    summed = torch.tensor([0.0, 0.0, 0.0] if mine is None else [mine.joules_per_iteration, mine.watts, 1.0],
                          dtype=torch.float64, device=device)
    dist.all_reduce(summed)
    measured, reserved, method = train_step.peak_bytes(device, train_step.resident(work, opt, model), steps,
                                                       flush_bytes=timer.flush_bytes)
    peaks = torch.tensor([measured, -measured], dtype=torch.int64, device=device)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)  # the largest and (negated) the smallest rank's
    step_times = torch.tensor([whole.median], dtype=torch.float64, device=device)
    dist.all_reduce(step_times, op=dist.ReduceOp.MAX)
    if rank != 0:
        return None
    return {"environment": to_json(env.environment(device, seed=p.seed, l2_flush_bytes=timer.flush_bytes)),
            "alone": to_json(alone), "step": to_json(whole), "forward": to_json(fwd),
            "backward": to_json(bwd), "optimizer_step": to_json(opt_step),
            "slowest_rank_step_s": step_times.item(),
            "energy_all_ranks": summed.tolist() if int(summed[2].item()) == world else None,
            "reserved": reserved, "most": int(peaks[0]), "least": -int(peaks[1]),
            "method": method, "loss_first": losses[0].item(), "loss_last": losses[-1].item(), "ranks": world,
            "params": sum(param.numel() for param in work.model.parameters())}


def run(raw: dict, progress) -> dict | None:
    """The step's result; None on a box of a job on several that does not hold rank 0."""
    p = DataParallelStepParams.model_validate(raw)
    device = env.pick_device(p.device)
    kind = device.type
    ranks = ranks_for(p.ranks, kind, 2) if kind == "cpu" else p.ranks or torch.cuda.device_count()
    boxes = protocol.nodes_from_env(os.environ, ranks_per_node=ranks)
    if boxes is not None:  # this box's part of a job on several (app/bench/nodes.py): ranks on each box
        progress(0, 0, f"meeting the other {boxes.count - 1} boxes at {boxes.endpoint}")
        m = multinode.launch(rank_step, raw | {"device": kind}, nodes=boxes, device_type=kind)
        if m is None:
            return None
        ranks, seen = m["ranks"], None
    elif ranks < 2:
        raise ValueError(f"ranks: the data_parallel_step probe needs 2 GPUs at least; this job sees {ranks}")
    else:
        watch = contention.Watch()
        pids: list[int] = []
        m = launcher.launch(rank_step, raw | {"device": kind}, ranks=ranks, device_type=kind,
                            progress=progress, pids=pids)
        seen = launcher.neighbours(watch, pids)
    pred = data_parallel_step(p, kind == "cuda", ranks)
    environment = ENVIRONMENT.validate_python(m["environment"] | {"contention": seen})
    step, alone = STATS.validate_python(m["step"]), STATS.validate_python(m["alone"])
    tokens = p.batch_size * p.seq_len
    joules, watts = (None, None) if m["energy_all_ranks"] is None else m["energy_all_ranks"][:2]
    # The busiest rank's peak: the one a plan must fit, and the one an out-of-memory error would hit.
    # FSDP's moves by a block between ranks and runs with the timing of its prefetching all-gathers.
    memory = MemoryComparison(predicted=pred.memory, measured_peak_allocated=m["most"],
                              measured_reserved=m["reserved"],
                              relative_error=pred.memory["total"] / m["most"] - 1,
                              method=m["method"] + ", the busiest rank's")
    return to_json(DataParallelStepResult(
        probe="data_parallel_step", environment=environment, strategy=p.strategy,
        backend=launcher.backend(kind), ranks=ranks, zero_stage=pred.zero_stage, model=pred.name,
        params=pred.params, batch_size=p.batch_size, seq_len=p.seq_len, tokens_per_step_per_rank=tokens,
        optimizer=p.optimizer, precision=p.precision, step=step, forward=STATS.validate_python(m["forward"]),
        backward=STATS.validate_python(m["backward"]),
        optimizer_step=STATS.validate_python(m["optimizer_step"]),
        slowest_rank_step_s=m["slowest_rank_step_s"], one_rank_step=alone,
        exposed_communication_s=step.median - alone.median,
        tokens_per_sec=ranks * tokens / step.median, tokens_per_sec_per_rank=tokens / step.median,
        one_rank_tokens_per_sec=tokens / alone.median, scaling_efficiency=alone.median / step.median,
        memory=memory, peak_bytes_most_rank=m["most"], peak_bytes_least_rank=m["least"],
        loss_first=m["loss_first"], loss_last=m["loss_last"],
        joules_per_step_all_ranks=joules, watts_all_ranks=watts,
        joules_per_token_all_ranks=None if joules is None else joules / (ranks * tokens),
        assumptions=[
            "one rank: rank 0 times the plain model on the same per-rank batch, alone, before the others "
            "start; exposed communication = the data-parallel step's median - that step's median",
            "scaling efficiency = tokens/s per rank over the one rank's tokens/s (1 is perfect)",
            "every rank builds the model from the same seed (identical weights) and draws its own batch",
            "ddp: gradient_as_bucket_view, so the gradients are the all-reduce buckets (no second copy)",
            "fsdp: fully_shard on each block (cruncher layer, transformer block), then on the root, "
            "which keeps the rest (the head; embeddings and final norm) gathered from forward to the end "
            "of backward; the default prefetch of one block ahead",
            *pred.notes,
            "energy (a GPU): step.energy is rank 0's GPU over whole steps run back to back after the timed "
            "ones, as many on every rank; joules_per_step_all_ranks sums every rank's GPU",
            "memory: the busiest rank's peak (the least rank's beside it); reserved bytes are rank 0's"
            + ("; CPU ranks share the host's cores" if kind == "cpu" else ""),
            *([] if boxes is None else [
                f"ranks on {boxes.count} boxes, {ranks // boxes.count} on each, started by "
                f"torch.distributed's elastic launcher (c10d rendezvous); {launcher.backend(kind)} between "
                "them; the memory prediction is per rank, as on one box"]),
        ]))
