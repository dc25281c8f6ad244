"""What each probe accepts: strict, bounded parameter models. Torch-free, so the
server validates a job before it is queued, and the child parses the same model.

Default sizes depend on the device: the issue's full sweeps on CUDA, small ones
on CPU (so the whole suite runs on machines without a GPU).
"""

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from app.api.fields import Input, count, number
from app.api.schemas import PresetName, TransformerConfigIn

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
    size_bytes: count(MIB, 64 * 2**30) | None = Field(
        None, description="Bytes per buffer (two buffers: source and destination). Default 1 GiB on "
        "CUDA, far larger than any L2; 64 MiB on CPU.")


class TransferParams(ProbeParams):
    sizes_bytes: Annotated[list[count(1024, 16 * 2**30)], Field(min_length=1, max_length=32)] | None = Field(
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
TrainModel = Annotated[
    Annotated[CruncherSpec, Tag("cruncher")] | Annotated[PresetName, Tag("preset")]
    | Annotated[TransformerConfigIn, Tag("config")],
    Discriminator(_train_model_kind, custom_error_type="model_kind",
                  custom_error_message=f"model must be {_TRAIN_MODEL_HELP}"),
]


class TrainStepParams(ProbeParams):
    model: TrainModel = Field(  # type: ignore[valid-type]
        default_factory=lambda: CruncherSpec(kind="cruncher"), description=f"The model: {_TRAIN_MODEL_HELP}.")
    batch_size: count(1, 65_536) = 4
    seq_len: count(1, 1_048_576) = 256
    optimizer: Literal["sgd", "adagrad", "adam", "adamw"] = "adamw"
    precision: Literal["fp32", "bf16_autocast"] = Field(
        "fp32", description="bf16_autocast: fp32 weights and optimizer state, matmuls in bf16.")
    warmup_steps: count(1, 1000) = 2
    steps: count(1, 10_000) = 5


PARAMS: dict[str, type[ProbeParams]] = {
    "matmul": MatmulParams, "bandwidth": BandwidthParams, "transfer": TransferParams,
    "train_step": TrainStepParams,
}


CPU_MATMUL_DTYPES = ("float32", "bfloat16")


def default_matmul_dtypes(cuda: bool) -> tuple[str, ...]:
    return MATMUL_DTYPES if cuda else CPU_MATMUL_DTYPES


def matmul_shapes(params: MatmulParams, cuda: bool) -> list[tuple[int, int, int]]:
    """(m, k, n) per measurement: the sweep's, at the device's scale."""
    if params.sweep == "custom":
        return [(s.m, s.k, s.n) for s in params.shapes]
    if params.sweep == "squares":
        sizes = (1024, 2048, 4096, 8192, 16384) if cuda else (128, 256, 512)
        return [(s, s, s) for s in sizes]
    step, width = (256, 4096) if cuda else (32, 256)
    return [(m, width, width) for m in range(step, width + 1, step)]
