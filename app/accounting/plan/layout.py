"""A training layout (how N GPUs split a model and a batch) and the cluster it runs on: which
layouts are valid, and where each parallel group's ranks sit on the nodes.

Ranks are ordered as Megatron-LM orders them by default ("tp-cp-ep-dp-pp"): tensor-parallel
ranks are consecutive, context-parallel ranks step over them, expert-parallel ranks over both
inside data parallelism, and pipeline stages are outermost. So a tensor-parallel group of
t <= gpus_per_node GPUs sits in one node, a context-parallel group has gpus_per_node / t members
per node, a data-parallel group gpus_per_node / (t c), and consecutive pipeline stages are
tensor x context x data ranks apart.
"""

import math
from dataclasses import dataclass
from functools import lru_cache

from app.accounting import blocks
from app.accounting.comm.collectives import RING_BASE_LATENCY_S, Link
from app.accounting.records import RECORD
from app.accounting.training.activations import TrainRecompute
from app.accounting.transformer import TransformerConfig


@dataclass(frozen=True, slots=True)
class Layout:
    """One way to run a step. data x tensor x pipeline = the GPU count; expert parallel ranks
    sit inside data parallelism (Megatron-LM, DeepSpeed-MoE)."""

    data_parallel: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int
    zero_stage: int
    micro_batch: int
    """Sequences per micro-batch on one data-parallel rank."""
    micro_batches: int
    """Per data-parallel rank per step: gradient-accumulation steps, or the pipeline's micro-batches."""
    virtual_stages: int
    """Model chunks per pipeline rank (Megatron-LM's interleaved schedule); 1: plain 1F1B."""
    recompute: TrainRecompute
    sequence_parallel: bool
    context_parallel: int = 1
    """Ranks splitting each sequence (training/context.py); its ranks hold the same weights."""
    pipeline_split: tuple[int, ...] = ()
    """Decoder layers on each pipeline stage, first to last; () with one stage."""

    __pydantic_config__ = RECORD

    @property
    def gpus(self) -> int:
        return self.data_parallel * self.tensor_parallel * self.pipeline_parallel * self.context_parallel


@dataclass(frozen=True, slots=True)
class Cluster:
    """The GPUs' node and network. Bandwidths per GPU per direction."""

    gpus: int
    gpus_per_node: int
    intra: Link
    inter: Link | None
    """None: one node, or a part whose reference board names no network."""
    base_latency_s: float = RING_BASE_LATENCY_S

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)


@dataclass(frozen=True, slots=True)
class Group:
    """A parallel group's ranks and how many of them share a node (what collective_time takes)."""

    ranks: int
    per_node: int


def group(ranks: int, stride: int, gpus_per_node: int) -> Group:
    """`ranks` ranks `stride` apart: a node of g GPUs holds g / stride of them when the stride is
    below g (g / stride ranks of a group fill each node), else one."""
    per_node = max(1, gpus_per_node // stride) if stride < gpus_per_node else 1
    return Group(ranks, math.gcd(ranks, per_node))


def groups(layout: Layout, gpus_per_node: int) -> dict[str, Group]:
    """Tensor, context, data (with the context ranks: both hold the same weights), expert (its
    all-to-all), expert-data (its gradients' reduction) and the pipeline boundary's ranks, placed
    in Megatron-LM's order."""
    t, d, e, c = layout.tensor_parallel, layout.data_parallel, layout.expert_parallel, layout.context_parallel
    g = gpus_per_node
    return {
        "tensor": tensor_group(t, g, layout.gpus),
        "context": group(c, t, g),
        "data": group(d * c, t, g),
        "expert": group(e, t * c, g),
        "expert_data": group(d * c // e, t * c * e, g),
        # Two neighbouring stages share a node only when the whole model's ranks fit in one.
        "pipeline": Group(2, 2 if layout.gpus <= g else 1),
    }


def tensor_group(t: int, g: int, gpus: int) -> Group:
    """Tensor ranks are consecutive: t dividing a node of g (or a multiple of it) keeps each group in
    whole nodes. Otherwise (3, 5, 6 or 7 on 8-GPU nodes) some groups straddle two nodes once the run
    spans several, and the step waits for them: a ring runs at its slowest hop, so such a group is
    timed as a ring over the network (Group(t, 1)), latency paid at every step."""
    whole = (t <= g and g % t == 0) or (t > g and t % g == 0)
    if whole or gpus <= g:
        return Group(t, min(t, g))
    return Group(t, 1)


@lru_cache(maxsize=1024)
def divisors(n: int) -> list[int]:
    """Ascending, in sqrt(n) steps: a batch may be 10^8 sequences."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]


@lru_cache(maxsize=256)
def refusal(cfg: TransformerConfig, *, tp: int, pp: int, dp: int, ep: int, gpus_per_node: int,
            tp_across_nodes: bool, seq_len: int = 0, cp: int = 1) -> str | None:
    """Why no framework runs this split of the model, as a reason key; None when it is valid."""
    if tp > gpus_per_node and not tp_across_nodes:
        return "tensor_parallel_across_nodes"
    if tp > 1 and tp > gpus_per_node and tp % gpus_per_node:
        return "tensor_parallel_across_nodes"
    if cfg.n_heads % tp or blocks.tensor_parallel_refusal(cfg, tp):
        return "tensor_parallel_heads"
    if pp > cfg.n_layers:
        return "pipeline_layers"
    if cp > 1 and seq_len % (2 * cp):
        return "context_parallel"
    if ep > 1 and (cfg.n_experts % ep or dp % ep):
        return "expert_parallel"
    return None


REASONS = {
    "tensor_parallel_across_nodes": "tensor parallelism larger than a node needs "
                                    "allow_tensor_parallel_across_nodes, and a multiple of the node's GPUs",
    "tensor_parallel_heads": "tensor_parallel must divide n_heads, and divide n_kv_heads or be a "
                             "multiple of it",
    "pipeline_layers": "pipeline_parallel must not exceed n_layers, and a stage split must give every stage "
                       "a layer",
    "context_parallel": "seq_len must be a multiple of 2 x context_parallel (causal load balancing)",
    "expert_parallel": "expert_parallel must divide n_experts and data_parallel",
    "batch": "data_parallel x micro_batch must divide the global batch",
    "virtual_stages": "virtual stages need pipeline_parallel > 1 and stages of equal layers, must divide the "
                      "layers of a stage, and the micro-batches must be a multiple of pipeline_parallel "
                      "(Megatron-LM)",
}
