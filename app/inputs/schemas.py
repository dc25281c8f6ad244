"""Request parts shared by the calculators and the probes: names, model references, GPUs, pages.

Rules that span fields are the engine's, and fail as 422 naming a field.
"""

import re
from collections.abc import Callable
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from app.accounting import dtypes, hardware, models, names
from app.accounting.errors import InvalidInput
from app.inputs import quantities
from app.inputs.fields import Input, count, strict_input, tagged

PresetName = Literal[tuple(models.presets())]  # type: ignore[valid-type]
"""The names alone (for listings); request fields take `Preset`, which refuses a near miss helpfully."""


def named(what: str, choices: tuple[str, ...], listing: str,
           resolve: Callable[[str], str] | None = None) -> Any:
    """A Literal of `choices` (the schema's enum) whose refusal says "did you mean ...?" for a
    near miss, or points at `listing`, instead of listing every choice. `resolve` may first
    map another spelling onto a choice, or refuse it with its own message."""
    accepted = frozenset(choices)

    def check(value: Any) -> Any:
        if isinstance(value, str) and value in accepted:
            return value
        try:
            if resolve is not None and isinstance(value, str):
                return resolve(value)
            message = names.unknown(what, value, choices, listing)
        except InvalidInput as e:
            message = e.message
        raise PydanticCustomError("unknown_name", "{message}", {"message": message})

    return Annotated[Literal[choices], BeforeValidator(check)]


_PEAK_DTYPES = tuple(n for n in dtypes.accepted_names() if dtypes.peak_key(n) in dtypes.PEAK_KEYS)
DtypeName = named("dtype", dtypes.accepted_names(), dtypes.DTYPES_LISTING)
PeakDtype = named("dtype with a matmul peak", _PEAK_DTYPES, dtypes.DTYPES_LISTING)
Preset = named("preset", PresetName.__args__, models.MODELS_LISTING)  # type: ignore[attr-defined]
GpuId = named("gpu", tuple(hardware.catalogue()), hardware.HARDWARE_LISTING, hardware.resolve_id)
"""A catalogue id, or a name that points at one part ("4090", "H100 80GB": hardware.resolve_id);
one that points at several (h100) is refused listing them, so the answer's echoed gpu always
shows the full id."""


TransformerConfigIn = strict_input(models.TransformerConfig)
GpuOverridesIn = strict_input(hardware.GpuOverrides)


def _model_kind(value: Any) -> str | None:
    if isinstance(value, str):  # "7B" is a parameter count where one is taken; no preset reads as one
        return "params" if re.search(quantities.COUNT.pattern, value) else "preset"
    if isinstance(value, (dict, TransformerConfigIn)):
        return "config"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "params"
    return None


def _spec_kind(value: Any) -> str | None:
    """Where no parameter count is taken, any string is a preset name (refused as one)."""
    return "preset" if isinstance(value, str) else _model_kind(value)


_MODEL_HELP = "a preset name (see GET /api/v1/models) or an inline TransformerConfig"
ModelSpec = Annotated[
    tagged({"preset": Preset, "config": TransformerConfigIn}, _spec_kind,
           f"model must be {_MODEL_HELP}"),
    Field(description=f"The model: {_MODEL_HELP}."),
]
ModelOrParams = Annotated[
    # 10^14 keeps params x bytes-per-parameter below 2^53, where floats hold integers exactly.
    tagged({"preset": Preset, "config": TransformerConfigIn, "params": count(1, 10**14)}, _model_kind,
           f"model must be {_MODEL_HELP}, or a parameter count"),
    Field(description=f"The model: {_MODEL_HELP}, or a bare parameter count."),
]


def engine_model(spec: Any, *, field: str = "model") -> models.TransformerConfig:
    """The engine config for a preset name or an inline config."""
    if isinstance(spec, str):
        return models.preset(spec, field=field)
    try:
        return spec.to_engine()
    except InvalidInput as e:
        raise InvalidInput(f"{field}.{e.field}", e.message) from None


CustomGpuIn = strict_input(hardware.CustomGpu)


def _gpu_kind(value: Any) -> str | None:
    return "catalogue" if isinstance(value, str) else "custom" if isinstance(value, (dict, CustomGpuIn)) else None


_GPU_HELP = ('an id from GET /api/v1/hardware (or a name people write: "H100 80GB", "4090"), or a custom '
             'GPU: {"name", "memory_bytes", "memory_bandwidth_bytes_per_sec", "peak_flop_per_sec": '
             '{"bfloat16", ...}} and optionally interconnect_bytes_per_sec and board_power_watts')
GpuRef = Annotated[
    tagged({"catalogue": GpuId, "custom": CustomGpuIn}, _gpu_kind, f"gpu must be {_GPU_HELP}"),
    Field(description=f"The GPU: {_GPU_HELP}."),
]
"""A catalogue part, or a GPU outside it described in the request (hardware.CustomGpu)."""


def accelerator(gpu: Any, overrides: Any) -> hardware.Accelerator | None:
    """The catalogue entry for `gpu` with request overrides applied, a custom GPU's own figures,
    or None."""
    if gpu is None:
        if overrides is not None:
            raise InvalidInput("gpu_overrides", "needs a gpu to override")
        return None
    if isinstance(gpu, CustomGpuIn):
        if overrides is not None:
            raise InvalidInput("gpu_overrides", "a custom gpu gives its own figures: set them in gpu")
        return hardware.custom(gpu.to_engine())
    return hardware.gpu(gpu, None if overrides is None else overrides.to_engine())


def gpu_label(gpu: Any) -> str | None:
    """How answers and messages name the request's GPU: its catalogue id, or a custom one's name."""
    return gpu.name if isinstance(gpu, CustomGpuIn) else gpu


class GpuInput(Input):
    gpu: GpuRef
    gpu_overrides: GpuOverridesIn | None = Field(  # type: ignore[valid-type]
        None, description="Numbers to use instead of the catalogue's for this request.")

    def accelerator(self) -> hardware.Accelerator:
        return accelerator(self.gpu, self.gpu_overrides)


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """A list with its length."""

    data: list[T]
    count: int
