"""What each probe accepts: strict, bounded parameter models, and the default sizes each
device kind gets. Torch-free, so the server validates and sizes a job before it is queued,
and the child parses the same model and reads the same defaults.
"""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from app.contract.fields import Input, byte_count, count, number, sequence_length, tagged
from app.contract.schemas import Preset, TransformerConfigIn

Device = Literal["auto", "cuda", "cpu"]
# float32 runs with TF32 off; "tfloat32" is float32 storage with TF32 tensor cores allowed.
MatmulDtype = Literal["float32", "tfloat32", "bfloat16", "float16", "float8_e4m3fn"]
MATMUL_DTYPES: tuple[str, ...] = MatmulDtype.__args__  # type: ignore[attr-defined]
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


class MatmulShape(Input):
    """(m, k) @ (k, n)."""

    m: count(1, 65_536)
    k: count(1, 65_536)
    n: count(1, 65_536)


class MatmulParams(ProbeParams):
    sweep: Literal["squares", "quick", "custom"] = Field(
        "squares", description="squares: m=k=n from 1024 to 16384 (CPU: 128 to 512); quick: m from "
        "256 in steps of 256 to 4096 with n=k=4096 (CPU: m 32..256, n=k=256); custom: `shapes`.")
    shapes: Annotated[list[MatmulShape], Field(max_length=256)] = Field(
        default_factory=list, validate_default=True, description="The shapes for sweep=custom.")
    dtypes: Annotated[list[MatmulDtype], Field(min_length=1, max_length=5)] | None = Field(
        None, description="Default: every dtype the device runs (float8 needs compute capability 8.9+).")

    @field_validator("shapes")
    @classmethod
    def _shapes(cls, value: list, info: ValidationInfo) -> list:
        if (info.data.get("sweep") == "custom") != bool(value):
            raise rule("give shapes with sweep=custom, and only then")
        return value


class BandwidthParams(ProbeParams):
    size_bytes: byte_count(MIB, 64 * 2**30) | None = Field(
        None, description="Bytes per buffer (two buffers: source and destination). Default 1 GiB on "
        "CUDA, far larger than any L2; 64 MiB on CPU.")


class TransferParams(ProbeParams):
    sizes_bytes: Annotated[list[byte_count(1024, 16 * 2**30)],  # type: ignore[valid-type]
                           Field(min_length=1, max_length=32)] | None = Field(
        None, description="Default: 4 KiB to 1 GiB in steps of 4x on CUDA; 4 KiB to 16 MiB on CPU.")


class CruncherSpec(Input):
    """The course's deep linear model: num_layers square (dim x dim) linear layers, then a
    dim -> 1 head, no biases; the input is (batch_size, seq_len, dim) random normal."""

    kind: Literal["cruncher"]
    dim: count(1, 65_536) = 1024
    num_layers: count(0, 1024) = 4


def _train_model_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, CruncherSpec) or (isinstance(value, dict) and value.get("kind") == "cruncher"):
        return "cruncher"
    if isinstance(value, (dict, TransformerConfigIn)):
        return "config"
    return None


_TRAIN_MODEL_HELP = ('{"kind": "cruncher", ...}, a preset name (GET /api/v1/models) or an inline '
                     "TransformerConfig")
TrainModel = tagged({"cruncher": CruncherSpec, "preset": Preset, "config": TransformerConfigIn},
                    _train_model_kind, f"model must be {_TRAIN_MODEL_HELP}")


class TrainStepParams(ProbeParams):
    model: TrainModel = Field(  # type: ignore[valid-type]
        default_factory=lambda: CruncherSpec(kind="cruncher"), description=f"The model: {_TRAIN_MODEL_HELP}.")
    batch_size: count(1, 65_536) = 4
    seq_len: sequence_length(1, 1_048_576) = 256
    optimizer: Literal["sgd", "adagrad", "adam", "adamw"] = "adamw"
    precision: Literal["fp32", "bf16_autocast"] = Field(
        "fp32", description="bf16_autocast: fp32 weights and optimizer state, matmuls in bf16.")
    warmup_steps: count(1, 1000) = 2
    steps: count(1, 10_000) = 5


@dataclass(frozen=True)
class MatmulSizes:
    """A device kind's default matmul sweeps and dtypes."""

    squares: tuple[int, ...]
    """m = k = n for sweep=squares."""
    quick_step: int
    """sweep=quick: m from quick_step to quick_width in steps of quick_step, n = k = quick_width."""
    quick_width: int
    dtypes: tuple[str, ...]


# By device kind: the full sweeps on CUDA, small ones on CPU (so the suite runs without a GPU).
MATMUL_SIZES = {
    "cuda": MatmulSizes(squares=(1024, 2048, 4096, 8192, 16384), quick_step=256, quick_width=4096,
                        dtypes=MATMUL_DTYPES),
    "cpu": MatmulSizes(squares=(128, 256, 512), quick_step=32, quick_width=256,
                       dtypes=("float32", "bfloat16")),
}
# Bytes per buffer: on CUDA far larger than any L2.
BANDWIDTH_BYTES = {"cuda": 2**30, "cpu": 64 * MIB}
# Host <-> device copy sizes in bytes: 4 KiB up in steps of 4x, to 1 GiB on CUDA and 16 MiB on CPU.
TRANSFER_SIZES = {"cuda": tuple(4**i * 1024 for i in range(1, 11)),
                  "cpu": tuple(4**i * 1024 for i in range(1, 8))}

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


def matmul_dtypes(params: MatmulParams, kind: str) -> tuple[str, ...]:
    return tuple(params.dtypes or MATMUL_SIZES[kind].dtypes)


def matmul_shapes(params: MatmulParams, kind: str) -> list[tuple[int, int, int]]:
    """(m, k, n) per measurement: the sweep's, at the device kind's scale."""
    if params.sweep == "custom":
        return [(s.m, s.k, s.n) for s in params.shapes]
    sizes = MATMUL_SIZES[kind]
    if params.sweep == "squares":
        return [(s, s, s) for s in sizes.squares]
    step, width = sizes.quick_step, sizes.quick_width
    return [(m, width, width) for m in range(step, width + 1, step)]


def bandwidth_bytes(params: BandwidthParams, kind: str) -> int:
    return params.size_bytes or BANDWIDTH_BYTES[kind]


def transfer_sizes(params: TransferParams, kind: str) -> list[int]:
    return list(params.sizes_bytes or TRANSFER_SIZES[kind])
