"""A GPU outside the catalogue on every page that takes a GPU: "custom" in the GPU list opens a
few boxes (name, memory, bandwidth, peaks, link, power), kept in the URL as gpu_* fields, and
sent as the request's `gpu` object (app/accounting/hardware.py CustomGpu), so the API reads
their units ("24GB", "936GB/s", "165T") and names a refused one, which shows beside its box."""

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from app.inputs.fields import members
from app.inputs.schemas import CustomGpuIn

CHOICE = "custom"
"""The GPU list's value that opens the boxes."""


@dataclass(frozen=True)
class Box:
    name: str
    """The page's field: gpu_<short>."""
    label: str
    path: tuple[str, ...]
    """Where its value goes in the request's gpu object."""
    placeholder: str
    required: bool = False


BOXES = (
    Box("gpu_name", "Name", ("name",), "RTX 3080 Ti", True),
    Box("gpu_memory", "Memory", ("memory_bytes",), "12GB", True),
    Box("gpu_bandwidth", "Memory bandwidth", ("memory_bandwidth_bytes_per_sec",), "912GB/s", True),
    Box("gpu_bf16", "Dense bf16/fp16 peak", ("peak_flop_per_sec", "bfloat16"), "68T (FLOP/s)", True),
    Box("gpu_fp8", "Dense fp8 peak", ("peak_flop_per_sec", "float8"), "none"),
    Box("gpu_int8", "Dense int8 peak", ("peak_flop_per_sec", "int8"), "none"),
    Box("gpu_fp6", "Dense fp6 peak", ("peak_flop_per_sec", "float6"), "none"),
    Box("gpu_fp4", "Dense fp4 peak", ("peak_flop_per_sec", "float4"), "none"),
    Box("gpu_fp32", "fp32 peak", ("peak_flop_per_sec", "float32"), "none"),
    Box("gpu_link", "Interconnect, each way", ("interconnect_bytes_per_sec",), "32GB/s"),
    Box("gpu_power", "Board power (W)", ("board_power_watts",), "350"),
)
NAMES = tuple(b.name for b in BOXES)
_BY_PATH = {".".join(("gpu", *b.path)): b.name for b in BOXES}


def takes(request: type[BaseModel]) -> bool:
    """Whether the request's gpu field admits a custom GPU."""
    info = request.model_fields.get("gpu")
    return info is not None and CustomGpuIn in members(info.annotation)


def send(form: dict[str, str], payload: dict[str, Any]) -> None:
    """Put the boxes' GPU into the request body when the list says "custom"; boxes left empty
    are left out (a peak not given is a peak the GPU does not have)."""
    if form.get("gpu") != CHOICE:
        return
    gpu: dict[str, Any] = {}
    for box in BOXES:
        value = form.get(box.name, "").strip()
        if not value:
            continue
        *parents, leaf = box.path
        into = gpu
        for key in parents:
            into = into.setdefault(key, {})
        into[leaf] = value
    payload["gpu"] = gpu


def box_of(field: str) -> str | None:
    """The box an API message belongs beside: gpu.memory_bytes -> gpu_memory; a missing peak
    table -> the bf16 box; None for a field no box holds."""
    if field in _BY_PATH:
        return _BY_PATH[field]
    if field == "gpu.peak_flop_per_sec":
        return "gpu_bf16"
    return None
