"""Will it run on my GPU? One model on one GPU kind, served and fine-tuned side by side.

Each option is answered by its own calculator (inference capacity and latency; fine-tuning
memory, FLOPs and time); this module holds the answer's shape and the searches over them:
the largest batch or context that fits, and the smallest change that makes an option fit.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    advice_change: dict[str, Any] | None = None
    """The advice as a change to the request: the fields of POST /api/v1/fit to set, after which this
    option fits; or `option`, another option of the same request that fits instead (a smaller
    weight format, QLoRA for LoRA). Every piece of advice is checked before it is given."""

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


Change = dict[str, Any]
"""Request fields to set (POST /api/v1/fit's), or {"option": another option that fits as asked}."""


def first_fitting(changes: list[tuple[str, Change, Callable[[], bool]]]) -> tuple[str, Change] | None:
    """The first change whose check passes, in the order given (smallest first): its description
    and the change itself."""
    for text, change, works in changes:
        if works():
            return text, change
    return None


def summary(options: list[FitOption], names: dict[str, str]) -> str:
    """One thing per way to run it: "Serving fits in BF16 and AWQ INT4; LoRA: fits with gradient
    checkpointing; QLoRA fits". Serving is one clause: the formats that fit, or, when none does,
    the smallest format's advice. `names`: each option's weight format's name."""
    served = [o for o in options if o.kind == "inference"]
    fitting = [names[o.option] for o in served if o.fits]
    if fitting:
        parts = [f"Serving fits in {_listed(fitting)}"]
    elif served:
        smallest = served[-1]
        parts = [f"Serving does not fit in any format; in {names[smallest.option]} it "
                 f"{smallest.advice or 'does not fit on 64 GPUs'}"]
    else:
        parts = ["Serving: no weight format splits over these GPUs (see the assumptions)"]
    parts += [f"{o.label} fits" if o.fits else f"{o.label}: {o.advice or 'does not fit'}"
              for o in options if o.kind == "training"]
    return "; ".join(parts)


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
