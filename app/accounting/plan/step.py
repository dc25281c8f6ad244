"""Time of one training step under a layout: compute, the exposed communication of each kind,
and the pipeline bubble; with tokens/s, MFU, HFU and the memory engine's bytes per GPU.

    step = compute + tensor_parallel + context_parallel + expert_parallel + pipeline_p2p
                                                                       (x micro-batches)
         + bubble                                   (p - 1) / (v m) of the above (Narayanan et al. 2021)
         + data_parallel (what the overlap rule leaves exposed)

Compute is exact matmul FLOPs (app/accounting/flops.py), the recompute's included, on the
slowest pipeline stage (its share of the layers, at the model's mean FLOPs per layer, and the LM
head on the last) over peak x compute_efficiency; a context-parallel rank does 1/c of a
sequence's work (causal load balancing, training/context.py). The pipeline runs at its slowest
stage's pace, and its bubble is that stage's time.
Overlap rules, one per kind:
  tensor parallel, expert all-to-alls, pipeline sends: not overlapped (on the critical path in
    Megatron-LM's default schedule); with overlap_tensor_parallel the tensor-parallel collectives
    hide behind the micro-batch's linear GEMMs (--tp-comm-overlap, torchtitan's async TP);
  context parallel: the ring's K/V sends overlap the attention core they feed (what outlasts it is
    exposed); the all-gather variant is exposed (Llama 3 paper, section 3.3.2);
  data parallel (overlap_data_parallel): a gradient reduction overlaps the backward pass of its
    micro-batch (bucketed, as DDP and Megatron-LM do), a parameter all-gather the forward pass of
    its micro-batch (ZeRO-3's prefetch; ZeRO-1/2's gather of updated weights with the next step's
    first forward, Megatron-LM's overlap_param_gather); what outlasts its window is exposed.
"""

from dataclasses import dataclass
from functools import lru_cache

from app.accounting import blocks, flops
from app.accounting import matmul as mm
from app.accounting.comm import achievable as ach
from app.accounting.comm.collectives import Link, collective_time
from app.accounting.hardware import Accelerator
from app.accounting.plan import volumes
from app.accounting.plan.energy import StepEnergy
from app.accounting.plan.layout import Cluster, Group, Layout, groups
from app.accounting.records import RECORD
from app.accounting.training import activations as act
from app.accounting.training import context, memory
from app.accounting.training.sharding import split_layers
from app.accounting.transformer import TransformerConfig


@dataclass(slots=True)
class Breakdown:
    """Seconds of one step by kind. The exposed parts sum to step_seconds."""

    compute: float
    """Matmul FLOPs over peak x efficiency, micro-batch by micro-batch, the recompute's included."""
    recompute: float
    """The share of compute that recomputes activations (in compute already)."""
    tensor_parallel: float
    context_parallel: float
    """Exposed: the K/V exchange the attention core does not hide."""
    activation_offload: float
    """Exposed: the copies of saved tensors to and from host memory that outlast their pass's compute."""
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
    context_parallel: float
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
    precision: memory.TrainPrecision
    optimizer: memory.Optimizer
    peak_flop_per_sec: float
    compute_efficiency: float | None
    """Share of the dense peak every matmul runs at; None: each GEMM timed from its shape (`matmul`)."""
    overlap_data_parallel: bool = True
    usable_memory_bytes: int | None = None
    """Fits below this; None: the GPU's memory."""
    context_parallel_algorithm: context.Algorithm = "ring"
    fp8_peak_flop_per_sec: float | None = None
    """With an FP8 recipe: the peak its decoder layers' linear GEMMs run at (training/fp8.py)."""
    fp8_param_gather: bool = False
    activation_offload: bool = False
    loss_chunks: int = 1
    pcie_bytes_per_sec: float | None = None
    """With activation_offload: the host link the saved tensors cross, per direction."""
    overlap_tensor_parallel: bool = False
    """Tensor-parallel collectives overlap the GEMMs they feed (Megatron-LM's --tp-comm-overlap with
    Transformer Engine's userbuffers; torchtitan's async tensor parallelism): what outlasts the
    micro-batch's linear GEMMs is exposed. False: all on the critical path (Megatron-LM's default)."""
    matmul: mm.MatmulDevice | None = None
    """Time each GEMM from its shape (app/accounting/matmul.py) on this device in the precision's
    compute dtype; None: every matmul at peak x compute_efficiency."""
    fp8_matmul: mm.MatmulDevice | None = None
    """With an FP8 recipe and `matmul`: the device in float8, for the decoder layers' GEMMs."""


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


def _p2p_bytes_per_sec(link: Link, *, network: bool) -> float:
    """What point-to-point sends (pipeline stages, the context ring) get of a link: its share as a ring
    of its kind (comm/achievable.py), or all of an achieved figure."""
    return link.bytes_per_sec * (1.0 if link.achieved else ach.ring(link.kind, network=network).fraction)


def _exposed(total: float, window: float) -> float:
    return max(0.0, total - window)


def _stage_seconds(w: Workload, lo: Layout, rate: float) -> tuple[float, float, float, int, float]:
    """(forward, backward, recompute) seconds of one micro-batch on the slowest stage, its layers, and
    one layer's attention-core forward seconds."""
    cfg = w.model
    split = lo.pipeline_split or split_layers(cfg.n_layers, lo.pipeline_parallel)
    n, cp = cfg.n_layers, lo.context_parallel
    if w.matmul is None:
        layers_f, head_f, core_f, _ = _per_sequence(cfg, w.seq_len)
        # Seconds per layer at the bf16 rate: an FP8 recipe runs the linear GEMMs (all but the core) faster.
        fast = rate / w.peak_flop_per_sec * w.fp8_peak_flop_per_sec if w.fp8_peak_flop_per_sec else rate
        per = lo.micro_batch / (lo.tensor_parallel * cp)
        core = core_f / n / rate * per
        fwd = ((layers_f - core_f) / n / fast) * per + core
        bwd, head_fwd, head_bwd = 2 * fwd, head_f / rate * per, 2 * head_f / rate * per
    else:
        fwd, bwd, core, head_fwd, head_bwd = _shaped(w, lo)
    if lo.recompute == "op_selective":  # every second matmul, a share of the layer's linear GEMMs
        layers_f, _, core_f, _ = _per_sequence(cfg, w.seq_len)
        share = act.op_selective_recompute_flops(cfg, w.seq_len) * n / (layers_f - core_f)
        redo = share * (fwd - core)
    else:
        redo = {"none": 0.0, "selective": core, "full": fwd}[lo.recompute]

    def seconds(i: int) -> float:
        return split[i] * (fwd + bwd) + (head_fwd + head_bwd if i == len(split) - 1 else 0.0)

    slowest = max(range(len(split)), key=seconds)
    last = slowest == len(split) - 1
    return (split[slowest] * fwd + (head_fwd if last else 0.0), split[slowest] * bwd + (head_bwd if last else 0.0),
            split[slowest] * redo, split[slowest], core)


def _shaped(w: Workload, lo: Layout) -> tuple[float, float, float, float, float]:
    """Per layer (mean over the model's layers): forward, backward and attention-core forward seconds,
    and the LM head's forward and backward, each GEMM timed from its shape (matmul.step_matmul). A
    context-parallel rank runs its s / c tokens' GEMMs and 1/c of the whole sequence's attention core:
    c times the core of s / c tokens. An FP8 recipe's layer GEMMs run on the float8 device; its
    attention core and head stay in bf16."""
    cfg, cp, n = w.model, lo.context_parallel, w.model.n_layers
    assert w.matmul is not None

    def times(dev: mm.MatmulDevice) -> mm.MatmulTimes:
        return mm.step_matmul(cfg, seq_len=w.seq_len // cp, micro_batch=lo.micro_batch, tp=lo.tensor_parallel,
                              dev=dev, expert_parallel=lo.expert_parallel)

    base = times(w.matmul)
    layers = times(w.fp8_matmul) if w.fp8_matmul is not None else base
    core_f, core_b = base.attention_core_forward_seconds * cp, base.attention_core_backward_seconds * cp
    fwd = (layers.forward_layers_seconds - layers.attention_core_forward_seconds + core_f) / n
    bwd = (layers.backward_layers_seconds - layers.attention_core_backward_seconds + core_b) / n
    return fwd, bwd, core_f / n, base.head_forward_seconds, base.head_backward_seconds


def step_time(w: Workload, layout: Layout, mem: memory.TrainingMemory | None = None) -> StepTime:
    cfg, lo = w.model, layout
    tp, pp, v, m, b, cp = (lo.tensor_parallel, lo.pipeline_parallel, lo.virtual_stages, lo.micro_batches,
                           lo.micro_batch, lo.context_parallel)
    p = memory.PRECISIONS[w.precision]
    rate = w.peak_flop_per_sec * (w.compute_efficiency or 1.0)
    layers_f, head_f, core_f, whole_f = _per_sequence(cfg, w.seq_len)
    redo = {"none": 0.0, "selective": core_f, "full": layers_f,
            "op_selective": act.op_selective_recompute_flops(cfg, w.seq_len) * cfg.n_layers}[lo.recompute]
    fwd_t, bwd_t, redo_t, layers, core_t = _stage_seconds(w, lo, rate)
    bwd_t += redo_t
    tokens = b * w.seq_len // cp  # on one GPU
    place = groups(lo, w.cluster.gpus_per_node)

    tp_msgs = volumes.tensor_parallel(tokens=tokens, d_model=cfg.d_model, act_bytes=p.activation,
                                      sequence_parallel=lo.sequence_parallel, recompute=lo.recompute)
    tpc = _messages_time(w, tp_msgs, place["tensor"]) if tp > 1 else None
    tp_mb = layers * (tpc["forward"] + tpc["backward"]) if tpc else 0.0
    if w.overlap_tensor_parallel:
        tp_mb = _exposed(tp_mb, fwd_t + bwd_t - 3 * layers * core_t)
    cp_mb, cp_bytes = _context_time(w, lo, place["context"], core_t, layers) if cp > 1 else (0.0, 0.0)
    moe_layers = -(-sum(n for layer, n in blocks.distinct(cfg) if layer.mlp.routes) * layers // cfg.n_layers)
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
        p2p_mb = 2 * v * (link.latency_s + p2p_bytes / _p2p_bytes_per_sec(link, network=link is w.cluster.inter))
    if mem is None:
        mem = memory_of(w, lo)
    off_mb = 0.0
    if w.activation_offload and mem.activation_detail is not None and w.pcie_bytes_per_sec:
        # Each layer's saved tensors out over PCIe in forward and back in backward, beside that pass's compute.
        kinds = mem.activation_detail.layer_kinds or ()
        copy = sum(len(kind.layers) * kind.per_layer_total for kind in kinds) / w.pcie_bytes_per_sec
        off_mb = _exposed(copy, fwd_t) + _exposed(copy, bwd_t)
    ideal = m * (fwd_t + bwd_t + tp_mb + cp_mb + ep_mb + p2p_mb + off_mb)
    bubble = (pp - 1) / (v * m) * ideal

    dense = mem.params_per_gpu - mem.expert_params_per_gpu

    def dp(params: int, g: Group) -> dict[str, float] | None:
        if g.ranks == 1 or params == 0:
            return None
        msgs = volumes.data_parallel(params=params, param_bytes=1 if w.fp8_param_gather else p.param,
                                     grad_bytes=p.grad,
                                     zero_stage=lo.zero_stage, micro_batches=m, pipeline=pp > 1)
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
        compute=m * (fwd_t + bwd_t), recompute=m * redo_t, tensor_parallel=m * tp_mb, context_parallel=m * cp_mb,
        activation_offload=m * off_mb,
        expert_parallel=m * ep_mb, pipeline_p2p=m * p2p_mb, pipeline_bubble=bubble,
        data_parallel=dp_exposed, data_parallel_total=dp_total)
    step = ideal + bubble + dp_exposed
    traffic = Traffic(
        tensor_parallel=m * layers * tpc["bytes"] if tpc else 0.0, context_parallel=m * layers * cp_bytes,
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


def _context_time(w: Workload, lo: Layout, g: Group, core_f: float, layers: int) -> tuple[float, float]:
    """(exposed seconds, bytes sent) of one micro-batch's K/V exchange on one GPU, per layer of the
    slowest stage (training/context.py): the ring's cp - 1 sends each way hide behind the attention
    core they feed, forward and backward (K and V, then K, V and their gradients); the all-gather
    variant gathers K and V forward and reduce-scatters their gradients backward, exposed."""
    cfg, cp = w.model, lo.context_parallel
    act = memory.PRECISIONS[w.precision].activation
    chunk = context.kv_chunk_bytes(cfg, w.seq_len // cp, lo.micro_batch, lo.tensor_parallel, act)
    c = w.cluster
    if w.context_parallel_algorithm == "all_gather":
        full = chunk * cp
        t = (_seconds("all_gather", full, g.ranks, g.per_node, c.intra, c.inter, c.base_latency_s)
             + _seconds("reduce_scatter", full, g.ranks, g.per_node, c.intra, c.inter, c.base_latency_s))
        return layers * t, 2 * volumes.wire_bytes(volumes.Message("all_gather", full, 1, "forward"), cp)
    link = c.intra if g.per_node == g.ranks else c.inter
    assert link is not None  # the search refuses a multi-node layout without a network
    step_fwd = link.latency_s + chunk / _p2p_bytes_per_sec(link, network=link is w.cluster.inter)
    fwd = _exposed((cp - 1) * step_fwd, core_f)
    bwd = _exposed((cp - 1) * 2 * step_fwd, 2 * core_f)  # K, V and dK, dV; the core's backward is 2x
    return layers * (fwd + bwd), 3 * (cp - 1) * chunk


def memory_of(w: Workload, lo: Layout) -> memory.TrainingMemory:
    return memory.training_memory(
        model=w.model, params=None, precision=w.precision, optimizer=w.optimizer, batch_size=lo.micro_batch,
        seq_len=w.seq_len, recompute=lo.recompute, zero_stage=lo.zero_stage, data_parallel=lo.data_parallel,
        tensor_parallel=lo.tensor_parallel, pipeline_parallel=lo.pipeline_parallel,
        sequence_parallel=lo.sequence_parallel, expert_parallel=lo.expert_parallel, gpu=w.gpu,
        virtual_stages=lo.virtual_stages, context_parallel=lo.context_parallel,
        activation_offload=w.activation_offload, loss_chunks=w.loss_chunks,
        context_parallel_algorithm=w.context_parallel_algorithm,
        first_stage_layers=lo.pipeline_split[0] if lo.pipeline_split else None,
        last_stage_layers=lo.pipeline_split[-1] if lo.pipeline_split else None)
