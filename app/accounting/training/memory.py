"""Training memory per GPU: parameters, gradients, optimizer state, master
weights and activations, under ZeRO, tensor and pipeline parallelism.

Model-state bytes follow the ZeRO paper (Rajbhandari et al. 2020, section 3.1):
mixed precision keeps 16-bit parameters and gradients (2 + 2 bytes) and an fp32
master copy plus fp32 optimizer state; with Adam that is 2 + 2 + 4 + 8 = 16
bytes per parameter. ZeRO stage 1 shards optimizer state and master weights
over data-parallel ranks, stage 2 also gradients, stage 3 also parameters.

How parameters split over tensor, pipeline and expert-parallel ranks, layer by layer
(dense and mixture-of-experts layers differ), is sharding.py's; routed experts' states
shard over data_parallel / expert_parallel ranks, the rest over data_parallel.
"""

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

from app.accounting import blocks
from app.accounting.errors import InvalidInput
from app.accounting.hardware import Accelerator
from app.accounting.models import TransformerConfig, count_params
from app.accounting.records import RECORD
from app.accounting.training import activations as act
from app.accounting.training.sharding import Stage, check_parallel, kv_replicas, stage_layers, stage_params
from app.accounting.units import GIB

Precision = Literal["fp32", "bf16_mixed", "fp16_mixed", "bf16", "bf16_autocast"]
Optimizer = Literal["sgd", "sgd_momentum", "adagrad", "rmsprop", "adam", "adamw", "adamw_8bit"]


@dataclass(frozen=True, slots=True)
class PrecisionBytes:
    """Bytes per element of each kind of training state."""

    param: int
    grad: int
    master: int
    optimizer_state: int
    activation: int
    residual: int
    """Residual-stream activations (layer and norm inputs)."""
    weight_copy: int
    """A per-step 16-bit copy of each matmul weight, kept for backward (autocast's cache)."""


PRECISIONS: dict[str, PrecisionBytes] = {
    "fp32": PrecisionBytes(param=4, grad=4, master=0, optimizer_state=4, activation=4, residual=4,
                           weight_copy=0),
    "bf16_mixed": PrecisionBytes(param=2, grad=2, master=4, optimizer_state=4, activation=2, residual=2,
                                 weight_copy=0),
    "fp16_mixed": PrecisionBytes(param=2, grad=2, master=4, optimizer_state=4, activation=2, residual=2,
                                 weight_copy=0),
    "bf16": PrecisionBytes(param=2, grad=2, master=0, optimizer_state=2, activation=2, residual=2,
                           weight_copy=0),
    # torch.autocast(dtype=bfloat16): fp32 weights, gradients and optimizer state; matmuls
    # read 16-bit copies of their inputs and weights, while norms, softmax and the
    # residual stream stay in fp32.
    "bf16_autocast": PrecisionBytes(param=4, grad=4, master=0, optimizer_state=4, activation=2,
                                    residual=4, weight_copy=2),
}

# The dtype each precision's matmuls run in: whose dense peak its step time divides by.
PEAK_DTYPE = {"fp32": "float32", "bf16_autocast": "bfloat16", "bf16_mixed": "bfloat16",
              "fp16_mixed": "float16", "bf16": "bfloat16"}

# State tensors per parameter: momentum (SGD), sum of squares (Adagrad), square
# average (RMSprop), first and second moments (Adam, AdamW).
OPTIMIZER_STATES = {"sgd": 0, "sgd_momentum": 1, "adagrad": 1, "rmsprop": 1,
                    "adam": 2, "adamw": 2, "adamw_8bit": 2}
# 8-bit AdamW (Dettmers et al. 2022, arXiv:2110.02861): 1 byte per state element
# plus one fp32 absmax per 2048-element block, whatever the training precision.
BLOCKWISE_8BIT_BLOCK = 2048


def optimizer_bytes_per_param(optimizer: str, precision: str) -> float:
    if optimizer == "adamw_8bit":
        return OPTIMIZER_STATES[optimizer] * (1 + 4 / BLOCKWISE_8BIT_BLOCK)
    return OPTIMIZER_STATES[optimizer] * PRECISIONS[precision].optimizer_state


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of each kind of model state, before any sharding."""

    parameters: float
    gradients: float
    optimizer_state: float
    master_weights: float
    total: float

    __pydantic_config__ = RECORD


@lru_cache(maxsize=64)
def state_bytes_per_param(precision: str, optimizer: str) -> StateBytes:
    p = PRECISIONS[precision]
    opt = optimizer_bytes_per_param(optimizer, precision)
    return StateBytes(parameters=p.param, gradients=p.grad, optimizer_state=opt,
                      master_weights=p.master, total=p.param + p.grad + opt + p.master)


def checkpoint_bytes(params: int, precision: str, optimizer: str) -> int:
    """What a full checkpoint of `params` parameters holds: parameters, master weights and optimizer
    state (no gradients, no activations), in bytes. TrainingMemory.checkpoint_bytes and the checkpoint
    calculator (app/accounting/checkpoint.py) both read it here."""
    per = state_bytes_per_param(precision, optimizer)
    return math.ceil(params * (per.parameters + per.master_weights + per.optimizer_state))


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

    __pydantic_config__ = RECORD


class _Plan(NamedTuple):
    """What a request's memory depends on besides s and b, derived once per config."""

    params: int
    stage_params: tuple[tuple[Stage, int, int], ...]
    stage_moe_layers: dict[str, tuple[int, int]]
    """Per stage: (dense layers, mixture-of-experts layers) it holds."""
    routes: bool
    """Some layer routes to experts: `layer` is such a layer, `dense_layer` the others."""
    layer: tuple
    """The saved tensors of a mixture-of-experts layer, or of every layer of a dense model."""
    dense_layer: tuple
    embedding: tuple
    head: tuple


@lru_cache(maxsize=1024)
def _plan(cfg: TransformerConfig, tp: int, pp: int, ep: int, precision: str,
          recompute: act.Recompute) -> _Plan:
    p = PRECISIONS[precision]
    layers = blocks.layers(cfg)
    moe_of = {stage: sum(layers[i].mlp.routes for i in held) for stage, held in stage_layers(cfg, pp)}
    counts = {stage: (len(held) - moe_of[stage], moe_of[stage]) for stage, held in stage_layers(cfg, pp)}
    # Windows change no saved tensor: one layer of each MLP kind stands for its kind (a model whose
    # every layer routes still reports what a dense one would keep, held by none).
    routed = next((layer for layer in layers if layer.mlp.routes), None)
    dense = next((layer for layer in layers if not layer.mlp.routes), None)
    if dense is None:
        dense = blocks.Layer(layers[0].attention, blocks.dense_mlp(cfg))

    def recipe(layer: blocks.Layer) -> tuple:
        return act.layer_recipe(layer, p.activation, recompute, p.residual, tp=tp)

    return _Plan(count_params(cfg).total, stage_params(cfg, tp, pp, ep), counts, routed is not None,
                 recipe(routed or dense), recipe(dense) if routed else (), act.embedding_recipe(cfg),
                 act.head_recipe(cfg, p.activation, p.residual))


def in_flight_layers(layers: int, stage: Stage, *, pp: int, v: int) -> int:
    """Layer x micro-batch pairs a stage's GPU holds at its peak. 1F1B keeps pp micro-batches in
    flight on the first stage; Megatron-LM's interleaved schedule, v chunks of layers / v each,
    keeps 2(pp - 1) + (v - 1) pp + 1 chunks there: layers x pp x (1 + (pp - 1) / (pp v)), the
    factor of Korthikanti et al. 2022, section 4.2.3."""
    if stage != "first":
        return layers
    return layers * pp if v == 1 else math.ceil(layers * (pp * v + pp - 1) / v)


def _stage_activations(cfg: TransformerConfig, plan: _Plan, stage: Stage, *, s: int, b: int,
                       act_bytes: int, tp: int, pp: int, sp: bool, v: int = 1) -> ActivationDetail:
    def size(items: tuple) -> dict[str, int]:
        return act.sized(items, s=s, b=b, t=tp, sequence_parallel=sp)

    in_flight = pp if stage == "first" else 1
    dense, moe = (in_flight_layers(n, stage, pp=pp, v=v) for n in plan.stage_moe_layers[stage])
    held, dense_held = (moe, dense) if plan.routes else (dense, 0)
    layer = size(plan.layer)
    outside: dict[str, int] = {}
    if stage in ("only", "first"):
        outside |= {k: n * in_flight for k, n in size(plan.embedding).items()}
    if stage in ("only", "last"):
        outside |= size(plan.head)
    dense_layer = size(plan.dense_layer) if plan.routes else None
    layer_total, dense_total = sum(layer.values()), sum((dense_layer or {}).values())
    return ActivationDetail(
        bytes_per_element=act_bytes, per_layer=layer, per_layer_total=layer_total, layers_held=held,
        outside_layers=outside, dense_layer=dense_layer, dense_layer_total=dense_total,
        dense_layers_held=dense_held,
        total=layer_total * held + dense_total * dense_held + sum(outside.values()))


def _loss_gradients(cfg: TransformerConfig, stage: Stage, *, s: int, b: int, t: int) -> int:
    """fp32 d(loss)/d(log-probs) and d(loss)/d(logits), both s x b x vocab / t, on the last stage."""
    return 0 if stage == "first" else math.ceil(2 * 4 * s * b * cfg.vocab_size / t)


def matmul_share(cfg: TransformerConfig) -> float:
    """The fraction of parameters outside the routed experts that matmuls read: attention,
    dense MLPs, routers, shared experts and the LM head (the token embedding when tied).
    Routed experts are matmul weights throughout."""
    counts = count_params(cfg)
    matmuls = counts.attention + counts.mlp + counts.router + counts.shared_experts
    return (matmuls + cfg.vocab_size * cfg.d_model) / (counts.total - counts.routed_experts)


def _model_notes(model: TransformerConfig, *, tp: int, dp: int, ep: int, zero_stage: int) -> list[str]:
    notes = []
    if kv_replicas(model, tp) > 1:
        notes.append(f"tensor_parallel {tp} exceeds n_kv_heads ({model.kv_heads}): each rank keeps a "
                     "replica of one key/value head and its K and V (Megatron-LM, vLLM)")
    if model.moe:
        notes.append("dropless routing, tokens spread evenly over experts: each GPU keeps top_k copies "
                     "of its tokens' expert inputs, hiddens and outputs, whatever expert_parallel is")
        notes.append(f"routed experts split over expert_parallel ({ep}) x tensor_parallel ({tp}) ranks; "
                     f"ZeRO shards their states over data_parallel / expert_parallel ({dp // ep}) ranks")
        if zero_stage and dp // ep == 1 < dp:
            notes.append("every data-parallel rank of an expert group holds different experts: ZeRO "
                         "saves nothing on routed-expert states")
    return notes


@dataclass(slots=True)
class TrainingMemory:
    """Memory on one GPU of the busiest pipeline stage. Bytes unless named otherwise."""

    params: int
    """Parameters of the whole model."""
    params_per_gpu: int
    expert_params_per_gpu: int
    """The routed-expert parameters among params_per_gpu: split over tensor_parallel and
    expert_parallel ranks, their states sharded by ZeRO over data_parallel / expert_parallel
    ranks. 0 for a dense model."""
    bytes_per_param: float
    """Model-state bytes per parameter before sharding: parameters + gradients + optimizer
    state + master weights (16 for mixed precision with Adam)."""
    bytes_per_param_detail: StateBytes
    parameters: int
    gradients: int
    optimizer_state: int
    master_weights: int
    weight_copies: int
    """16-bit copies of the matmul weights that autocast makes each step and keeps for the
    backward pass; 0 except with bf16_autocast."""
    activations: int | None
    """null when the model is a bare parameter count: activations need its shape."""
    transient: int | None
    """Short-lived buffers at the memory peak, the start of the backward pass: the
    cross-entropy backward's fp32 gradients with respect to the log-probabilities and the
    logits (2 x 4 x s x b x vocab / t bytes, last stage), made while every activation is
    still held. null with a bare parameter count."""
    total: int
    """All of the above on one GPU (activations and transient counted as 0 when null)."""
    total_gib: float
    model_state_bytes: int
    """Model state of the whole model, unsharded: params x bytes_per_param."""
    checkpoint_bytes: int
    """What a full checkpoint holds: parameters, master weights and optimizer state of the
    whole model (no gradients, no activations)."""
    pipeline_stage: Stage
    """The stage reported: the only one, or whichever of first and last needs more."""
    gpu: str | None
    gpu_memory_bytes: int | None
    fits: bool | None
    """total <= gpu_memory_bytes; null without a gpu."""
    headroom: int | None
    """gpu_memory_bytes - total (negative when it does not fit); null without a gpu."""
    activation_detail: ActivationDetail | None
    assumptions: list[str]

    __pydantic_config__ = RECORD


def training_memory(
    *, model: TransformerConfig | None, params: int | None, precision: Precision,
    optimizer: Optimizer, batch_size: int, seq_len: int, recompute: act.Recompute = "none",
    zero_stage: int = 0, data_parallel: int = 1, tensor_parallel: int = 1,
    pipeline_parallel: int = 1, sequence_parallel: bool = True, expert_parallel: int = 1,
    gpu: Accelerator | None = None, virtual_stages: int = 1,
) -> TrainingMemory:
    """Per-GPU training memory. Give `model` (a config) or `params` (a bare count).
    virtual_stages: model chunks per pipeline rank (the interleaved schedule's v)."""
    tp, pp, dp, ep = tensor_parallel, pipeline_parallel, data_parallel, expert_parallel
    assumptions = [f"batch_size {batch_size} is the micro-batch per data-parallel rank"]
    check_parallel(model, tp=tp, pp=pp, dp=dp, ep=ep)
    if virtual_stages > 1 and (pp == 1 or model is None or model.n_layers % (pp * virtual_stages)):
        raise InvalidInput("virtual_stages", f"{virtual_stages} chunks per pipeline rank need "
                           "pipeline_parallel > 1 and a model whose n_layers pipeline_parallel x "
                           "virtual_stages divides")
    if model is not None:
        if model.position == "learned" and seq_len > model.max_seq_len:
            raise InvalidInput("seq_len", f"{seq_len} exceeds the model's {model.max_seq_len} "
                               "learned positions")
        plan = _plan(model, tp, pp, ep, precision, recompute)
        n_params, stages = plan.params, plan.stage_params
        assumptions += _model_notes(model, tp=tp, dp=dp, ep=ep, zero_stage=zero_stage)
    else:
        n_params = params
        stages = (("only", math.ceil(params / (tp * pp)), 0),)
        assumptions.append("a bare parameter count is split evenly over tensor and pipeline "
                           "ranks; activations need the model's shape and are not counted")
    if zero_stage and dp == 1:
        assumptions.append("ZeRO shards over data-parallel ranks; with data_parallel 1 it saves nothing")

    per = state_bytes_per_param(precision, optimizer)
    act_bytes = PRECISIONS[precision].activation
    copy_bytes = PRECISIONS[precision].weight_copy
    # Autocast copies the weights matmuls read: not norms, biases' share aside, nor positions.
    share = 1.0 if model is None else matmul_share(model)
    # ZeRO stage k divides these model states over the data-parallel ranks; routed experts'
    # over the data-parallel ranks that hold the same experts, dp / ep (Megatron-LM's expert
    # data-parallel group, DeepSpeed-MoE's expert data parallelism).
    div = [(dp if zero_stage >= k else 1, dp // ep if zero_stage >= k else 1) for k in (3, 2, 1, 1)]
    kinds = (per.parameters, per.gradients, per.optimizer_state, per.master_weights)

    best = None
    for stage, n, n_exp in stages:  # one stage, or the first and the last
        states = [math.ceil(n * x / d) for x, (d, _) in zip(kinds, div, strict=True)]
        if n_exp:
            states = [v + math.ceil(n_exp * x / de) for v, x, (_, de) in zip(states, kinds, div, strict=True)]
        detail = None if model is None else _stage_activations(
            model, plan, stage, s=seq_len, b=batch_size, act_bytes=act_bytes, tp=tp, pp=pp,
            sp=sequence_parallel, v=virtual_stages)
        copies = math.ceil(n * copy_bytes * share + n_exp * copy_bytes)
        transient = None if model is None else _loss_gradients(model, stage, s=seq_len, b=batch_size, t=tp)
        total = sum(states) + copies + (detail.total if detail else 0) + (transient or 0)
        if best is None or total > best[0]:
            best = (total, stage, n, n_exp, states, copies, detail, transient)
    total, stage, n_gpu, n_exp, states, copies, detail, transient = best
    parameters, gradients, optimizer_state, master_weights = states

    if precision in ("bf16_mixed", "fp16_mixed"):
        assumptions.append("gradients are kept in 16 bits (ZeRO's 2+2+12 accounting); fp32 "
                           "gradient accumulation, as in Megatron-LM, adds 2 bytes per parameter")
    if precision == "bf16_autocast":
        assumptions.append("autocast: fp32 weights, gradients and optimizer state; matmul inputs "
                           "and weight copies in bf16; residual stream and logits in fp32")
    if optimizer == "adamw_8bit":
        assumptions.append("8-bit states: 1 byte each plus an fp32 absmax per 2048 elements")
    assumptions.append("excludes the CUDA context, allocator fragmentation and communication buffers")
    return TrainingMemory(
        params=n_params, params_per_gpu=n_gpu + n_exp, expert_params_per_gpu=n_exp,
        bytes_per_param=per.total,
        bytes_per_param_detail=per, parameters=parameters, gradients=gradients,
        optimizer_state=optimizer_state, master_weights=master_weights, weight_copies=copies,
        activations=None if detail is None else detail.total, transient=transient, total=total,
        total_gib=total / GIB,
        model_state_bytes=math.ceil(n_params * per.total),
        checkpoint_bytes=checkpoint_bytes(n_params, precision, optimizer),
        pipeline_stage=stage, gpu=None if gpu is None else gpu.id,
        gpu_memory_bytes=None if gpu is None else gpu.memory_bytes,
        fits=None if gpu is None else total <= gpu.memory_bytes,
        headroom=None if gpu is None else gpu.memory_bytes - total,
        activation_detail=detail, assumptions=assumptions,
    )


@dataclass(slots=True)
class MaxModel:
    """The largest parameter count whose model state fits, activations aside."""

    max_params: int
    gpu: str
    num_gpus: int
    zero_stage: int
    memory_per_gpu_bytes: int
    usable_memory_per_gpu_bytes: int
    bytes_per_param: float
    """Model-state bytes per parameter before sharding."""
    bytes_per_param_per_gpu: float
    """What each GPU holds per parameter after ZeRO sharding over num_gpus."""
    bytes_per_param_detail: StateBytes
    assumptions: list[str]

    __pydantic_config__ = RECORD


def max_model(*, gpu: Accelerator, num_gpus: int, precision: Precision, optimizer: Optimizer,
              zero_stage: int = 3, usable_memory_fraction: float = 1.0) -> MaxModel:
    """Largest N with per-GPU model state <= usable memory: every GPU is a
    data-parallel rank, and ZeRO stage k shards as in training_memory."""
    per = state_bytes_per_param(precision, optimizer)
    d = num_gpus

    def part(x: float, sharded: bool) -> float:
        return x / d if sharded else x

    per_gpu = (part(per.parameters + PRECISIONS[precision].weight_copy, zero_stage >= 3)
               + part(per.gradients, zero_stage >= 2)
               + part(per.optimizer_state + per.master_weights, zero_stage >= 1))
    usable = math.floor(gpu.memory_bytes * usable_memory_fraction)
    return MaxModel(
        max_params=math.floor(usable / per_gpu), gpu=gpu.id, num_gpus=num_gpus,
        zero_stage=zero_stage, memory_per_gpu_bytes=gpu.memory_bytes,
        usable_memory_per_gpu_bytes=usable, bytes_per_param=per.total,
        bytes_per_param_per_gpu=per_gpu, bytes_per_param_detail=per,
        assumptions=["activations, the CUDA context and buffers are not counted",
                     "zero_stage 3 spreads all model state over the GPUs: the course's "
                     "total-memory / bytes-per-parameter estimate"],
    )
