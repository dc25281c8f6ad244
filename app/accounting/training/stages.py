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
class LayerKind:
    """The layers of one stage that keep the same saved tensors (a hybrid's Mamba-2 and attention
    layers, a mixture of experts' routed and dense ones), and what one of them keeps."""

    kind: str
    """Its token mixer and MLP: "attention, MLP", "latent attention, experts", "Mamba-2, no MLP"."""
    layers: list[int]
    """The model's layers (from 0) of this kind on the stage."""
    per_layer: dict[str, int]
    """Bytes one such layer keeps per micro-batch, by saved tensor."""
    per_layer_total: int
    held: int
    """Layer x micro-batch pairs of this kind resident (in_flight_layers)."""
    routes: bool
    """Its MLP routes to experts."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class ActivationDetail:
    """Activation bytes on one GPU of the reported pipeline stage."""

    bytes_per_element: int
    per_layer: dict[str, int]
    """Bytes one layer keeps per micro-batch, by saved tensor: in a model with experts, a
    mixture-of-experts layer (its dense layers are in dense_layer); in a model whose layers differ
    otherwise (hybrids), the first layer's kind, the others in layer_kinds."""
    per_layer_total: int
    layers_held: int
    """Layer x micro-batch pairs of that kind resident: layers on the stage x micro-batches
    in flight (1F1B keeps pipeline_parallel micro-batches in flight on the first stage)."""
    outside_layers: dict[str, int]
    """Embedding dropout mask (first stage) and final norm, LM head input and fp32 logits
    (last stage)."""
    total: int
    """Each of layer_kinds' per_layer_total x held, plus outside_layers."""
    dense_layer: dict[str, int] | None = None
    """A model with experts: what one of its dense-MLP layers keeps (first_dense_layers,
    moe_every, mlp_only_layers); null for a dense model, whose layers are per_layer."""
    dense_layer_total: int = 0
    dense_layers_held: int = 0
    """Dense-layer x micro-batch pairs resident, counted as layers_held is."""
    offloaded: int = 0
    """With activation_offload: the layers' saved tensors held in host memory instead (not in total)."""
    layer_kinds: list[LayerKind] | None = None
    """Every kind of layer on the stage, in the order of its first layer; per_layer and dense_layer
    are two of them."""

    __pydantic_config__ = RECORD


class Plan(NamedTuple):
    """What a request's memory depends on besides s and b, derived once per config."""

    params: int
    stage_params: tuple[tuple[PipeStage, int, int], ...]
    stage_layers: dict[int, tuple[int, ...]]
    """Per stage: the model's layers it holds."""
    kind_of: tuple[int, ...]
    """Per layer of the model: its index in kinds."""
    kinds: tuple[tuple[str, tuple, bool], ...]
    """Each distinct layer: (its name, its saved tensors, whether it routes to experts)."""
    routed: int | None
    """The kind of the first layer that routes to experts, if any."""
    dense: tuple
    """The saved tensors of a dense-MLP layer: the first such layer's, or, in a model whose every
    layer routes, what its first layer would keep with a dense MLP (reported, held by none)."""
    embedding: tuple
    head: tuple


def _name(layer: blocks.Layer) -> str:
    """A layer's kind as the page names it: its token mixer and its MLP ("Mamba-2, MLP")."""
    mixer = layer.attention
    if not mixer.present:
        what = "no mixer"
    elif isinstance(mixer, blocks.ParallelMixers):
        what = f"attention beside {mixer.ssm.label}"
    elif not mixer.mixes_by_attention:
        what = mixer.label
    else:
        what = "latent attention" if mixer.cfg.mla else "attention"
    return f"{what}, {'experts' if layer.mlp.routes else 'MLP' if layer.mlp.present else 'no MLP'}"


@lru_cache(maxsize=1024)
def plan_of(cfg: TransformerConfig, tp: int, pp: int, ep: int, precision: str,
            recompute: act.TrainRecompute, split: tuple[int, ...] | None = None) -> Plan:
    p = PRECISIONS[precision]
    layers = blocks.layers(cfg)

    def recipe(layer: blocks.Layer) -> tuple:
        return act.layer_recipe(layer, p.activation, recompute, p.residual, tp=tp,
                                linear_input_bytes=p.linear_input)

    # Windows and chunks change no saved tensor: layers are told apart by what they keep.
    found: dict[tuple, int] = {}
    kinds: list[tuple[str, tuple, bool]] = []
    kind_of = []
    for layer in layers:
        items = recipe(layer)
        key = (items, layer.mlp.routes)
        if key not in found:
            found[key] = len(kinds)
            kinds.append((_name(layer), items, layer.mlp.routes))
        kind_of.append(found[key])
    routed = next((k for k, (_, _, routes) in enumerate(kinds) if routes), None)
    dense = next((items for _, items, routes in kinds if not routes), None)
    if dense is None:
        dense = recipe(blocks.Layer(layers[0].attention, blocks.dense_mlp(cfg)))
    stages = stage_layers(cfg, pp, split)
    return Plan(count_params(cfg).total, stage_params(cfg, tp, pp, ep, split),
                {st.index: tuple(st.layers) for st in stages}, tuple(kind_of), tuple(kinds), routed, dense,
                act.embedding_recipe(cfg), act.head_recipe(cfg, p.activation, p.residual))


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
    on_stage: dict[int, list[int]] = {}
    for i in plan.stage_layers[stage.index]:
        on_stage.setdefault(plan.kind_of[i], []).append(i)
    kinds = []
    for k, layers in sorted(on_stage.items()):
        name, items, routes = plan.kinds[k]
        per_layer = size(items)
        held = in_flight_layers(len(layers), stage.index, pp=pp, v=v)
        kinds.append(LayerKind(name, layers, per_layer, sum(per_layer.values()), held, routes))
    outside: dict[str, int] = {}
    if stage.kind in ("only", "first"):
        outside |= {k: n * in_flight for k, n in size(plan.embedding).items()}
    if stage.kind in ("only", "last"):
        outside |= size(plan.head)
        if loss_chunks > 1:  # no whole-sequence logits: the head's input gradient, made in the forward
            del outside["head/logits_fp32"]
            outside["head/input_gradient"] = outside["head/lm_head_input"]
    offloaded = 0
    if offload:  # the layers kept on the GPU: routed ones first, then in order
        keep = OFFLOAD_LAYERS_ON_GPU
        for kind in sorted(kinds, key=lambda kd: not kd.routes):  # a stable sort
            kept = min(kind.held, keep)
            offloaded += kind.per_layer_total * (kind.held - kept)
            kind.held, keep = kept, keep - kept
    # per_layer: the routed kind in a model with experts (held by none on a stage of dense layers),
    # else the stage's first kind; dense_layer: a model with experts' first dense kind.
    routed = next((kd for kd in kinds if kd.routes), None)
    dense = next((kd for kd in kinds if not kd.routes), None)
    if plan.routed is None:
        layer, held = (dense.per_layer, dense.held) if dense else (size(plan.dense), 0)
        dense_layer, dense_held = None, 0
    else:
        layer, held = (routed.per_layer, routed.held) if routed else (size(plan.kinds[plan.routed][1]), 0)
        dense_layer, dense_held = (dense.per_layer, dense.held) if dense else (size(plan.dense), 0)
    layer_total, dense_total = sum(layer.values()), sum((dense_layer or {}).values())
    return ActivationDetail(
        bytes_per_element=act_bytes, per_layer=layer, per_layer_total=layer_total, layers_held=held,
        outside_layers=outside, dense_layer=dense_layer, dense_layer_total=dense_total,
        dense_layers_held=dense_held,
        total=sum(kd.per_layer_total * kd.held for kd in kinds) + sum(outside.values()), offloaded=offloaded,
        layer_kinds=kinds)


def loss_gradients(cfg: TransformerConfig, stage: Stage, *, s: int, b: int, t: int, chunks: int = 1) -> int:
    """fp32 d(loss)/d(log-probs) and d(loss)/d(logits), both s x b x vocab / t, on the last stage; one
    chunk's of `chunks` under a chunked loss."""
    return math.ceil(2 * 4 * s * b * cfg.vocab_size / (t * chunks)) if stage in ("only", "last") else 0
