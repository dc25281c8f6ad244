"""One fine-tuning step whole: what trains, its memory per GPU, its FLOPs, and its time at an MFU
(app/accounting/finetune/timing.py: the recompute's FLOPs and a quantized base's dequantization)."""

from dataclasses import dataclass

from app.accounting.calibration.step import StepTime as CalibratedStep
from app.accounting.finetune import spec as ft
from app.accounting.finetune import timing
from app.accounting.finetune.flops import FineTuneFlops, step_flops
from app.accounting.finetune.lora import lora_params
from app.accounting.finetune.memory import QLORA_KEEP, FineTuneMemory, finetune_memory
from app.accounting.finetune.stacks import Options
from app.accounting.finetune.timing import StepTime
from app.accounting.hardware import Accelerator, peak_flop_per_sec
from app.accounting.records import RECORD
from app.accounting.training import activations as act
from app.accounting.training.memory import PEAK_DTYPE, Optimizer, Precision
from app.accounting.transformer import TransformerConfig


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
    calibrated: CalibratedStep | None = None
    """With `calibration`: the step from the device's profile (app/accounting/calibration/step.py)."""

    __pydantic_config__ = RECORD


def finetune_step(cfg: TransformerConfig, spec: ft.FineTune, *, precision: Precision, optimizer: Optimizer,
                  batch_size: int, seq_len: int, recompute: act.Recompute = "selective",
                  paged_optimizer: bool = False, data_parallel: int = 1, zero_stage: int = 0,
                  gpu: Accelerator | None = None, mfu: float = 0.5, stack: str = "tally",
                  options: Options = Options()) -> FineTuneStep:
    """stack: the framework's conventions for the loss and checkpointed activations, and options a
    recipe's flags over them (finetune/stacks.py); they change memory only, the FLOPs and time are
    the same."""
    mem = finetune_memory(cfg, spec, precision=precision, optimizer=optimizer, batch_size=batch_size,
                          seq_len=seq_len, recompute=recompute, paged_optimizer=paged_optimizer,
                          data_parallel=data_parallel, zero_stage=zero_stage, gpu=gpu, stack=stack,
                          options=options)
    flops = step_flops(cfg, spec, batch_size=batch_size, seq_len=seq_len)
    by_target = {}
    if spec.adapted:
        by_target = lora_params(cfg, rank=spec.rank, targets=spec.targets).by_target
    time = None
    if gpu is not None:
        dtype = PEAK_DTYPE[precision]
        peak = peak_flop_per_sec(gpu, dtype, field="precision")
        redo = timing.recompute_flops(cfg, recompute, batch_size=batch_size, seq_len=seq_len,
                                      adapters_forward=flops.adapters_forward)
        moved = timing.dequantize_bytes(cfg, spec, QLORA_KEEP, recompute)
        time = timing.step_time(flops_total=flops.total, redo=redo, moved=moved, gpu=gpu, peak_dtype=dtype,
                                peak=peak, mfu=mfu, tokens=data_parallel * batch_size * seq_len)
    return FineTuneStep(mode=spec.mode, trainable_params=mem.trainable_params,
                        total_params=mem.trainable_params + mem.frozen_params,
                        adapter_params_by_target=by_target, memory=mem, flops=flops, time=time)
