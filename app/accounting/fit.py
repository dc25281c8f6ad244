"""Will it run on my GPU? One model on one GPU kind, served and fine-tuned side by side.

Each option is answered by its own calculator (inference capacity and latency; fine-tuning
memory, FLOPs and time); this module holds the answer's shape and the searches over them:
the largest batch or context that fits, and the smallest change that makes an option fit.
"""

from collections.abc import Callable
from dataclasses import dataclass

from app.accounting.records import RECORD

Kind = str  # "inference" | "training"


@dataclass(slots=True)
class FitOption:
    """One way to run the model. Bytes per GPU."""

    option: str
    """inference-<weight format>, lora, qlora or full."""
    kind: str
    """inference or training."""
    label: str
    settings: dict[str, str | bool | int | float]
    """What the option assumes (format, precision, optimizer, recompute, ZeRO stage...)."""
    fits: bool
    total_bytes: int
    usable_bytes: int
    """What the option may use of each GPU's memory (inference: gpu_memory_utilization of it)."""
    bytes_by_kind: dict[str, int]
    """The stack: inference weights, kv_cache, workspace, overhead; training frozen_weights,
    trainable_weights, gradients, optimizer_state, master_weights, activations, transient and inputs
    (the start of backward), and peak_phase_extra, what the step's peak moment (the LM head's weight
    gradient, the end of backward or the optimizer step) holds beyond it."""
    largest_batch: int
    """Sequences of seq_len tokens that fit (per GPU for training, over all replicas serving)."""
    largest_context: int
    """Tokens per sequence that fit at batch_size (capped by the model's max_seq_len)."""
    seconds: float | None
    """Per step (training) or per output token (inference decode at batch_size)."""
    time_unit: str
    tokens_per_sec: float | None
    advice: str | None
    """When it does not fit: the smallest change found that makes it fit."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class FitAnswer:
    model: str
    gpu: str
    gpu_name: str
    num_gpus: int
    gpu_memory_bytes: int
    seq_len: int
    batch_size: int
    options: list[FitOption]
    summary: str
    """One line: what fits, and for what does not, the change that makes it."""
    assumptions: list[str]

    __pydantic_config__ = RECORD


def largest(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [low, high] with fits(n), fits monotone (true then false); low - 1
    when none does. Bisection: about log2(high - low) calls."""
    if not fits(low):
        return low - 1
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def first_fitting(changes: list[tuple[str, Callable[[], bool]]]) -> str | None:
    """The description of the first change whose check passes, in the order given (smallest first)."""
    for text, works in changes:
        if works():
            return text
    return None


def summary(options: list[FitOption]) -> str:
    """"Serving fits in bfloat16, awq_int4; QLoRA fits; LoRA: fits with ...": what fits, and each
    option that does not with its advice."""
    served = [o for o in options if o.kind == "inference"]
    fitting = [o.settings["weight_format"] for o in served if o.fits]
    parts = [f"Serving fits in {', '.join(map(str, fitting))}"] if fitting else []
    parts += [f"Serving in {o.settings['weight_format']}: {o.advice or 'does not fit'}"
              for o in served if not o.fits]
    parts += [f"{o.label} fits" if o.fits else f"{o.label}: {o.advice or 'does not fit'}"
              for o in options if o.kind == "training"]
    return "; ".join(parts)
