"""Training memory per GPU: parameters, gradients, optimizer state, master
weights and activations, under ZeRO, tensor and pipeline parallelism.

Model-state bytes follow the ZeRO paper (Rajbhandari et al. 2020, section 3.1):
mixed precision keeps 16-bit parameters and gradients (2 + 2 bytes) and an fp32
master copy plus fp32 optimizer state; with Adam that is 2 + 2 + 4 + 8 = 16
bytes per parameter. ZeRO stage 1 shards optimizer state and master weights
over data-parallel ranks, stage 2 also gradients, stage 3 also parameters.
"""

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

from app.accounting import activations as act
from app.accounting.errors import InvalidInput
from app.accounting.hardware import Accelerator
from app.accounting.models import TransformerConfig, attention_params, count_params, mlp_params, norm_params
from app.accounting.records import RECORD
from app.accounting.units import GIB

Precision = Literal["fp32", "bf16_mixed", "fp16_mixed", "bf16", "bf16_autocast"]
Optimizer = Literal["sgd", "sgd_momentum", "adagrad", "rmsprop", "adam", "adamw", "adamw_8bit"]
Stage = Literal["only", "first", "last"]


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


@lru_cache(maxsize=1024)
def _stage_params(cfg: TransformerConfig, tp: int, pp: int) -> tuple[tuple[Stage, int], ...]:
    """Parameters one GPU holds on the first and last pipeline stage (or the only one).

    Linear weights, the vocabulary-parallel embedding and LM head split over tp
    (Megatron-LM); norms and the biases after row-parallel layers are replicated.
    With tied embeddings and pp > 1 the last stage keeps its own copy to tie.
    """
    # The row-parallel layers are attention's output projection and the MLP's down one.
    row_biases = cfg.d_model * (cfg.has_attn_bias + cfg.has_mlp_bias)
    per_layer_replicated = 2 * norm_params(cfg) + row_biases
    sharded = attention_params(cfg) + mlp_params(cfg) - row_biases
    per_layer = math.ceil(sharded / tp) + per_layer_replicated
    token = math.ceil(cfg.vocab_size * cfg.d_model / tp)
    position = cfg.max_seq_len * cfg.d_model if cfg.position == "learned" else 0
    head = token if (not cfg.tied_embeddings or pp > 1) else 0
    if pp == 1:
        return (("only", cfg.n_layers * per_layer + token + position + norm_params(cfg) + head),)
    layers = math.ceil(cfg.n_layers / pp)
    return (("first", layers * per_layer + token + position),
            ("last", layers * per_layer + norm_params(cfg) + head))


@dataclass(slots=True)
class ActivationDetail:
    """Activation bytes on one GPU of the reported pipeline stage."""

    bytes_per_element: int
    per_layer: dict[str, int]
    """Bytes one layer keeps per micro-batch, by saved tensor."""
    per_layer_total: int
    layers_held: int
    """Layer x micro-batch pairs resident: layers on the stage x micro-batches in flight
    (1F1B keeps pipeline_parallel micro-batches in flight on the first stage)."""
    outside_layers: dict[str, int]
    """Embedding dropout mask (first stage) and final norm, LM head input and fp32 logits
    (last stage)."""
    total: int

    __pydantic_config__ = RECORD


class _Plan(NamedTuple):
    """What a request's memory depends on besides s and b, derived once per config."""

    params: int
    stage_params: tuple[tuple[Stage, int], ...]
    layer: tuple
    embedding: tuple
    head: tuple


@lru_cache(maxsize=1024)
def _plan(cfg: TransformerConfig, tp: int, pp: int, precision: str, recompute: act.Recompute) -> _Plan:
    p = PRECISIONS[precision]
    return _Plan(count_params(cfg).total, _stage_params(cfg, tp, pp),
                 act.layer_recipe(cfg, p.activation, recompute, p.residual), act.embedding_recipe(cfg),
                 act.head_recipe(cfg, p.activation, p.residual))


def _stage_activations(cfg: TransformerConfig, plan: _Plan, stage: Stage, *, s: int, b: int,
                       act_bytes: int, tp: int, pp: int, sp: bool) -> ActivationDetail:
    layer = act.sized(plan.layer, s=s, b=b, t=tp, sequence_parallel=sp)
    outside: dict[str, int] = {}
    if stage == "only":
        held = cfg.n_layers
    elif stage == "first":
        held = math.ceil(cfg.n_layers / pp) * pp
    else:
        held = math.ceil(cfg.n_layers / pp)
    if stage in ("only", "first"):
        in_flight = pp if stage == "first" else 1
        emb = act.sized(plan.embedding, s=s, b=b, t=tp, sequence_parallel=sp)
        outside |= {k: v * in_flight for k, v in emb.items()}
    if stage in ("only", "last"):
        outside |= act.sized(plan.head, s=s, b=b, t=tp, sequence_parallel=sp)
    layer_total = sum(layer.values())
    return ActivationDetail(
        bytes_per_element=act_bytes, per_layer=layer, per_layer_total=layer_total, layers_held=held,
        outside_layers=outside, total=layer_total * held + sum(outside.values()))


def _loss_gradients(cfg: TransformerConfig, stage: Stage, *, s: int, b: int, t: int) -> int:
    """fp32 d(loss)/d(log-probs) and d(loss)/d(logits), both s x b x vocab / t, on the last stage."""
    return 0 if stage == "first" else math.ceil(2 * 4 * s * b * cfg.vocab_size / t)


def _matmul_share(cfg: TransformerConfig) -> float:
    """The fraction of parameters that matmuls read: attention, MLP and the LM head
    (the token embedding when tied)."""
    counts = count_params(cfg)
    return (counts.attention + counts.mlp + cfg.vocab_size * cfg.d_model) / counts.total


@dataclass(slots=True)
class TrainingMemory:
    """Memory on one GPU of the busiest pipeline stage. Bytes unless named otherwise."""

    params: int
    """Parameters of the whole model."""
    params_per_gpu: int
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
    pipeline_parallel: int = 1, sequence_parallel: bool = True, gpu: Accelerator | None = None,
) -> TrainingMemory:
    """Per-GPU training memory. Give `model` (a config) or `params` (a bare count)."""
    tp, pp, dp = tensor_parallel, pipeline_parallel, data_parallel
    assumptions = [f"batch_size {batch_size} is the micro-batch per data-parallel rank"]
    if model is not None:
        if model.n_heads % tp or model.kv_heads % tp:
            raise InvalidInput("tensor_parallel", f"{tp} must divide n_heads ({model.n_heads}) "
                               f"and n_kv_heads ({model.kv_heads})")
        if pp > model.n_layers:
            raise InvalidInput("pipeline_parallel", f"{pp} exceeds n_layers ({model.n_layers})")
        if model.position == "learned" and seq_len > model.max_seq_len:
            raise InvalidInput("seq_len", f"{seq_len} exceeds the model's {model.max_seq_len} "
                               "learned positions")
        plan = _plan(model, tp, pp, precision, recompute)
        n_params, stage_params = plan.params, plan.stage_params
    else:
        n_params = params
        stage_params = (("only", math.ceil(params / (tp * pp))),)
        assumptions.append("a bare parameter count is split evenly over tensor and pipeline "
                           "ranks; activations need the model's shape and are not counted")
    if zero_stage and dp == 1:
        assumptions.append("ZeRO shards over data-parallel ranks; with data_parallel 1 it saves nothing")

    per = state_bytes_per_param(precision, optimizer)
    act_bytes = PRECISIONS[precision].activation
    # Autocast copies the weights matmuls read: not norms, biases' share aside, nor positions.
    matmul_share = 1.0 if model is None else _matmul_share(model)
    # ZeRO stage k divides these model states over the data-parallel ranks.
    p_div, g_div, o_div = (dp if zero_stage >= k else 1 for k in (3, 2, 1))

    best = None
    for stage, n in stage_params:  # one stage, or the first and the last
        states = (math.ceil(n * per.parameters / p_div), math.ceil(n * per.gradients / g_div),
                  math.ceil(n * per.optimizer_state / o_div), math.ceil(n * per.master_weights / o_div))
        detail = None if model is None else _stage_activations(
            model, plan, stage, s=seq_len, b=batch_size, act_bytes=act_bytes, tp=tp, pp=pp,
            sp=sequence_parallel)
        copies = math.ceil(n * PRECISIONS[precision].weight_copy * matmul_share)
        transient = None if model is None else _loss_gradients(model, stage, s=seq_len, b=batch_size, t=tp)
        total = sum(states) + copies + (detail.total if detail else 0) + (transient or 0)
        if best is None or total > best[0]:
            best = (total, stage, n, states, copies, detail, transient)
    total, stage, n_gpu, states, copies, detail, transient = best
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
        params=n_params, params_per_gpu=n_gpu, bytes_per_param=per.total,
        bytes_per_param_detail=per, parameters=parameters, gradients=gradients,
        optimizer_state=optimizer_state, master_weights=master_weights, weight_copies=copies,
        activations=None if detail is None else detail.total, transient=transient, total=total,
        total_gib=total / GIB,
        model_state_bytes=math.ceil(n_params * per.total),
        checkpoint_bytes=math.ceil(n_params * (per.parameters + per.master_weights + per.optimizer_state)),
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
