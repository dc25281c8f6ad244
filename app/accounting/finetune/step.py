"""One fine-tuning step whole: what trains, its memory per GPU, its FLOPs, and its time at an MFU."""

from dataclasses import dataclass

from app.accounting.finetune import spec as ft
from app.accounting.finetune.flops import FineTuneFlops, step_flops
from app.accounting.finetune.lora import lora_params
from app.accounting.finetune.memory import FineTuneMemory, finetune_memory
from app.accounting.hardware import Accelerator, peak_flop_per_sec
from app.accounting.records import RECORD
from app.accounting.training import activations as act
from app.accounting.training.memory import PEAK_DTYPE, Optimizer, Precision
from app.accounting.transformer import TransformerConfig


@dataclass(slots=True)
class StepTime:
    """The step at a model-FLOPs utilization: every data-parallel rank runs its micro-batch."""

    peak_dtype: str
    peak_flop_per_sec: float
    """Dense peak of one GPU."""
    mfu: float
    """The share of the dense peak the step's FLOPs (those it really does: frozen weights' skipped
    gradients are not counted) run at."""
    seconds: float
    tokens_per_sec: float
    """Over all data-parallel ranks."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class FineTuneStep:
    mode: str
    trainable_params: int
    total_params: int
    """The base's parameters plus the adapters and saved copies."""
    adapter_params_by_target: dict[str, int]
    """lora, qlora: r x (in + out) summed per target; empty otherwise."""
    memory: FineTuneMemory
    flops: FineTuneFlops
    """Per data-parallel rank (its micro-batch)."""
    time: StepTime | None
    """null without a gpu."""

    __pydantic_config__ = RECORD


def finetune_step(cfg: TransformerConfig, spec: ft.FineTune, *, precision: Precision, optimizer: Optimizer,
                  batch_size: int, seq_len: int, recompute: act.Recompute = "selective",
                  paged_optimizer: bool = False, data_parallel: int = 1, zero_stage: int = 0,
                  gpu: Accelerator | None = None, mfu: float = 0.5) -> FineTuneStep:
    mem = finetune_memory(cfg, spec, precision=precision, optimizer=optimizer, batch_size=batch_size,
                          seq_len=seq_len, recompute=recompute, paged_optimizer=paged_optimizer,
                          data_parallel=data_parallel, zero_stage=zero_stage, gpu=gpu)
    flops = step_flops(cfg, spec, batch_size=batch_size, seq_len=seq_len)
    by_target = {}
    if spec.adapted:
        by_target = lora_params(cfg, rank=spec.rank, targets=spec.targets).by_target
    time = None
    if gpu is not None:
        dtype = PEAK_DTYPE[precision]
        peak = peak_flop_per_sec(gpu, dtype, field="precision")
        seconds = flops.total / (peak * mfu)
        time = StepTime(peak_dtype=dtype, peak_flop_per_sec=peak, mfu=mfu, seconds=seconds,
                        tokens_per_sec=data_parallel * batch_size * seq_len / seconds)
    return FineTuneStep(mode=spec.mode, trainable_params=mem.trainable_params,
                        total_params=mem.trainable_params + mem.frozen_params,
                        adapter_params_by_target=by_target, memory=mem, flops=flops, time=time)
