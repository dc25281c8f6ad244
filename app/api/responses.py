"""JSON responses for engine results.

Routes return `respond(result)`: the result serialised by its own type's
pydantic schema, which is the type each route declares as `response_model`.
FastAPI's default path for a dataclass result (dataclasses.asdict, re-validate,
serialise) cost ~20 us per request, more than the calculators themselves
(bench/api_throughput.py). The OpenAPI document still comes from response_model,
and the schemathesis tests check every response against it.

A calculator's answer also says which defaults it applied: `respond(result, body)` adds
`defaults_applied`, {field: value} for each top-level request field the client left out,
and `answer(cls)` is the response_model that declares it. The defaults' JSON is made once
per request model, so an answer costs a join, not a second serialisation.
"""

import dataclasses
import json
from functools import cache
from typing import Annotated, Any

from fastapi.responses import Response
from pydantic import BaseModel, Field, TypeAdapter
from pydantic_core import to_jsonable_python

from app.accounting.records import RECORD

DEFAULTS_DOC = ("The request's top-level fields this answer left to their defaults, each with the "
                "value used; send a field to set it.")


@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


@cache
def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Each optional field's default, as JSON values."""
    return {name: to_jsonable_python(info.get_default(call_default_factory=True))
            for name, info in model.model_fields.items() if not info.is_required()}


@cache
def _defaults_json(model: type[BaseModel]) -> dict[str, bytes]:
    return {name: json.dumps(name).encode() + b":" + json.dumps(value).encode()
            for name, value in _defaults(model).items()}


def defaults_applied(body: BaseModel) -> dict[str, Any]:
    """{field: value} for each top-level field of the validated `body` its sender left out:
    what an answer to it reports as `defaults_applied` (pages show it too)."""
    given = body.model_fields_set
    return {name: value for name, value in _defaults(type(body)).items() if name not in given}


def _with_defaults(text: bytes, body: BaseModel) -> bytes:
    given = body.model_fields_set
    parts = [part for name, part in _defaults_json(type(body)).items() if name not in given]
    # `text` is a JSON object (a dataclass's): insert the member before its closing brace.
    return text[:-1] + b',"defaults_applied":{' + b",".join(parts) + b"}}"


def dump_json(result: Any) -> bytes:
    """`result` as JSON, by its own type's schema."""
    return _adapter(type(result)).dump_json(result)


def respond_json(text: bytes, body: BaseModel | None = None) -> Response:
    """A result's JSON (dump_json's); given the request `body`, with the defaults it applied."""
    if body is not None:
        text = _with_defaults(text, body)
    return Response(text, media_type="application/json")


def respond(result: Any, body: BaseModel | None = None) -> Response:
    """`result` as JSON; given the request `body`, with the defaults it applied."""
    return respond_json(dump_json(result), body)


def jsonable(result: Any) -> Any:
    """The result as `respond` would send it, parsed back: dicts, lists, numbers, strings."""
    return _adapter(type(result)).dump_python(result, mode="json")


@cache
def answer(cls: type) -> type:
    """The response_model of a calculator whose result is the dataclass `cls`: its fields, then
    `defaults_applied`, under the same schema name."""
    fields = [("defaults_applied", Annotated[dict[str, Any], Field(description=DEFAULTS_DOC)],
               dataclasses.field(default_factory=dict))]
    made = dataclasses.make_dataclass(cls.__name__, fields, bases=(cls,), slots=True,
                                      namespace={"__doc__": cls.__doc__, "__pydantic_config__": RECORD})
    made.__module__ = cls.__module__
    return made
