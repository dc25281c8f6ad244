"""The answer of a training plan: the cluster as read, the search's counts, the fastest layouts
that fit, and what the model assumes."""

from dataclasses import dataclass, field

from app.accounting import hardware
from app.accounting.comm import links
from app.accounting.comm.achievable import NETWORK
from app.accounting.comm.collectives import Link
from app.accounting.errors import InvalidInput
from app.accounting.hardware import CUSTOM_VENDOR, Accelerator
from app.accounting.plan.run import RunLength
from app.accounting.plan.energy import PlanEnergy
from app.accounting.plan.layout import REASONS, Cluster
from app.accounting.plan.search import Limits, Point, search
from app.accounting.plan.step import StepTime, Workload
from app.accounting.records import RECORD

ASSUMPTIONS = (
    "ranks in Megatron-LM's order: tensor parallel innermost, then context, expert and data parallel, "
    "pipeline stages outermost; a tensor group that straddles two nodes (a degree not dividing the node) "
    "runs at the network, a ring being as fast as its slowest hop",
    "collectives at the share of each link's line rate NCCL achieves on its kind (NVLink SHARP for an "
    "all-reduce in a Hopper or Blackwell NVSwitch node; comm/achievable.py); a given bandwidth as achieved",
    "compute: the slowest pipeline stage's exact matmul FLOPs at peak x compute_efficiency (matmul_time flat), "
    "or each GEMM timed from its shape at the GPU's achievable matmul rate (shaped); elementwise work (norms, "
    "activations, residual adds) and the optimizer step are not counted",
    "tensor-parallel collectives (unless overlap_tensor_parallel), expert all-to-alls and pipeline sends are "
    "not overlapped; a context-parallel ring hides behind the attention core, its all-gather does not",
    "data-parallel gradient reductions overlap their micro-batch's backward, parameter all-gathers its "
    "forward (overlap_data_parallel); what outlasts that compute is exposed",
    "pipeline bubble: (p - 1) / (v m) of the pipeline's ideal time (Narayanan et al. 2021), the slowest "
    "stage setting the pace; ZeRO-2/3 with a pipeline gather parameters once a step and reduce gradients "
    "after the last micro-batch (torch.distributed.pipelining)",
    "routing is even: each expert-parallel rank receives its share of every token's top_k copies",
)


@dataclass(slots=True)
class LinkUsed:
    bytes_per_sec: float
    """Per GPU per direction."""
    latency_s: float
    """Per ring step."""
    source: str

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class TrainingPlan:
    gpu: str
    num_gpus: int
    gpus_per_node: int
    nodes: int
    intra_node: LinkUsed
    inter_node: LinkUsed | None
    global_batch_sequences: int
    seq_len: int
    tokens_per_step: int
    peak_flop_per_sec: float
    """Dense, in the precision's compute dtype, per GPU."""
    compute_efficiency: float | None
    """The share of the dense peak every matmul ran at; null with matmul_time shaped (each GEMM timed
    from its shape)."""
    best: list[StepTime]
    """The fastest layouts that fit, fastest first (at most top_k)."""
    evaluated: int
    """Valid layouts timed and sized."""
    fitting: int
    refused: dict[str, int]
    """Candidates no framework runs, by reason (see refusal_reasons)."""
    refusal_reasons: dict[str, str]
    least_memory: StepTime | None
    """When nothing fits: the layout that comes closest."""
    points: list[Point] = field(default_factory=list)
    """Every evaluated layout (include_points)."""
    assumptions: list[str] = field(default_factory=list)
    energy: PlanEnergy | None = None
    """The energy inputs every layout's `energy` uses, and the run's energy given training_tokens;
    null where the GPU has no board power in the catalogue and no power_watts was given."""
    run: RunLength | None = None
    """Given training_tokens and a layout that fits: the run's steps, days, GPU-hours and cost on
    the fastest."""

    __pydantic_config__ = RECORD


def plan(w: Workload, limits: Limits, *, top_k: int, points: bool,
         links: tuple[str, str | None]) -> TrainingPlan:
    """`links`: where the intra- and inter-node figures came from."""
    result = search(w, limits, top_k=top_k, points=points)
    c = w.cluster
    inter = None if c.inter is None or c.nodes == 1 else LinkUsed(c.inter.bytes_per_sec, c.inter.latency_s,
                                                                    links[1] or "")
    notes = [*ASSUMPTIONS, hardware.memory_note(w.gpu)]
    if c.nodes > 1 and c.inter is not None:
        notes.append("every GPU has its own share of the node's network (one NIC per GPU, as on DGX boards)")
    return TrainingPlan(
        gpu=w.gpu.id, num_gpus=c.gpus, gpus_per_node=c.gpus_per_node, nodes=c.nodes,
        intra_node=LinkUsed(c.intra.bytes_per_sec, c.intra.latency_s, links[0]), inter_node=inter,
        global_batch_sequences=w.global_batch, seq_len=w.seq_len, tokens_per_step=w.global_batch * w.seq_len,
        peak_flop_per_sec=w.peak_flop_per_sec, compute_efficiency=w.compute_efficiency, best=result.best,
        evaluated=result.evaluated, fitting=result.fitting, refused=result.refused,
        refusal_reasons={k: REASONS[k] for k in result.refused}, least_memory=result.least_memory,
        points=result.points,
        assumptions=notes)


def cluster(gpu: Accelerator, *, num_gpus: int, gpus_per_node: int | None,
            intra: tuple[float | None, float | None],
            inter: tuple[float | None, float | None]) -> tuple[Cluster, tuple[str, str | None]]:
    """The cluster from the catalogue's interconnect row, each figure replaced where the request gives one;
    InvalidInput naming the field to give where the catalogue has none."""
    ic = gpu.interconnect
    if num_gpus == 1 and not (ic or gpu.interconnect_bytes_per_sec):  # one GPU crosses no link
        return Cluster(1, 1, Link(intra[0] or 1.0, intra[1] or 0.0), None), ("one GPU: no link", None)
    g = gpus_per_node or (ic.gpus_per_node if ic else None)
    if g is None:
        raise InvalidInput("gpus_per_node", f"{gpu.id} has no node in the catalogue; give gpus_per_node "
                                            "(and the node link's bytes/s and latency)")
    if num_gpus > g and num_gpus % g:
        raise InvalidInput("num_gpus", f"{num_gpus} GPUs do not fill whole nodes of {g}")
    g = min(g, num_gpus)
    bw, lat = links.node(gpu, *intra)
    if bw is None:
        raise InvalidInput("intra_node_bytes_per_sec",
                           f"{gpu.id} has no node link in the catalogue; give one")
    if lat is None:
        raise InvalidInput("intra_node_latency_s", f"{gpu.id} has no node link in the catalogue; give one")
    intra_src = ("given" if intra[0] else f"catalogue: {ic.link} ({ic.source})" if ic else
                 f"gpu: {gpu.interconnect_source}" if gpu.vendor == CUSTOM_VENDOR else "catalogue")
    net, inter_src = None, None
    if num_gpus > g:
        nbw, nlat = links.network(gpu, *inter)
        if nbw is None:
            raise InvalidInput("inter_node_bytes_per_sec",
                               f"{num_gpus} GPUs span nodes and {gpu.id}'s reference board names no network; "
                               "give the network's bytes/s per GPU")
        if nlat is None:
            raise InvalidInput("inter_node_latency_s", "give the network's latency per ring step")
        net = links.link(nbw, nlat, given=inter[0] is not None, kind=NETWORK)
        inter_src = "given" if inter[0] else f"catalogue: {ic.network}"
    # Catalogue figures are line rates of the row's kind, derated to what NCCL achieves; given ones
    # are achieved already (comm/links.py).
    node = links.link(bw, lat, given=intra[0] is not None, kind=links.node_kind(gpu))
    return Cluster(num_gpus, g, node, net), (intra_src, inter_src)
