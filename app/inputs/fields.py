"""Strict request field types, and strict request models made from engine dataclasses.

Requests are strict: integers must be integers (an integral float such as 7e9
is accepted where a count is large), strings are not coerced, unknown fields
are rejected so that a typo never silently falls back to a default, and
floats must be finite. Bounds sit in the schema, where clients and fuzzers see
them, and are enforced exactly as the schema writes them.
"""

import dataclasses
import types
import typing
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any, Optional, Union

from annotated_types import Ge, Le
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    Tag,
    TypeAdapter,
    create_model,
)
from pydantic_core import PydanticCustomError

from app.inputs import quantities

STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)


class Input(BaseModel):
    model_config = STRICT


UNION_TAGS: set[str] = set()
"""The tag of every member of every union built by `tagged`. pydantic puts a member's tag in
an error's location after the field (model.preset); the error formatter drops these."""


def tagged(members: dict[str, Any], kind: Callable[[Any], str | None], message: str) -> Any:
    """A union whose member `kind(value)` names is the one validated: {tag: type}. A value that
    `kind` names none of fails with `message` (error type model_kind)."""
    UNION_TAGS.update(members)
    union = Union[tuple(Annotated[t, Tag(tag)] for tag, t in members.items())]  # type: ignore[valid-type]  # noqa: UP007
    return Annotated[union, Discriminator(kind, custom_error_type="model_kind", custom_error_message=message)]


def _integral(value: Any) -> Any:
    """JSON Schema's "integer" includes 7.0; let it through as 7."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _as_tuple(value: Any) -> Any:
    """A JSON array for a tuple field; its items keep strict validation (7.0 is let through as 7)."""
    return tuple(_integral(v) for v in value) if isinstance(value, list) else value


def _mentions_input(hint: Any) -> bool:
    if isinstance(hint, type) and issubclass(hint, Input):
        return True
    return any(_mentions_input(a) for a in typing.get_args(hint))


def members(hint: Any) -> list[Any]:
    """The types a field's hint admits, through Annotated and unions (the pages' and the launch
    form's controls are chosen by them)."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return members(typing.get_args(hint)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in typing.get_args(hint) for m in members(arg)]
    return [hint]


def _mentions_int(hint: Any) -> bool:
    return hint is int or any(_mentions_int(a) for a in typing.get_args(hint))


# The largest integer JSON clients (JavaScript numbers, float parsers) hold exactly.
JSON_SAFE_INT = 2**53 - 1


class _OrText:
    """Schema metadata: the field also takes text of this quantity kind (app/inputs/quantities.py)."""

    def __init__(self, kind: quantities.Kind) -> None:
        self.kind = kind

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: GetJsonSchemaHandler) -> dict:
        return {"anyOf": [handler(core_schema), quantities.schema(self.kind)]}


def _refusal(e: quantities.QuantityError) -> PydanticCustomError:
    # Schema-valid text the bounds refuse breaks a rule the pattern cannot state: "invalid_input".
    return PydanticCustomError("invalid_input" if e.rule else "quantity_invalid", "{message}",
                               {"message": e.message})


def _whole_text(kind: quantities.Kind, lo: int | None, hi: int | None) -> Any:
    def read(value: Any) -> Any:
        if isinstance(value, str):
            try:
                return quantities.whole(value, kind, lo, hi)
            except quantities.QuantityError as e:
                raise _refusal(e) from None
        return _integral(value)

    return BeforeValidator(read)


def count(ge: int, le: int) -> Any:
    """An integer in [ge, le], or text such as "70B", "4k" (quantities.COUNT). Integral floats
    are accepted (JSON writers often emit 7e9 for 7000000000); the bounds sit inside the
    validator so the schema shows them."""
    kind = quantities.COUNT
    return Annotated[int, Field(ge=ge, le=le), _whole_text(kind, ge, le), _OrText(kind)]


def sequence_length(ge: int, le: int) -> Any:
    """Tokens per sequence in [ge, le], or text as context lengths are written: "4k" is 4096
    (quantities.SEQUENCE)."""
    kind = quantities.SEQUENCE
    return Annotated[int, Field(ge=ge, le=le), _whole_text(kind, ge, le), _OrText(kind)]


def byte_count(ge: int, le: int) -> Any:
    """A number of bytes in [ge, le], or text with a unit: "80GB", "512MiB" (quantities.BYTES)."""
    kind = quantities.BYTES
    return Annotated[int, Field(ge=ge, le=le), _whole_text(kind, ge, le), _OrText(kind)]


def _int_within(lo: float | None, hi: float | None, *, open_lo: bool = False, text: bool = False,
                kind: quantities.Kind = quantities.NUMBER) -> Any:
    """Check a JSON integer given for a float field against the bounds as the schema
    writes them (the shortest decimal of each float), before it is rounded to a float.
    Otherwise 10**35 + 1 rounds onto `maximum: 1e35` and passes, and an integer between
    a bound's double and its decimal is judged differently by pydantic and by JSON
    Schema. (Doubles need no such care: none lies between a double and its decimal.)
    With `text`, a string is read as a quantity ("2.5e12", "989T") and checked the same way."""
    lo_dec = None if lo is None else Decimal(repr(lo))
    hi_dec = None if hi is None else Decimal(repr(hi))

    def check(value: Any) -> Any:
        if isinstance(value, str) and text:
            try:
                return quantities.real(value, lo, hi, open_lo=open_lo, kind=kind)
            except quantities.QuantityError as e:
                raise _refusal(e) from None
        if isinstance(value, int) and not isinstance(value, bool):
            if lo_dec is not None and (value <= lo_dec if open_lo else value < lo_dec):
                raise ValueError(f"must be {'>' if open_lo else '>='} {quantities.readable(lo)}")
            if hi_dec is not None and value > hi_dec:
                raise ValueError(f"must be <= {quantities.readable(hi)}")
        return value

    return BeforeValidator(check)


def number(*, ge: float | None = None, gt: float | None = None, le: float, text: bool = True) -> Any:
    """A finite float in bounds, stated in the schema and enforced exactly; with `text`, also
    a string such as "2.5e12" or "989T" (quantities.NUMBER)."""
    checked = _int_within(gt if gt is not None else ge, le, open_lo=gt is not None, text=text)
    if not text:
        return Annotated[float, Field(ge=ge, gt=gt, le=le), checked]
    return Annotated[float, Field(ge=ge, gt=gt, le=le), checked, _OrText(quantities.NUMBER)]


def _float_bounds(hint: Any) -> tuple[float | None, float | None] | None:
    """Ge/Le of a float hint (possibly Optional), from its annotated_types metadata."""
    for arg in (hint, *typing.get_args(hint)):
        if typing.get_origin(arg) is Annotated and typing.get_args(arg)[0] is float:
            meta = arg.__metadata__
            return (next((m.ge for m in meta if isinstance(m, Ge)), None),
                    next((m.le for m in meta if isinstance(m, Le)), None))
    return None


def _or_text(name: str, hint: Any) -> Any:
    """A bounded int or float hint (possibly Optional) that also takes text: a byte count for a
    field named *bytes ("80GB"), a count for other ints ("4k"), a number for floats ("989T").
    None for any other hint."""
    optional = type(None) in typing.get_args(hint)
    members = [a for a in typing.get_args(hint) if a is not type(None)] if optional else [hint]
    if len(members) != 1 or typing.get_origin(members[0]) is not Annotated:
        return None
    member = members[0]
    base, meta = typing.get_args(member)[0], member.__metadata__
    lo = next((m.ge for m in meta if isinstance(m, Ge)), None)
    hi = next((m.le for m in meta if isinstance(m, Le)), None)
    if lo is None or hi is None or base not in (int, float):
        return None
    if base is int:
        kind = (quantities.BYTES if name.endswith("bytes") else
                quantities.SEQUENCE if name.endswith("seq_len") else quantities.COUNT)
        quantity = Annotated[member, _whole_text(kind, lo, hi), _OrText(kind)]
    else:
        kind = quantities.RATE if name.endswith("bytes_per_sec") else quantities.NUMBER
        quantity = Annotated[member, _int_within(lo, hi, text=True, kind=kind), _OrText(kind)]
    return Optional[quantity] if optional else quantity  # noqa: UP045


def strict_input(cls: type, _done: dict[type, type] | None = None, *, suffix: str = "") -> type[Input]:
    """A strict request model with the fields, bounds and docs of an engine
    dataclass (nested dataclasses included), each named as its dataclass with `suffix` (where a
    response carries the dataclass itself, so the two schemas differ in name). `.to_engine()`
    builds the dataclass."""
    done = {} if _done is None else _done
    if cls in done:
        return done[cls]
    docs = TypeAdapter(cls).json_schema().get("properties", {})
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            hint = strict_input(hint, done, suffix=suffix)
        elif origin in (Union, types.UnionType) and any(dataclasses.is_dataclass(a) for a in args):
            # An optional dataclass (Figure | None): its members strict too.
            hint = Union[tuple(strict_input(a, done, suffix=suffix) if dataclasses.is_dataclass(a) else a  # noqa: UP007
                               for a in args)]
        elif (quantity := _or_text(f.name, hint)) is not None:
            hint = quantity
        elif origin is tuple:  # strict mode takes no JSON list as a tuple
            if args and dataclasses.is_dataclass(args[0]):  # tuple[Item, ...]: each item strict too
                hint = tuple[strict_input(args[0], done, suffix=suffix), ...]  # type: ignore[misc]
            hint = Annotated[hint, BeforeValidator(_as_tuple)]
        elif _mentions_int(hint):
            hint = Annotated[hint, BeforeValidator(_integral)]
        elif (bounds := _float_bounds(hint)) is not None:
            hint = Annotated[hint, _int_within(*bounds)]
        description = docs.get(f.name, {}).get("description")
        if f.default is not dataclasses.MISSING:
            fields[f.name] = (hint, Field(f.default, description=description))
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = (hint, Field(default_factory=hint, description=description))
        else:
            fields[f.name] = (hint, Field(description=description))

    nested = tuple(name for name, (hint, _) in fields.items() if _mentions_input(hint))

    def to_engine(self: Input) -> Any:
        # __dict__, not iter(self): pydantic's __iter__ costs more than the dataclass it builds.
        values = dict(self.__dict__)
        for name in nested:
            if isinstance(values[name], Input):
                values[name] = values[name].to_engine()
            elif isinstance(values[name], tuple):
                values[name] = tuple(v.to_engine() if isinstance(v, Input) else v for v in values[name])
        return cls(**values)

    model = create_model(cls.__name__ + suffix, __base__=Input, __doc__=cls.__doc__, **fields)
    model.to_engine = to_engine
    done[cls] = model
    return model
