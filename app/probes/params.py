"""What every probe accepts: its timing fields, strict and bounded, and the rules every
probe's sizing shares (the timer's flush buffer, the ranks of a multi-process probe). Each
probe's own parameters live in its module. Torch-free, so the server validates and sizes a job
before it is queued, and the child parses the same model and reads the same defaults.
"""

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from app.accounting.errors import InvalidInput
from app.inputs.fields import Input, count, number

Device = Literal["auto", "cuda", "cpu"]

MIB = 2**20


def rule(message: str) -> PydanticCustomError:
    """A rule across fields, which a JSON schema cannot state: reported like the engine's."""
    return PydanticCustomError("invalid_input", message)


class ProbeParams(Input):
    device: Device = Field("auto", description="cuda when the worker has one, else cpu.")
    seed: count(0, 2**31 - 1) = Field(0, description="Seeds torch, numpy and random.")
    warmup_s: number(ge=0, le=60) = Field(
        0.2, description="Warm-up, in seconds of running, before anything is timed (at least one run).")
    measure_s: number(ge=0.001, le=600) = Field(
        0.5, description="Time budget per measurement; the iteration count follows from it.")
    min_iters: count(1, 10_000) = Field(5, description="Timed iterations at least.")
    max_iters: count(1, 100_000) = Field(200, validate_default=True, description="Timed iterations at most.")

    @field_validator("max_iters")
    @classmethod
    def _iters(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min_iters")
        if low is not None and value < low:
            raise rule(f"must be at least min_iters ({low})")
        return value


class SustainParams(ProbeParams):
    sustain_s: number(ge=0, le=3600) = Field(
        0, description="Seconds to run the probe's main work back to back once it is timed (matmul: the "
        "best shape of the first dtype; bandwidth: the copy; train_step: the step), sampling clocks, "
        "temperature, power, energy and clock-event reasons through NVML: the sustained rate, joules "
        "per iteration and FLOP/s per watt. 0: none. A burn-in runs 10 or more, so that a GPU reaches "
        "its power and thermal limits. Without NVML (a CPU) only the rate is reported.")


# The timer zeroes a buffer before each timed iteration (app/bench/timer.py): on CUDA at least
# 256 MiB and twice the L2, so no iteration finds its inputs cached; on CPU 32 MiB, since a
# larger-than-LLC buffer is costly on a 2-core CI box and CPU probes check the method only.
CUDA_FLUSH_FLOOR_BYTES = 256 * MIB
CPU_FLUSH_BYTES = 32 * MIB


def flush_bytes(kind: str, l2_cache_bytes: int | None) -> int:
    """Bytes of the timer's L2-flush buffer, resident while anything is timed. The server sees
    a GPU through NVML, which does not report its L2 (None): the floor then stands, which is
    the rule's answer for every L2 up to 128 MiB (an H100's is 50 MB)."""
    if kind != "cuda":
        return CPU_FLUSH_BYTES
    return max(CUDA_FLUSH_FLOOR_BYTES, 2 * (l2_cache_bytes or 0))


CPU_MAX_RANKS = 8
"""Gloo processes on one host at most: each is a whole interpreter with torch loaded."""


def ranks_for(ranks: int | None, kind: str, default: int | None) -> int | None:
    """The ranks a multi-process probe runs, or None for every visible GPU; InvalidInput past
    the CPU's limit."""
    if kind != "cuda" and ranks is not None and ranks > CPU_MAX_RANKS:
        raise InvalidInput("params.ranks", f"at most {CPU_MAX_RANKS} gloo processes on the CPU, got {ranks}")
    return ranks if ranks is not None else default
