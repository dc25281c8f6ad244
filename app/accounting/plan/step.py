"""Time of one training step under a layout: compute, the exposed communication of each kind,
and the pipeline bubble; with tokens/s, MFU, HFU and the memory engine's bytes per GPU.

    step = compute + tensor_parallel + expert_parallel + pipeline_p2p      (x micro-batches)
         + bubble                                   (p - 1) / (v m) of the above (Narayanan et al. 2021)
         + data_parallel (what the overlap rule leaves exposed)

Compute is exact matmul FLOPs (app/accounting/flops.py), the recompute's included, on the
busiest pipeline stage (the last: its layers and the LM head) over peak x compute_efficiency.
Overlap rules, one per kind:
  tensor parallel, expert all-to-alls, pipeline sends: not overlapped (on the critical path in
    Megatron-LM's default schedule);
  data parallel (overlap_data_parallel): a gradient reduction overlaps the backward pass of its
    micro-batch (bucketed, as DDP and Megatron-LM do), a parameter all-gather the forward pass of
    its micro-batch (ZeRO-3's prefetch; ZeRO-1/2's gather of updated weights with the next step's
    first forward, Megatron-LM's overlap_param_gather); what outlasts its window is exposed.
"""

from dataclasses import dataclass
from functools import lru_cache

from app.accounting import blocks, flops
from app.accounting.comm.collectives import Link, collective_time
from app.accounting.hardware import Accelerator
from app.accounting.plan import volumes
from app.accounting.plan.energy import StepEnergy
from app.accounting.plan.layout import Cluster, Group, Layout, groups
from app.accounting.records import RECORD
from app.accounting.training import memory
from app.accounting.transformer import TransformerConfig


@dataclass(slots=True)
class Breakdown:
    """Seconds of one step by kind. The exposed parts sum to step_seconds."""

    compute: float
    """Matmul FLOPs over peak x efficiency, micro-batch by micro-batch, the recompute's included."""
    recompute: float
    """The share of compute that recomputes activations (in compute already)."""
    tensor_parallel: float
    expert_parallel: float
    pipeline_p2p: float
    pipeline_bubble: float
    data_parallel: float
    """Exposed: what outlasts the compute it overlaps."""
    data_parallel_total: float
    """The data-parallel collectives' whole time, overlapped or not."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Traffic:
    """Bytes one GPU sends per step (nccl-tests' S x the bus factor, summed) by kind."""

    tensor_parallel: float
    expert_parallel: float
    pipeline_p2p: float
    data_parallel: float

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class StepTime:
    layout: Layout
    step_seconds: float
    breakdown: Breakdown
    traffic_bytes: Traffic
    tokens_per_sec: float
    model_flops_per_step: float
    """3 x forward matmul FLOPs of the global batch (no recompute)."""
    hardware_flops_per_step: float
    """model FLOPs plus the recompute's."""
    mfu: float
    """model FLOPs / (step_seconds x GPUs x dense peak)."""
    hfu: float
    memory_bytes: int
    """Per GPU of the busiest stage, from the memory engine."""
    memory: memory.TrainingMemory
    fits: bool
    energy: StepEnergy | None = None
    """Set on the layouts answered (app/accounting/plan/energy.py); null where the plan's GPU has no
    board power in the catalogue and no power_watts was given."""

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class Workload:
    """What every layout of a search shares."""

    model: TransformerConfig
    gpu: Accelerator
    cluster: Cluster
    global_batch: int
    """Sequences per step."""
    seq_len: int
    precision: memory.Precision
    optimizer: memory.Optimizer
    peak_flop_per_sec: float
    compute_efficiency: float
    overlap_data_parallel: bool = True
    usable_memory_bytes: int | None = None
    """Fits below this; None: the GPU's memory."""


@lru_cache(maxsize=64)
def _per_sequence(cfg: TransformerConfig, seq_len: int) -> tuple[float, float, float, float]:
    """Forward FLOPs of one sequence: (layers, LM head, attention core, whole)."""
    fwd = flops.transformer_forward(cfg, 1, seq_len)
    return fwd.total - fwd.lm_head, fwd.lm_head, fwd.attention_scores + fwd.attention_values, fwd.total


@lru_cache(maxsize=8192)
def _seconds(op: str, size: int, ranks: int, per_node: int, intra: Link, inter: Link | None,
             base: float) -> float:
    return collective_time(op, size, ranks, gpus_per_node=per_node, intra=intra, inter=inter,
                           base_latency_s=base).seconds


def _messages_time(w: Workload, messages: list[volumes.Message], g: Group) -> dict[str, float]:
    """Seconds by phase, and traffic bytes, of `messages` over group `g`."""
    c = w.cluster
    out = {"forward": 0.0, "backward": 0.0, "step_reduce": 0.0, "step_gather": 0.0, "bytes": 0.0}
    for msg in messages:
        t = msg.count * _seconds(msg.collective, msg.bytes, g.ranks, g.per_node, c.intra, c.inter,
                                 c.base_latency_s)
        key = msg.phase if msg.phase != "step" else (
            "step_gather" if msg.collective == "all_gather" else "step_reduce")
        out[key] += t
        out["bytes"] += msg.count * volumes.wire_bytes(msg, g.ranks)
    return out


def _exposed(total: float, window: float) -> float:
    return max(0.0, total - window)


def step_time(w: Workload, layout: Layout, mem: memory.TrainingMemory | None = None) -> StepTime:
    cfg, lo = w.model, layout
    tp, pp, v, m, b = (lo.tensor_parallel, lo.pipeline_parallel, lo.virtual_stages, lo.micro_batches,
                       lo.micro_batch)
    p = memory.PRECISIONS[w.precision]
    rate = w.peak_flop_per_sec * w.compute_efficiency
    layers_f, head_f, core_f, whole_f = _per_sequence(cfg, w.seq_len)
    redo = {"none": 0.0, "selective": core_f, "full": layers_f}[lo.recompute]
    # The last stage is the busiest: its share of the layers and the LM head.
    fwd_t = (layers_f / pp + head_f) * b / tp / rate
    redo_t = redo / pp * b / tp / rate
    bwd_t = 2 * fwd_t + redo_t
    tokens = b * w.seq_len
    place = groups(lo, w.cluster.gpus_per_node)

    tp_msgs = volumes.tensor_parallel(tokens=tokens, d_model=cfg.d_model, act_bytes=p.activation,
                                      sequence_parallel=lo.sequence_parallel, recompute=lo.recompute)
    layers = cfg.n_layers // pp
    tpc = _messages_time(w, tp_msgs, place["tensor"]) if tp > 1 else None
    tp_mb = layers * (tpc["forward"] + tpc["backward"]) if tpc else 0.0
    moe_layers = -(-sum(n for layer, n in blocks.distinct(cfg) if layer.mlp.routes) // pp)
    epc = None
    if lo.expert_parallel > 1 and moe_layers:
        ep_msgs = volumes.expert_parallel(tokens=tokens, d_model=cfg.d_model, top_k=cfg.top_k,
                                          act_bytes=p.activation, tp=tp,
                                          sequence_parallel=lo.sequence_parallel, recompute=lo.recompute)
        epc = _messages_time(w, ep_msgs, place["expert"])
    ep_mb = moe_layers * (epc["forward"] + epc["backward"]) if epc else 0.0
    p2p_bytes = volumes.pipeline(tokens=tokens, d_model=cfg.d_model, act_bytes=p.activation, tp=tp)
    p2p_mb = 0.0
    if pp > 1:
        link = w.cluster.intra if place["pipeline"].per_node == 2 else w.cluster.inter
        assert link is not None  # the search refuses a multi-node layout without a network
        p2p_mb = 2 * v * (link.latency_s + p2p_bytes / link.bytes_per_sec)
    ideal = m * (fwd_t + bwd_t + tp_mb + ep_mb + p2p_mb)
    bubble = (pp - 1) / (v * m) * ideal

    if mem is None:
        mem = memory_of(w, lo)
    dense = mem.params_per_gpu - mem.expert_params_per_gpu

    def dp(params: int, g: Group) -> dict[str, float] | None:
        if g.ranks == 1 or params == 0:
            return None
        msgs = volumes.data_parallel(params=params, param_bytes=p.param, grad_bytes=p.grad,
                                     zero_stage=lo.zero_stage, micro_batches=m)
        return _messages_time(w, msgs, g)

    parts = [x for x in (dp(dense, place["data"]), dp(mem.expert_params_per_gpu, place["expert_data"])) if x]
    keys = ("forward", "backward", "step_reduce", "step_gather", "bytes")
    dpc = {k: sum(x[k] for x in parts) for k in keys}
    dp_total = dpc["forward"] + dpc["backward"] + dpc["step_reduce"] + dpc["step_gather"]
    if w.overlap_data_parallel:
        dp_exposed = (m * (_exposed(dpc["forward"] / m, fwd_t) + _exposed(dpc["backward"] / m, bwd_t))
                      + _exposed(dpc["step_reduce"], bwd_t) + _exposed(dpc["step_gather"], fwd_t))
    else:
        dp_exposed = dp_total

    breakdown = Breakdown(
        compute=m * (fwd_t + bwd_t), recompute=m * redo_t, tensor_parallel=m * tp_mb,
        expert_parallel=m * ep_mb, pipeline_p2p=m * p2p_mb, pipeline_bubble=bubble,
        data_parallel=dp_exposed, data_parallel_total=dp_total)
    step = ideal + bubble + dp_exposed
    traffic = Traffic(
        tensor_parallel=m * layers * tpc["bytes"] if tpc else 0.0,
        expert_parallel=m * moe_layers * epc["bytes"] if epc else 0.0,
        pipeline_p2p=2 * m * v * p2p_bytes if pp > 1 else 0.0, data_parallel=dpc["bytes"])
    model_flops = 3 * whole_f * w.global_batch
    hw_flops = model_flops + redo * w.global_batch
    peak_all = step * w.cluster.gpus * w.peak_flop_per_sec
    limit = w.usable_memory_bytes or w.gpu.memory_bytes
    return StepTime(
        layout=lo, step_seconds=step, breakdown=breakdown, traffic_bytes=traffic,
        tokens_per_sec=w.global_batch * w.seq_len / step, model_flops_per_step=model_flops,
        hardware_flops_per_step=hw_flops, mfu=model_flops / peak_all, hfu=hw_flops / peak_all,
        memory_bytes=mem.total, memory=mem, fits=mem.total <= limit)


def memory_of(w: Workload, lo: Layout) -> memory.TrainingMemory:
    return memory.training_memory(
        model=w.model, params=None, precision=w.precision, optimizer=w.optimizer, batch_size=lo.micro_batch,
        seq_len=w.seq_len, recompute=lo.recompute, zero_stage=lo.zero_stage, data_parallel=lo.data_parallel,
        tensor_parallel=lo.tensor_parallel, pipeline_parallel=lo.pipeline_parallel,
        sequence_parallel=lo.sequence_parallel, expert_parallel=lo.expert_parallel, gpu=w.gpu,
        virtual_stages=lo.virtual_stages)
