"""Request building blocks shared by the routers.

Requests are strict: integers must be integers (an integral float such as 7e9
is accepted where a count is large), strings are not coerced, unknown fields
are rejected so that a typo never silently falls back to a default, and
floats must be finite. Bounds sit in the schema, where clients and fuzzers see
them; rules that span fields are the engine's, and fail as 422 naming a field.
"""

import dataclasses
import typing
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    create_model,
)

from app.accounting import dtypes, hardware, models
from app.accounting.errors import InvalidInput

STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)


class Input(BaseModel):
    model_config = STRICT


def _integral(value: Any) -> Any:
    """JSON Schema's "integer" includes 7.0; let it through as 7."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _mentions_int(hint: Any) -> bool:
    return hint is int or any(_mentions_int(a) for a in typing.get_args(hint))


# The largest integer JSON clients (JavaScript numbers, float parsers) hold exactly.
JSON_SAFE_INT = 2**53 - 1


def count(ge: int, le: int) -> Any:
    """An integer in [ge, le]. Integral floats are accepted (JSON writers often emit
    7e9 for 7000000000); the bounds sit inside the validator so the schema shows them."""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_integral)]

DtypeName = Literal[dtypes.accepted_names()]  # type: ignore[valid-type]
PeakDtype = Literal[tuple(n for n in dtypes.accepted_names()  # type: ignore[misc]
                          if dtypes.peak_key(n) in dtypes.PEAK_KEYS)]
PresetName = Literal[tuple(models.presets())]  # type: ignore[valid-type]
GpuId = Literal[tuple(hardware.catalogue())]  # type: ignore[valid-type]


def strict_input(cls: type, _done: dict[type, type] | None = None) -> type[Input]:
    """A strict request model with the fields, bounds and docs of an engine
    dataclass (nested dataclasses included). `.to_engine()` builds the dataclass."""
    done = {} if _done is None else _done
    if cls in done:
        return done[cls]
    docs = TypeAdapter(cls).json_schema().get("properties", {})
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            hint = strict_input(hint, done)
        elif _mentions_int(hint):
            hint = Annotated[hint, BeforeValidator(_integral)]
        description = docs.get(f.name, {}).get("description")
        if f.default is not dataclasses.MISSING:
            fields[f.name] = (hint, Field(f.default, description=description))
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = (hint, Field(default_factory=hint, description=description))
        else:
            fields[f.name] = (hint, Field(description=description))

    def to_engine(self: Input) -> Any:
        values = {k: (v.to_engine() if isinstance(v, Input) else v) for k, v in self}
        return cls(**values)

    model = create_model(cls.__name__, __base__=Input, __doc__=cls.__doc__, **fields)
    model.to_engine = to_engine
    done[cls] = model
    return model


TransformerConfigIn = strict_input(models.TransformerConfig)
GpuOverridesIn = strict_input(hardware.GpuOverrides)


def _model_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, (dict, TransformerConfigIn)):
        return "config"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "params"
    return None


_MODEL_HELP = "a preset name (see GET /api/v1/models) or an inline TransformerConfig"
ModelSpec = Annotated[
    Annotated[PresetName, Tag("preset")] | Annotated[TransformerConfigIn, Tag("config")],
    Discriminator(_model_kind, custom_error_type="model_kind",
                  custom_error_message=f"model must be {_MODEL_HELP}"),
    Field(description=f"The model: {_MODEL_HELP}."),
]
ModelOrParams = Annotated[
    Annotated[PresetName, Tag("preset")] | Annotated[TransformerConfigIn, Tag("config")]
    # 10^14 keeps params x bytes-per-parameter below 2^53, where floats hold integers exactly.
    | Annotated[count(1, 10**14), Tag("params")],
    Discriminator(_model_kind, custom_error_type="model_kind",
                  custom_error_message=f"model must be {_MODEL_HELP}, or a parameter count"),
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


def accelerator(gpu: str | None, overrides: Any) -> hardware.Accelerator | None:
    """The catalogue entry for `gpu` with request overrides applied, or None."""
    if gpu is None:
        if overrides is not None:
            raise InvalidInput("gpu_overrides", "needs a gpu to override")
        return None
    return hardware.gpu(gpu, None if overrides is None else overrides.to_engine())


class GpuInput(Input):
    gpu: GpuId = Field(description="Accelerator id from GET /api/v1/hardware.")
    gpu_overrides: GpuOverridesIn | None = Field(  # type: ignore[valid-type]
        None, description="Numbers to use instead of the catalogue's for this request.")

    def accelerator(self) -> hardware.Accelerator:
        return accelerator(self.gpu, self.gpu_overrides)


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """A list with its length."""

    data: list[T]
    count: int
