"""JSON responses for engine results.

Routes return `respond(result)`: the result serialised by its own type's
pydantic schema, which is the type each route declares as `response_model`.
FastAPI's default path for a dataclass result (dataclasses.asdict, re-validate,
serialise) cost ~20 us per request, more than the calculators themselves
(bench/api_throughput.py). The OpenAPI document still comes from response_model,
and the schemathesis tests check every response against it.
"""

from functools import cache
from typing import Any

from fastapi.responses import Response
from pydantic import TypeAdapter


@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


def respond(result: Any) -> Response:
    return Response(_adapter(type(result)).dump_json(result), media_type="application/json")


def jsonable(result: Any) -> Any:
    """The result as `respond` would send it, parsed back: dicts, lists, numbers, strings."""
    return _adapter(type(result)).dump_python(result, mode="json")
