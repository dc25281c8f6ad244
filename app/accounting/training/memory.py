"""Training memory per GPU: parameters, gradients, optimizer state, master weights,
activations, the loss's gradients and the inputs, under ZeRO, tensor and pipeline
parallelism, at the step's peak.

Model-state bytes per parameter are states.py's (the ZeRO paper's accounting); ZeRO stage 1
shards optimizer state and master weights over data-parallel ranks, stage 2 also gradients,
stage 3 also parameters. How parameters split over tensor, pipeline and expert-parallel
ranks, layer by layer, is sharding.py's; routed experts' states shard over data_parallel /
expert_parallel ranks, the rest over data_parallel (data x context with context parallelism).
Each stage's activations are stages.py's, over activations.py's saved tensors. The
total is the largest of the step's phases (phases.py): the start of backward, the LM head's
weight gradient, the end of backward, the optimizer step.
"""

import math
from dataclasses import dataclass

from app.accounting import blocks
from app.accounting.errors import InvalidInput
from app.accounting.hardware import Accelerator, memory_note
from app.accounting.models import TransformerConfig, count_params
from app.accounting.records import RECORD
from app.accounting.training import activations as act
from app.accounting.training import context, fp8
from app.accounting.training import phases, sharding, stages
from app.accounting.training.stages import ActivationDetail, in_flight_layers
from app.accounting.training.sharding import (
    PipeStage,
    Stage,
    check_parallel,
    interleaves,
    kv_replicas,
    split_layers,
)
from app.accounting.training.states import (
    BLOCKWISE_8BIT_BLOCK,
    OPTIMIZER_STATES,
    PEAK_DTYPE,
    PRECISIONS,
    MaxModel,
    Optimizer,
    Precision,
    PrecisionBytes,
    StateBytes,
    TrainPrecision,
    checkpoint_bytes,
    max_model,
    optimizer_bytes_per_param,
    state_bytes_per_param,
)
from app.accounting.units import GIB

__all__ = ["BLOCKWISE_8BIT_BLOCK", "OPTIMIZER_STATES", "PEAK_DTYPE", "PRECISIONS", "MaxModel", "Optimizer",
           "Precision", "PrecisionBytes", "StateBytes", "TrainPrecision", "checkpoint_bytes", "max_model",
           "optimizer_bytes_per_param", "state_bytes_per_param", "ActivationDetail", "TrainingMemory",
           "training_memory", "matmul_share", "in_flight_layers"]
# (states.py's names are re-exported: callers have always imported them from here.)


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


def _layer_params(cfg: TransformerConfig, tp: int, ep: int) -> int:
    """Parameters one GPU holds of the model's largest layer, routed experts included."""
    return max(sum(sharding.layer_on_gpu(layer, tp, ep)) for layer, _ in blocks.distinct(cfg))


def _largest(cfg: TransformerConfig, stage: PipeStage, tp: int, ep: int) -> int:
    """Elements of the largest parameter tensor one GPU of `stage` holds."""
    return phases.largest_param(cfg, layers=stage.layers, embedding=stage.kind in ("only", "first"),
                                head=stage.kind in ("only", "last"), tp=tp, ep=ep)


@dataclass(slots=True)
class StageMemory:
    """One pipeline stage's peak on one of its GPUs."""

    stage: int
    """Rank in the pipeline, 0 the first."""
    kind: Stage
    layers: int
    total: int
    activations: int

    __pydantic_config__ = RECORD


FSDP_WITH_PIPELINE_NOTE = (
    "ZeRO-2/3 (FSDP) with pipeline parallelism: parameters are gathered once per step and kept, and "
    "gradients accumulate unsharded until the last micro-batch's backward reduce-scatters them "
    "(torch.distributed.pipelining's stage backward sets reshard_after_backward and gradient sync off "
    "but for the last micro-batch; torchtitan keeps parameters after forward when pp > 1), so at the "
    "peak only optimizer state and master weights are sharded, as with ZeRO-1")


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
    """Short-lived buffers at the start of the backward pass: the cross-entropy backward's fp32
    gradients with respect to the log-probabilities and the logits (2 x 4 x s x b x vocab / t
    bytes, last stage), made while every activation is still held. null with a bare parameter
    count."""
    inputs: int
    """The micro-batch's token ids (first stage) and targets (last stage), int64: 16 bytes a token
    on one stage. 0 with a bare parameter count."""
    optimizer_temporaries: int
    """Tensors the optimizer step makes beside the states: none for fused Adam, AdamW and 8-bit
    AdamW (phases.FUSED) or SGD (in place); for Adagrad and RMSprop, torch's per-tensor loop
    (foreach=False) makes one the size of the largest parameter tensor this GPU steps."""
    start_of_backward: int
    """Live bytes as backward starts: every kind above (states, weight copies, activations,
    transient, inputs). The total before the step's later phases were counted."""
    phases: dict[str, int]
    """Live bytes at each moment of the step that can hold the peak (phases.py): start_of_backward;
    on a stage holding the LM head, lm_head_weight_gradient (its weight gradient made while the
    activations and the logits' gradient are held) and end_of_backward (with tied embeddings, the
    head's and the embedding's gradients and their sum); optimizer_step (states and temporaries)."""
    peak_phase: str
    """The phase whose bytes are the total."""
    total: int
    """The step's peak on one GPU: the largest of phases, what the train_step probe measures and
    sets this prediction beside."""
    total_gib: float
    model_state_bytes: int
    """Model state of the whole model, unsharded: params x bytes_per_param."""
    checkpoint_bytes: int
    """What a full checkpoint holds: parameters, master weights and optimizer state of the
    whole model (no gradients, no activations)."""
    pipeline_stage: Stage
    """The stage reported: the only one, or whichever of the first, middles and last needs most."""
    pipeline_stage_index: int
    """Its rank in the pipeline, 0 the first."""
    pipeline_split: list[int]
    """Decoder layers on each stage, first to last; empty with a bare parameter count."""
    stages: list[StageMemory]
    """Each stage whose memory can be the peak (the first, the last, the earliest middle stage of
    each layer count): its peak bytes; the busiest decides the total."""
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
    *, model: TransformerConfig | None, params: int | None, precision: TrainPrecision,
    optimizer: Optimizer, batch_size: int, seq_len: int, recompute: act.TrainRecompute = "none",
    zero_stage: int = 0, data_parallel: int = 1, tensor_parallel: int = 1,
    pipeline_parallel: int = 1, sequence_parallel: bool = True, expert_parallel: int = 1,
    gpu: Accelerator | None = None, virtual_stages: int = 1, fused_optimizer: bool | None = None,
    largest_param: int | None = None, first_stage_layers: int | None = None,
    last_stage_layers: int | None = None, context_parallel: int = 1,
    context_parallel_algorithm: context.Algorithm = "ring", activation_offload: bool = False,
    loss_chunks: int = 1,
) -> TrainingMemory:
    """Per-GPU training memory at the step's peak (phases.py). Give `model` (a config) or `params`
    (a bare count). virtual_stages: model chunks per pipeline rank (the interleaved schedule's v).
    fused_optimizer: the optimizer step makes no temporaries; None assumes what a GPU runs
    (phases.FUSED). largest_param: elements of the largest tensor the optimizer steps on this GPU;
    None reads it from the model's weights (a probe's own model passes its own).
    first_stage_layers, last_stage_layers: the pipeline's stage split (sharding.split_layers);
    None its default. context_parallel: ranks splitting each sequence (context.py)."""
    tp, pp, dp, ep, cp = tensor_parallel, pipeline_parallel, data_parallel, expert_parallel, context_parallel
    assumptions = [f"batch_size {batch_size} is the micro-batch per data-parallel rank"]
    check_parallel(model, tp=tp, pp=pp, dp=dp, ep=ep)
    split = None
    if model is not None:
        split = split_layers(model.n_layers, pp, first_stage_layers, last_stage_layers)
    elif first_stage_layers is not None or last_stage_layers is not None:
        raise InvalidInput("first_stage_layers", "a stage split needs the model's layers, not a bare "
                                                 "parameter count")
    if virtual_stages > 1 and (pp == 1 or model is None or not interleaves(split, virtual_stages)):
        raise InvalidInput("virtual_stages", f"{virtual_stages} chunks per pipeline rank need "
                           "pipeline_parallel > 1 and virtual_stages dividing each stage's layers (or, with "
                           "the embedding and the loss counted as a layer of the first and the last stage, "
                           "each stage's slots: Megatron-LM)")
    if (activation_offload or loss_chunks > 1) and model is None:
        raise InvalidInput("activation_offload" if activation_offload else "loss_chunks",
                           "applies to activations, which need the model's shape, not a bare parameter count")
    if loss_chunks > 1:
        assumptions.append(stages.LOSS_CHUNKS_NOTE.format(n=loss_chunks))
    if activation_offload:
        assumptions.append(stages.OFFLOAD_NOTE)
    if cp > 1:
        seq_len = context.local_tokens(seq_len, cp, model)
        assumptions.append(context.NOTE.format(cp=cp))
    if model is not None:
        if model.position == "learned" and seq_len > model.max_seq_len:
            raise InvalidInput("seq_len", f"{seq_len} exceeds the model's {model.max_seq_len} "
                               "learned positions")
        if pp > 1 and len(set(split)) > 1:
            assumptions.append("pipeline stages hold " + ", ".join(map(str, split)) + " layers, first to last")
        plan = stages.plan_of(model, tp, pp, ep, precision, recompute, split)
        n_params, by_stage = plan.params, plan.stage_params
        assumptions += _model_notes(model, tp=tp, dp=dp, ep=ep, zero_stage=zero_stage)
    else:
        n_params = params
        by_stage = ((PipeStage("only", 0, range(0)), math.ceil(params / (tp * pp)), 0),)
        assumptions.append("a bare parameter count is split evenly over tensor and pipeline "
                           "ranks; activations need the model's shape and are not counted")
    if zero_stage and dp * cp == 1:
        assumptions.append("ZeRO shards over data-parallel ranks; with data_parallel 1 it saves nothing")
    shard = dp * cp  # context-parallel ranks hold the same weights: ZeRO shards over both (Megatron-LM)
    held_whole = zero_stage >= 2 and pp > 1
    if held_whole:
        assumptions.append(FSDP_WITH_PIPELINE_NOTE)

    per = state_bytes_per_param(precision, optimizer)
    width = PRECISIONS[precision]
    # Autocast copies the weights matmuls read: not norms, biases' share aside, nor positions; an FP8
    # recipe the decoder layers' linear weights only.
    share = 1.0 if model is None else fp8.linear_share(model) if fp8.is_fp8(precision) else matmul_share(model)
    if fp8.is_fp8(precision):
        assumptions.append(fp8.NOTE.format(recipe=precision))
    # ZeRO-3 with no pipeline gathers one layer at a time: an FP8 cast exists for the gathered layers only.
    fsdp_fp8 = fp8.is_fp8(precision) and zero_stage >= 3 and pp == 1 and dp * cp > 1 and model is not None
    if fsdp_fp8:
        assumptions.append(fp8.FSDP_NOTE)
    # ZeRO stage k divides these model states over the data-parallel ranks; routed experts'
    # over the data-parallel ranks that hold the same experts, dp / ep (Megatron-LM's expert
    # data-parallel group, DeepSpeed-MoE's expert data parallelism).
    div = [(shard if zero_stage >= k else 1, shard // ep if zero_stage >= k else 1) for k in (3, 2, 1, 1)]
    if held_whole:  # parameters and gradients whole through the step's micro-batches
        div[0] = div[1] = (1, 1)
    kinds = (per.parameters, per.gradients, per.optimizer_state, per.master_weights)
    fused = optimizer in phases.FUSED if fused_optimizer is None else fused_optimizer

    best, per_stage = None, []
    for stage, n, n_exp in by_stage:  # one stage, or the first, middles and last
        states = [math.ceil(n * x / d) for x, (d, _) in zip(kinds, div, strict=True)]
        if n_exp:
            states = [v + math.ceil(n_exp * x / de) for v, x, (_, de) in zip(states, kinds, div, strict=True)]
        detail = None if model is None else stages.stage_activations(
            model, plan, stage, s=seq_len, b=batch_size, act_bytes=width.activation, tp=tp, pp=pp,
            sp=sequence_parallel, v=virtual_stages, offload=activation_offload, loss_chunks=loss_chunks)
        parts = dict(zip(phases.PARTS[:4], states, strict=True))
        copied = (n * share + n_exp) if not fsdp_fp8 else fp8.FSDP_LAYERS_CAST * _layer_params(model, tp, ep)
        parts |= {"weight_copies": math.ceil(copied * width.weight_copy),
                  "activations": detail.total if detail else 0,
                  "transient": 0 if model is None else stages.loss_gradients(model, stage.kind, s=seq_len,
                                                                         b=batch_size, t=tp, chunks=loss_chunks)
                  + (context.gathered_kv_bytes(model, seq_len, batch_size, cp, tp, width.activation,
                                              context_parallel_algorithm) if cp > 1
                     else 0),
                  "inputs": 0 if model is None else phases.token_inputs(
                      seq_len * batch_size, ids=stage.kind in ("only", "first"),
                      targets=stage.kind in ("only", "last"))}
        head = model is not None and stage.kind in ("only", "last")
        later = None if not head else phases.lm_head_phases(
            parts, vocab_size=model.vocab_size, d_model=model.d_model, tied=model.tied_embeddings and pp == 1,
            grad_bytes=width.grad, tensor_parallel=tp)
        largest = largest_param
        if largest is None:  # only a per-tensor optimizer loop sizes anything by it
            largest = 0 if fused or model is None else -(-_largest(model, stage, tp, ep) // div[2][0])
        peak = phases.step_peak(parts, largest_param=largest, optimizer=optimizer, fused=fused, later=later,
                                state_bytes=width.optimizer_state)
        per_stage.append(StageMemory(stage=stage.index, kind=stage.kind, layers=len(stage.layers),
                                     total=peak["total"], activations=detail.total if detail else 0))
        if best is None or peak["total"] > best[0]["total"]:
            best = (peak, stage, n, n_exp, detail)
    peak, stage, n_gpu, n_exp, detail = best
    assumptions += phases.notes(optimizer, fused=fused, shaped=model is not None or largest_param is not None)

    if precision in ("bf16_mixed", "fp16_mixed"):
        assumptions.append("gradients are kept in 16 bits (ZeRO's 2+2+12 accounting); fp32 "
                           "gradient accumulation, as in Megatron-LM, adds 2 bytes per parameter")
    if precision == "bf16_autocast":
        assumptions.append("autocast: fp32 weights, gradients and optimizer state; matmul inputs "
                           "and weight copies in bf16; residual stream and logits in fp32")
    if optimizer == "adamw_8bit":
        assumptions.append("8-bit states: 1 byte each plus an fp32 absmax per 2048 elements")
    assumptions.append("excludes the CUDA context, allocator fragmentation and communication buffers")
    if gpu is not None:
        assumptions.append(memory_note(gpu))
    total = peak["total"]
    moments = {k: peak[k] for k in phases.PHASES if k in peak}
    return TrainingMemory(
        params=n_params, params_per_gpu=n_gpu + n_exp, expert_params_per_gpu=n_exp,
        bytes_per_param=per.total, bytes_per_param_detail=per,
        **{k: peak[k] for k in ("parameters", "gradients", "optimizer_state", "master_weights")},
        weight_copies=peak["weight_copies"], activations=None if detail is None else detail.total,
        transient=None if model is None else peak["transient"], inputs=peak["inputs"],
        optimizer_temporaries=peak["optimizer_temporaries"], start_of_backward=peak["start_of_backward"],
        phases=moments, peak_phase=max(moments, key=moments.__getitem__), total=total, total_gib=total / GIB,
        model_state_bytes=math.ceil(n_params * per.total),
        checkpoint_bytes=checkpoint_bytes(n_params, precision, optimizer),
        pipeline_stage=stage.kind, pipeline_stage_index=stage.index,
        pipeline_split=list(split) if split is not None else [], stages=per_stage,
        gpu=None if gpu is None else gpu.id,
        gpu_memory_bytes=None if gpu is None else gpu.memory_bytes,
        fits=None if gpu is None else total <= gpu.memory_bytes,
        headroom=None if gpu is None else gpu.memory_bytes - total,
        activation_detail=detail, assumptions=assumptions,
    )
