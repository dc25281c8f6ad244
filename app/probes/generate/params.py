"""What the generate probe accepts, and the sweep each device kind gets by default."""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from app.inputs.fields import count, sequence_length, tagged
from app.inputs.schemas import Preset, TransformerConfigIn
from app.probes.params import MIB, ProbeParams


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
    modes: Annotated[list[Literal["eager", "graph"]], Field(min_length=1, max_length=2)] | None = Field(
        None, description="How decode steps run: eager (each op launched from Python) and graph (fixed "
        "shapes as gpt-fast runs them, captured as a CUDA graph on CUDA, torch.compile'd on a CPU with a C "
        "compiler). Default on CUDA: both where the model allows graph (dense key/value attention), else "
        "eager; on a CPU eager, since torch.compile builds for tens of seconds per batch shape.")
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
