"""One pipeline stage's activations on one of its GPUs: each layer's saved tensors (activations.py)
times the layer x micro-batch pairs the schedule keeps in flight there, what lies outside the layers
(the embedding's mask, the head's inputs and logits), the loss's fp32 gradients, and what activation
offloading and a chunked loss change. memory.py adds the model states and takes the step's peak.
"""

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from app.accounting import blocks
from app.accounting.models import TransformerConfig, count_params
from app.accounting.records import RECORD
from app.accounting.training import activations as act
from app.accounting.training.sharding import PipeStage, Stage, stage_layers, stage_params
from app.accounting.training.states import PRECISIONS


@dataclass(slots=True)
class ActivationDetail:
    """Activation bytes on one GPU of the reported pipeline stage."""

    bytes_per_element: int
    per_layer: dict[str, int]
    """Bytes one layer keeps per micro-batch, by saved tensor: in a model with experts, a
    mixture-of-experts layer (its dense layers are in dense_layer)."""
    per_layer_total: int
    layers_held: int
    """Layer x micro-batch pairs of that kind resident: layers on the stage x micro-batches
    in flight (1F1B keeps pipeline_parallel micro-batches in flight on the first stage)."""
    outside_layers: dict[str, int]
    """Embedding dropout mask (first stage) and final norm, LM head input and fp32 logits
    (last stage)."""
    total: int
    """per_layer_total x layers_held + dense_layer_total x dense_layers_held + outside_layers."""
    dense_layer: dict[str, int] | None = None
    """A model with experts: what one of its dense-MLP layers keeps (first_dense_layers,
    moe_every, mlp_only_layers); null for a dense model, whose layers are per_layer."""
    dense_layer_total: int = 0
    dense_layers_held: int = 0
    """Dense-layer x micro-batch pairs resident, counted as layers_held is."""
    offloaded: int = 0
    """With activation_offload: the layers' saved tensors held in host memory instead (not in total)."""

    __pydantic_config__ = RECORD


class Plan(NamedTuple):
    """What a request's memory depends on besides s and b, derived once per config."""

    params: int
    stage_params: tuple[tuple[PipeStage, int, int], ...]
    stage_moe_layers: dict[int, tuple[int, int]]
    """Per stage: (dense layers, mixture-of-experts layers) it holds."""
    routes: bool
    """Some layer routes to experts: `layer` is such a layer, `dense_layer` the others."""
    layer: tuple
    """The saved tensors of a mixture-of-experts layer, or of every layer of a dense model."""
    dense_layer: tuple
    embedding: tuple
    head: tuple


@lru_cache(maxsize=1024)
def plan_of(cfg: TransformerConfig, tp: int, pp: int, ep: int, precision: str,
            recompute: act.TrainRecompute, split: tuple[int, ...] | None = None) -> Plan:
    p = PRECISIONS[precision]
    layers = blocks.layers(cfg)
    stages = stage_layers(cfg, pp, split)
    moe_of = {st.index: sum(layers[i].mlp.routes for i in st.layers) for st in stages}
    counts = {st.index: (len(st.layers) - moe_of[st.index], moe_of[st.index]) for st in stages}
    # Windows change no saved tensor: one layer of each MLP kind stands for its kind (a model whose
    # every layer routes still reports what a dense one would keep, held by none).
    routed = next((layer for layer in layers if layer.mlp.routes), None)
    dense = next((layer for layer in layers if not layer.mlp.routes), None)
    if dense is None:
        dense = blocks.Layer(layers[0].attention, blocks.dense_mlp(cfg))

    def recipe(layer: blocks.Layer) -> tuple:
        return act.layer_recipe(layer, p.activation, recompute, p.residual, tp=tp, linear_input_bytes=p.linear_input)

    return Plan(count_params(cfg).total, stage_params(cfg, tp, pp, ep, split), counts, routed is not None,
                 recipe(routed or dense), recipe(dense) if routed else (), act.embedding_recipe(cfg),
                 act.head_recipe(cfg, p.activation, p.residual))


def in_flight_layers(layers: int, index: int, *, pp: int, v: int) -> int:
    """Layer x micro-batch pairs the GPU of stage `index` (0 first) holds at its peak. 1F1B keeps
    pp - index micro-batches in flight there (its warm-up forwards and the one in progress);
    Megatron-LM's interleaved schedule, v chunks of layers / v each, keeps its warm-up,
    2(pp - index - 1) + (v - 1) pp chunks (megatron/core/pipeline_parallel/schedules.py), plus the
    one in progress: on the first stage layers x pp x (1 + (pp - 1) / (pp v)), the factor of
    Korthikanti et al. 2022, section 4.2.3."""
    if v == 1:
        return layers * (pp - index)
    return math.ceil(layers * (2 * (pp - index - 1) + (v - 1) * pp + 1) / v)


OFFLOAD_LAYERS_ON_GPU = 2
"""Layers whose saved tensors stay on the GPU under activation offloading: the one computing and the one
in transfer (Megatron-LM's --cpu-offloading keeps a window of layers; torchtune's OffloadActivations
copies each saved tensor out on a side stream and back one layer ahead in backward)."""
LOSS_CHUNKS_NOTE = ("loss_chunks {n}: the LM head and loss run chunk by chunk inside the forward pass, each "
                    "chunk's logits and their gradient made and freed at once and the head's input gradient "
                    "kept (a fused linear cross-entropy: Liger-Kernel's LigerFusedLinearCrossEntropyLoss, "
                    "Unsloth's fused loss), so no whole-sequence fp32 logits are held")
OFFLOAD_NOTE = ("activation_offload: each layer's saved tensors go to host memory as forward moves on and come "
                "back a layer ahead in backward, 2 layers' kept on the GPU (Megatron-LM's --cpu-offloading, "
                "torchtune's OffloadActivations); activation_detail.offloaded is what the host holds")


def stage_activations(cfg: TransformerConfig, plan: Plan, stage: PipeStage, *, s: int, b: int,
                       act_bytes: int, tp: int, pp: int, sp: bool, v: int = 1, offload: bool = False,
                       loss_chunks: int = 1) -> ActivationDetail:
    def size(items: tuple) -> dict[str, int]:
        return act.sized(items, s=s, b=b, t=tp, sequence_parallel=sp)

    in_flight = pp - stage.index
    dense, moe = (in_flight_layers(n, stage.index, pp=pp, v=v) for n in plan.stage_moe_layers[stage.index])
    held, dense_held = (moe, dense) if plan.routes else (dense, 0)
    layer = size(plan.layer)
    outside: dict[str, int] = {}
    if stage.kind in ("only", "first"):
        outside |= {k: n * in_flight for k, n in size(plan.embedding).items()}
    if stage.kind in ("only", "last"):
        outside |= size(plan.head)
        if loss_chunks > 1:  # no whole-sequence logits: the head's input gradient, made in the forward
            del outside["head/logits_fp32"]
            outside["head/input_gradient"] = outside["head/lm_head_input"]
    dense_layer = size(plan.dense_layer) if plan.routes else None
    layer_total, dense_total = sum(layer.values()), sum((dense_layer or {}).values())
    offloaded = 0
    if offload:
        kept = min(held + dense_held, OFFLOAD_LAYERS_ON_GPU)
        kept_dense = min(dense_held, max(0, kept - held))
        kept_routed = kept - kept_dense
        offloaded = layer_total * (held - kept_routed) + dense_total * (dense_held - kept_dense)
        held, dense_held = kept_routed, kept_dense
    return ActivationDetail(
        bytes_per_element=act_bytes, per_layer=layer, per_layer_total=layer_total, layers_held=held,
        outside_layers=outside, dense_layer=dense_layer, dense_layer_total=dense_total,
        dense_layers_held=dense_held,
        total=layer_total * held + dense_total * dense_held + sum(outside.values()), offloaded=offloaded)


def loss_gradients(cfg: TransformerConfig, stage: Stage, *, s: int, b: int, t: int, chunks: int = 1) -> int:
    """fp32 d(loss)/d(log-probs) and d(loss)/d(logits), both s x b x vocab / t, on the last stage; one
    chunk's of `chunks` under a chunked loss."""
    return math.ceil(2 * 4 * s * b * cfg.vocab_size / (t * chunks)) if stage in ("only", "last") else 0
