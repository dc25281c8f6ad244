"""Model-state bytes per parameter: parameters, gradients, optimizer state and master weights in
each training precision, what a checkpoint holds, and the largest model whose states fit.

They follow the ZeRO paper (Rajbhandari et al. 2020, section 3.1): mixed precision keeps 16-bit
parameters and gradients (2 + 2 bytes) and an fp32 master copy plus fp32 optimizer state; with
Adam that is 2 + 2 + 4 + 8 = 16 bytes per parameter. ZeRO stage 1 shards optimizer state and
master weights over data-parallel ranks, stage 2 also gradients, stage 3 also parameters.
"""

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from app.accounting.hardware import Accelerator
from app.accounting.records import RECORD

Precision = Literal["fp32", "bf16_mixed", "fp16_mixed", "bf16", "bf16_autocast"]
Fp8Recipe = Literal["fp8_delayed", "fp8_current", "fp8_blockwise"]
TrainPrecision = Literal[Precision, Fp8Recipe]
"""What a pretraining plan and its memory take: a precision, or an FP8 training recipe (fp8.py)."""
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
    """Bytes per matmul weight of the per-step copies kept for backward: autocast's 16-bit cache, or
    an FP8 recipe's two 1-byte casts (row- and column-wise, the second for the backward GEMMs)."""
    linear_input: int = 0
    """Bytes per element of the inputs linear layers keep for their weight gradients; 0: activation's.
    FP8 recipes keep them cast to FP8."""


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
    # FP8 training recipes (fp8.py): bf16 parameters and gradients, fp32 master weights, the decoder
    # layers' linear weights cast to FP8 both ways each step, and those layers' inputs kept in FP8.
    # Transformer Engine's per-tensor recipes keep fp32 Adam moments; DeepSeek-V3 keeps them in bf16
    # (DeepSeek-V3 technical report, section 3.3.3, "Low-Precision Optimizer States").
    "fp8_delayed": PrecisionBytes(param=2, grad=2, master=4, optimizer_state=4, activation=2, residual=2,
                                  weight_copy=2, linear_input=1),
    "fp8_current": PrecisionBytes(param=2, grad=2, master=4, optimizer_state=4, activation=2, residual=2,
                                  weight_copy=2, linear_input=1),
    "fp8_blockwise": PrecisionBytes(param=2, grad=2, master=4, optimizer_state=2, activation=2, residual=2,
                                    weight_copy=2, linear_input=1),
}

# The dtype each precision's matmuls run in: whose dense peak its step time divides by.
# FP8 recipes: bfloat16, the dense peak their MFU is stated against (Llama 3, DeepSeek-V3); their
# decoder layers' linear GEMMs run at the float8 peak (fp8.py).
PEAK_DTYPE = {"fp32": "float32", "bf16_autocast": "bfloat16", "bf16_mixed": "bfloat16",
              "fp16_mixed": "float16", "bf16": "bfloat16", "fp8_delayed": "bfloat16", "fp8_current": "bfloat16",
              "fp8_blockwise": "bfloat16"}

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
