"""What would make a serving setup fit, as the inference answers say it: the smallest change
found, each checked by the memory calculator before it is given. Tried in order: fewer
sequences at once, more tensor-parallel ranks of the GPUs asked for, a smaller weight format
on them, more GPUs (one replica over all of them)."""

from app.accounting.errors import InvalidInput
from app.accounting.inference import capacity, formats
from app.accounting.inference.setup import Setup

MORE_GPUS = (2, 4, 8, 16, 32, 64)
SMALLER = ("fp8_e4m3", "int8_channel", "awq_int4")
"""Formats vLLM serves, largest first (services.fit's SERVED, bf16 aside)."""


def advice(body, setup: Setup, context: int, concurrency: int) -> str | None:
    """None where `concurrency` sequences of `context` tokens fit on `setup`. `body`: the
    ServingRequest asked (services.inference), whose setup() builds each variant."""
    if capacity.fits(setup, context=context, concurrency=concurrency):
        return None
    most = capacity.max_sequences(setup, context)
    if most >= 1:
        return f"fits at concurrency {most:,} (sequences of {context:,} tokens at once)"
    n = body.num_gpus
    ranks = [d for d in range(setup.tensor_parallel, n + 1) if n % d == 0]
    for tp in ranks[1:]:
        if _fits(body, {}, tp, context):
            return f"fits with tensor_parallel {tp}"
    bits = formats.FORMATS[body.weight_format].bits_per_weight
    for fmt in (f for f in SMALLER if formats.FORMATS[f].bits_per_weight < bits):
        for tp in ranks:
            if _fits(body, {"weight_format": fmt}, tp, context):
                name = formats.FORMATS[fmt].name.split(",")[0]
                return f"fits in {name} (weight_format {fmt}, tensor_parallel {tp})"
    for more in (m for m in MORE_GPUS if m > n):
        if _fits(body, {"num_gpus": more}, more, context):
            return f"fits on {more} GPUs (tensor_parallel {more})"
    return f"does not fit on {MORE_GPUS[-1]} GPUs in any format tried"


def _fits(body, change: dict, tp: int, context: int) -> bool:
    """One sequence fits with the change made (the change that lets one sequence in is the
    first to try; the concurrency advice then follows from the new answer)."""
    try:
        varied = body.model_copy(update=change)
        return capacity.fits(varied.setup(tp), context=context, concurrency=1)
    except InvalidInput:  # heads or AWQ groups the ranks cannot split, a peak the GPU lacks
        return False
