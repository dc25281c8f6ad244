"""A fine-tuning step's time: its matmul FLOPs, the recompute's included, at an MFU of the dense
peak; and for a quantized (QLoRA) base, the dequantization of each weight before each matmul
that uses it, at the memory bandwidth.

Recompute redoes forward work in backward: full recompute (gradient checkpointing, as
transformers' and peft's `gradient_checkpointing_enable` checkpoints each decoder layer) reruns
every layer's forward, adapters included, but not the LM head; selective recomputes attention's
core (its scores and weighted values), as the training engine counts it (plan/step.py).

bitsandbytes' 4-bit and 8-bit linears dequantize the whole weight to the compute dtype before
each matmul (forward, and backward for the gradient of the input, and once more in a recomputed
forward): reading the packed weight (bits_per_weight / 8 bytes) and writing 2-byte values, a
memory-bound pass with nothing to hide it. Counted at the datasheet bandwidth: a lower bound on
what QLoRA adds to LoRA."""

from dataclasses import dataclass

from app.accounting.finetune import spec as ft
from app.accounting.flops import transformer_forward
from app.accounting.hardware import Accelerator
from app.accounting.inference import formats
from app.accounting.inference.quant import weight_bytes
from app.accounting.records import RECORD
from app.accounting.training import activations as act
from app.accounting.transformer import TransformerConfig

DEQUANTIZED_BYTES_PER_VALUE = 2
"""bf16 or fp16 values written by the dequantization (bitsandbytes' compute dtype)."""


@dataclass(slots=True)
class StepTime:
    """The step at a model-FLOPs utilization: every data-parallel rank runs its micro-batch."""

    peak_dtype: str
    peak_flop_per_sec: float
    """Dense peak of one GPU."""
    mfu: float
    """The share of the dense peak the step's FLOPs (those it really does: frozen weights' skipped
    gradients are not counted, the recompute's are) run at."""
    seconds: float
    """compute_seconds + dequantize_seconds."""
    tokens_per_sec: float
    """Over all data-parallel ranks."""
    recompute_flops: int = 0
    """Forward FLOPs the recompute redoes in backward (0 with none)."""
    compute_seconds: float = 0.0
    """(step FLOPs + recompute_flops) / (peak x mfu)."""
    dequantize_bytes: int = 0
    """Bytes a quantized base's dequantizations read and write in one step (0 without one)."""
    dequantize_seconds: float = 0.0
    """dequantize_bytes / the GPU's memory bandwidth."""

    __pydantic_config__ = RECORD


def recompute_flops(cfg: TransformerConfig, recompute: act.Recompute, *, batch_size: int, seq_len: int,
                    adapters_forward: int) -> int:
    """The forward FLOPs a step redoes (module docstring)."""
    if recompute == "none":
        return 0
    fwd = transformer_forward(cfg, batch_size, seq_len)
    if recompute == "selective":
        return fwd.attention_scores + fwd.attention_values
    return fwd.total - fwd.lm_head + adapters_forward


def dequantize_bytes(cfg: TransformerConfig, spec: ft.FineTune, keep: tuple[str, ...], recompute: act.Recompute) -> int:
    """Bytes one step's dequantizations move: the packed weights read and their 16-bit values written,
    per use (forward, backward, and a fully recomputed forward)."""
    if spec.mode != "qlora":
        return 0
    fmt = formats.FORMATS[spec.base_format]
    packed = weight_bytes(cfg, spec.base_format, keep=keep).by_storage.get(fmt.id, 0)
    values = round(packed * 8 / fmt.bits_per_weight)
    uses = 2 + (recompute == "full")
    return uses * (packed + values * DEQUANTIZED_BYTES_PER_VALUE)


def step_time(*, flops_total: int, redo: int, moved: int, gpu: Accelerator, peak_dtype: str, peak: float,
              mfu: float, tokens: int) -> StepTime:
    compute = (flops_total + redo) / (peak * mfu)
    dequantize = moved / gpu.memory_bandwidth_bytes_per_sec
    seconds = compute + dequantize
    return StepTime(peak_dtype=peak_dtype, peak_flop_per_sec=peak, mfu=mfu, seconds=seconds,
                    tokens_per_sec=tokens / seconds, recompute_flops=redo, compute_seconds=compute,
                    dequantize_bytes=moved, dequantize_seconds=dequantize)
