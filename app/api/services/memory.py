"""Training memory per GPU, and the largest model that fits."""

from typing import Annotated

from pydantic import Field

from app.accounting.training import activations, context, memory
from app.inputs.fields import Input, count, number, sequence_length
from app.inputs.schemas import GpuInput, GpuOverridesIn, GpuRef, ModelOrParams, accelerator, engine_model

Ranks = count(1, 1_000_000)
ContextAlgorithm = Annotated[context.Algorithm, Field(
    description="How context-parallel ranks exchange keys and values: ring (Megatron-LM's p2p: one chunk "
                "arriving at a time, hidden behind the attention core) or all_gather (Llama 3: the whole "
                "sequence's K and V of one layer gathered before attention, exposed).")]
LossChunks = Annotated[count(1, 4096), Field(  # type: ignore[valid-type]
    description="1: the whole sequence's fp32 logits are kept for the loss. More: a fused linear cross-entropy "
                "in that many chunks (Liger-Kernel's, Unsloth's): one chunk's logits and gradients at a time, no "
                "whole-sequence logits kept.")]
"""Fields the plan takes as this calculator does."""


class TrainingMemoryRequest(Input):
    model: ModelOrParams
    precision: memory.TrainPrecision = Field(
        "bf16_mixed", description="fp32: all 4-byte. bf16_mixed/fp16_mixed: 16-bit parameters, "
                                  "gradients and activations, fp32 master weights and optimizer "
                                  "state. bf16: everything 16-bit, no master copy. bf16_autocast: "
                                  "torch.autocast over fp32 training (fp32 states, 16-bit weight "
                                  "copies and matmul inputs, fp32 residual stream). FP8 recipes "
                                  "(Transformer Engine's per-tensor fp8_delayed and fp8_current, "
                                  "DeepSeek-V3's fp8_blockwise): bf16_mixed's states (bf16 Adam moments "
                                  "for fp8_blockwise), two FP8 copies of the decoder layers' linear "
                                  "weights and their inputs kept in FP8.")
    optimizer: memory.Optimizer = "adamw"
    batch_size: count(1, 1_000_000) = Field(
        1, description="Micro-batch size per data-parallel rank, in sequences.")
    seq_len: sequence_length(1, 10_000_000) | None = Field(
        None, description="Tokens per sequence; null means the model's max_seq_len.")
    recompute: activations.TrainRecompute = Field(
        "selective", description="selective (the default: what FlashAttention-era training does, "
                                 "Korthikanti et al. 2022) recomputes the attention core; none keeps "
                                 "every activation; full keeps only each layer's input; op_selective is "
                                 "torchtitan's op-level policy (save matmul and attention outputs but every "
                                 "second matmul's), for dense pre-norm blocks.")
    zero_stage: count(0, 3) = 0
    data_parallel: Ranks = 1
    tensor_parallel: count(1, 1024) = 1
    pipeline_parallel: count(1, 1024) = 1
    expert_parallel: count(1, 65_536) = Field(
        1, description="Ranks over which each mixture-of-experts layer's routed experts are split, "
                       "inside data parallelism (Megatron-LM, DeepSpeed-MoE): it must divide "
                       "data_parallel and n_experts, and ZeRO shards the experts' states over "
                       "data_parallel / expert_parallel ranks. 1 for a dense model.")
    sequence_parallel: bool = Field(
        True, description="With tensor parallelism, also split the activations outside "
                          "attention and MLP (Korthikanti et al.), so all divide by tensor_parallel.")
    virtual_stages: count(1, 1024) = Field(
        1, description="Model chunks per pipeline rank (Megatron-LM's interleaved schedule): the first "
                       "stage holds 1 + (p - 1) / (p v) times the layers' activations of plain 1F1B.")
    first_stage_layers: count(1, 100_000) | None = Field(
        None, description="Decoder layers on the first pipeline stage (Megatron-LM's "
                          "--decoder-first-pipeline-num-layers); null: stages differ by at most a layer, the "
                          "first and last taking fewer (they also hold the embedding and the LM head).")
    last_stage_layers: count(1, 100_000) | None = Field(
        None, description="Decoder layers on the last pipeline stage (--decoder-last-pipeline-num-layers); "
                          "the middle stages share the rest, differing by at most a layer.")
    context_parallel: count(1, 1024) = Field(
        1, description="Ranks splitting each sequence (Megatron-LM's --context-parallel-size): each keeps "
                       "seq_len / context_parallel tokens' activations, and ZeRO shards over data x context "
                       "ranks. seq_len must be a multiple of 2 x context_parallel (causal load balancing).")
    context_parallel_algorithm: ContextAlgorithm = "ring"
    activation_offload: bool = Field(
        False, description="Each layer's saved tensors go to host memory and come back a layer ahead in backward, "
                           "2 layers' kept on the GPU (Megatron-LM's --cpu-offloading, torchtune's "
                           "OffloadActivations); activation_detail.offloaded is what the host holds.")
    loss_chunks: LossChunks = 1  # type: ignore[valid-type]
    gpu: GpuRef | None = Field(None, description="Check the total against this GPU's memory.")
    gpu_overrides: GpuOverridesIn | None = None  # type: ignore[valid-type]

    @property
    def num_gpus(self) -> int:
        return self.data_parallel * self.tensor_parallel * self.pipeline_parallel * self.context_parallel


class MaxModelRequest(GpuInput):
    num_gpus: Ranks = 1
    precision: memory.Precision = "bf16_mixed"
    optimizer: memory.Optimizer = "adamw"
    zero_stage: count(0, 3) = Field(
        3, description="3 spreads all model state over the GPUs; 0 puts a full copy on each.")
    usable_memory_fraction: number(gt=0, le=1) = Field(
        1.0, description="Share of each GPU's memory available to model state.")


def training(body: TrainingMemoryRequest) -> memory.TrainingMemory:
    gpu = accelerator(body.gpu, body.gpu_overrides)
    cfg = None if isinstance(body.model, int) else engine_model(body.model)
    return memory.training_memory(
        model=cfg, params=body.model if cfg is None else None, precision=body.precision,
        optimizer=body.optimizer, batch_size=body.batch_size,
        seq_len=body.seq_len or (cfg.max_seq_len if cfg else 1), recompute=body.recompute,
        zero_stage=body.zero_stage, data_parallel=body.data_parallel,
        tensor_parallel=body.tensor_parallel, pipeline_parallel=body.pipeline_parallel,
        sequence_parallel=body.sequence_parallel, expert_parallel=body.expert_parallel, gpu=gpu,
        virtual_stages=body.virtual_stages, first_stage_layers=body.first_stage_layers,
        last_stage_layers=body.last_stage_layers, context_parallel=body.context_parallel,
        context_parallel_algorithm=body.context_parallel_algorithm, activation_offload=body.activation_offload,
        loss_chunks=body.loss_chunks)


def max_model(body: MaxModelRequest) -> memory.MaxModel:
    return memory.max_model(
        gpu=body.accelerator(), num_gpus=body.num_gpus, precision=body.precision,
        optimizer=body.optimizer, zero_stage=body.zero_stage,
        usable_memory_fraction=body.usable_memory_fraction)
