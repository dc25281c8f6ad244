"""What each probe accepts: strict, bounded parameter models, and the default sizes each
device kind gets. Torch-free, so the server validates and sizes a job before it is queued,
and the child parses the same model and reads the same defaults.
"""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from app.inputs.fields import Input, byte_count, count, number, sequence_length, tagged
from app.inputs.schemas import Preset, TransformerConfigIn

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


class SustainParams(ProbeParams):
    sustain_s: number(ge=0, le=3600) = Field(
        0, description="Seconds to run the probe's main work back to back once it is timed (matmul: the "
        "best shape of the first dtype; bandwidth: the copy; train_step: the step), sampling clocks, "
        "temperature, power, energy and clock-event reasons through NVML: the sustained rate, joules "
        "per iteration and FLOP/s per watt. 0: none. A burn-in runs 10 or more, so that a GPU reaches "
        "its power and thermal limits. Without NVML (a CPU) only the rate is reported.")


class MatmulParams(SustainParams):
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


class BandwidthParams(SustainParams):
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


FineTuneMode = Literal["full", "freeze", "lora", "qlora"]
LoraTarget = Literal["q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up", "experts_gate_up",
                     "experts_down"]
QloraFormat = Literal["nf4", "nf4_double_quant", "int8_channel"]
_TRAIN_MODEL_HELP = ('{"kind": "cruncher", ...}, a preset name (GET /api/v1/models) or an inline '
                     "TransformerConfig")
TrainModel = tagged({"cruncher": CruncherSpec, "preset": Preset, "config": TransformerConfigIn},
                    _train_model_kind, f"model must be {_TRAIN_MODEL_HELP}")


class TrainStepFields(ProbeParams):
    """What a train step trains and how: the train_step probe's fields, and data_parallel_step's."""

    model: TrainModel = Field(  # type: ignore[valid-type]
        default_factory=lambda: CruncherSpec(kind="cruncher"), description=f"The model: {_TRAIN_MODEL_HELP}.")
    batch_size: count(1, 65_536) = 4
    seq_len: sequence_length(1, 1_048_576) = 256
    optimizer: Literal["sgd", "adagrad", "adam", "adamw"] = "adamw"
    precision: Literal["fp32", "bf16_autocast", "bf16"] = Field(
        "fp32", description="bf16_autocast: fp32 weights and optimizer state, matmuls in bf16. bf16: "
        "everything in bf16 (weights, gradients, optimizer state, activations), the logits upcast to "
        "fp32 for the loss; QLoRA's precision.")
    warmup_steps: count(1, 1000) = 2
    steps: count(1, 10_000) = 5
    # Fine-tuning (transformers only), as peft and bitsandbytes build it: app/bench/lora.py.
    mode: FineTuneMode = Field(
        "full", description="full: every weight trains; freeze: freeze_embeddings, freeze_head and the first "
        "freeze_layers layers frozen, the rest trained whole; lora: the base frozen, LoRA adapters on "
        "lora_targets; qlora: lora over a base stored by bitsandbytes in base_format.")
    lora_rank: count(1, 4096) = Field(
        8, description="lora, qlora: r, the adapters' inner width (peft's default 8).")
    lora_targets: Annotated[list[LoraTarget], Field(min_length=1, max_length=11)] | None = Field(
        None, description="lora, qlora: the matrices adapted in every layer: q, k, v, o (attention), gate, "
        "up, down (dense MLPs and shared experts), or qkv and gate_up where the model fuses them. Default: "
        "peft's for the family (q, v; qkv where fused). The probe does not build adapters on routed "
        "experts (experts_gate_up, experts_down) yet.")
    freeze_embeddings: bool = Field(False, description="freeze: the token (and position) embedding frozen.")
    freeze_head: bool = Field(
        False, description="freeze: the LM head frozen (a tied head: freeze both or neither).")
    freeze_layers: count(0, 65_536) = Field(0, description="freeze: the first k transformer layers frozen.")
    base_format: QloraFormat = Field(
        "nf4_double_quant", description="qlora: how bitsandbytes stores the frozen base's matrices: nf4 "
        "(Linear4bit), nf4_double_quant (Linear4bit, compress_statistics) or int8_channel (Linear8bitLt).")

    @field_validator("lora_targets")
    @classmethod
    def _targets(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise rule("name each target once")
        return value


def _generate_model_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, (dict, TransformerConfigIn)):
        return "config"
    return None


_GENERATE_MODEL_HELP = "a preset name (GET /api/v1/models) or an inline TransformerConfig"
GenerateModel = tagged({"preset": Preset, "config": TransformerConfigIn}, _generate_model_kind,
                       f"model must be {_GENERATE_MODEL_HELP}")
GenerateDtype = Literal["float32", "bfloat16", "float16"]
_Lengths = Annotated[list[sequence_length(1, 1_048_576)], Field(min_length=1, max_length=16)]  # type: ignore[valid-type]


class TrainStepParams(TrainStepFields, SustainParams):
    """The train_step probe: a step, and with sustain_s its sustained run."""


class GenerateParams(ProbeParams):
    model: GenerateModel | None = Field(  # type: ignore[valid-type]
        None, description=f"The model: {_GENERATE_MODEL_HELP}. Default: llama3.2-1b on CUDA; on CPU a "
        "llama-like model scaled down (4 layers, d_model 128, grouped-query, vocabulary 2048).")
    dtype: GenerateDtype | None = Field(
        None, description="Weights, activations and the KV cache. Default bfloat16 on CUDA, float32 on CPU.")
    prompt_lens: _Lengths | None = Field(
        None, description="Prefill is timed for one prompt of each length. Default 128, 512, 2048 on CUDA; "
        "32, 128 on CPU.")
    batch_sizes: Annotated[list[count(1, 4096)],  # type: ignore[valid-type]
                           Field(min_length=1, max_length=16)] | None = Field(
        None, description="Sequences decoded together. Default 1, 8, 32, 64 on CUDA; 1, 4 on CPU.")
    contexts: _Lengths | None = Field(
        None, description="Tokens each sequence's cache holds at the last timed decode step (prompt plus "
        "generated); each must exceed decode_steps. Default 512, 2048 on CUDA; 64, 256 on CPU.")
    decode_steps: count(1, 1024) = Field(
        8, description="Tokens each timed run decodes in a row, ending at the context; the time per token "
        "is the run's over decode_steps.")


@dataclass(frozen=True)
class GenerateSizes:
    """A device kind's default generate sweep."""

    model: str | dict
    """A preset name, or an inline config (as a request would give it)."""
    dtype: str
    prompt_lens: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    contexts: tuple[int, ...]
    matmul_size: int
    """m = k = n of the matmul that measures the compute ceiling, at the model's dtype."""
    copy_bytes: int
    """The buffer copied (device to device) to measure the memory ceiling, as the bandwidth probe does."""


# By device kind: a real 1B model on CUDA; on CPU a llama-like model small enough that a sweep
# takes seconds on two cores (so the suite runs without a GPU).
GENERATE_SIZES = {
    "cuda": GenerateSizes("llama3.2-1b", "bfloat16", (128, 512, 2048), (1, 8, 32, 64), (512, 2048),
                          matmul_size=8192, copy_bytes=2**30),
    "cpu": GenerateSizes({"vocab_size": 2048, "d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2,
                          "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False,
                          "tied_embeddings": False, "max_seq_len": 2048},
                         "float32", (32, 128), (1, 4), (64, 256), matmul_size=512, copy_bytes=64 * MIB),
}


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


# --- Many ranks: app/bench/collectives.py, app/bench/data_parallel.py ------------------------------

CollectiveName = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
COLLECTIVE_NAMES: tuple[str, ...] = CollectiveName.__args__  # type: ignore[attr-defined]
CollectiveDtype = Literal["float32", "bfloat16", "float16"]
CPU_MAX_RANKS = 8
"""Gloo processes on one host at most: each is a whole interpreter with torch loaded."""


@dataclass(frozen=True)
class CollectiveSizes:
    """A device kind's default collectives sweep."""

    sizes_bytes: tuple[int, ...]
    ranks: int | None
    """None: every GPU the job was given (CUDA_VISIBLE_DEVICES)."""


# By device kind: as nccl-tests' -b 8 -e 1G -f 2 on CUDA; on CPU 1 KiB to 4 MiB in steps of 4x over
# 2 gloo processes, seconds on a two-core box.
COLLECTIVE_SIZES = {
    "cuda": CollectiveSizes(tuple(2**i for i in range(3, 31)), None),
    "cpu": CollectiveSizes(tuple(4**i * 1024 for i in range(0, 7)), 2),
}


class CollectivesParams(ProbeParams):
    collectives: Annotated[list[CollectiveName], Field(min_length=1, max_length=5)] | None = Field(
        None, description="Default: all_reduce, all_gather, reduce_scatter, all_to_all and broadcast.")
    sizes_bytes: Annotated[list[byte_count(1, 16 * 2**30)],  # type: ignore[valid-type]
                           Field(min_length=1, max_length=64)] | None = Field(
        None, description="nccl-tests' size S per point: each rank's buffer (all_reduce, broadcast), the "
        "all_gather's output, the reduce_scatter's input, the all_to_all's send buffer; rounded down to "
        "whole elements, and to a multiple of ranks where S is split in pieces. Default: 8 B to 1 GiB in "
        "steps of 2x on CUDA (nccl-tests -b 8 -e 1G -f 2); 1 KiB to 4 MiB in steps of 4x on CPU.")
    ranks: count(2, 64) | None = Field(
        None, description=f"Processes, one per GPU on CUDA (default: every GPU the job has, at least 2); "
        f"gloo processes on the CPU (default 2, at most {CPU_MAX_RANKS}).")
    dtype: CollectiveDtype = "float32"
    iterations: count(1, 10_000) = Field(20, description="Timed runs per point (nccl-tests -n).")
    warmup_iterations: count(0, 1000) = Field(5, description="Untimed runs before them (nccl-tests -w).")
    check: bool = Field(True, description="Check each collective's values once per point (nccl-tests -c).")

    @field_validator("collectives")
    @classmethod
    def _collectives(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise rule("name each collective once")
        return value


def collective_names(params: CollectivesParams) -> list[str]:
    return list(params.collectives or COLLECTIVE_NAMES)


def collective_sizes(params: CollectivesParams, kind: str) -> list[int]:
    return list(params.sizes_bytes or COLLECTIVE_SIZES[kind].sizes_bytes)


DataParallelStrategy = Literal["ddp", "fsdp"]


class DataParallelStepParams(TrainStepFields):
    strategy: DataParallelStrategy = Field(
        "ddp", description="ddp: DistributedDataParallel, every rank a whole replica (ZeRO stage 0); fsdp: "
        "FSDP2's fully_shard on each block and the root, parameters, gradients and optimizer state "
        "sharded over the ranks (ZeRO stage 3).")
    ranks: count(2, 64) | None = Field(
        None, description=f"Processes, one per GPU on CUDA (default: every GPU the job has, at least 2); "
        f"gloo processes on the CPU (default 2, at most {CPU_MAX_RANKS}). batch_size is per rank.")
