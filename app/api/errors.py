"""Error responses: every 4xx names its field, and echoes only JSON-safe input.

422 body: {"message": "<field>: <msg>; ...", "detail": [{loc, field, msg, type, input?}]}.
type "invalid_input" marks a rule of the engine (a cross-field constraint a
JSON schema cannot state); every other type is a per-field schema check.
"""

import json
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from app.accounting.errors import InvalidInput

_LOCATIONS = {"body", "query", "path", "header", "cookie"}
# Names pydantic puts in a loc for union members; never field names here.
_UNION_TAGS = {"preset", "config", "params", "float", "int", "str", "bool", "none"}
_MAX_ECHO_CHARS = 200


class ErrorItem(BaseModel):
    loc: list[str | int]
    field: str
    msg: str
    type: str
    input: Any = None


class ErrorResponse(BaseModel):
    """A request the service will not compute."""

    message: str
    detail: list[ErrorItem]


def field_name(loc: tuple | list) -> str:
    parts = [str(p) for p in loc if p not in _UNION_TAGS and not str(p).startswith(
        ("function-", "literal[", "constrained-"))]
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return ".".join(parts) or "body"


def _json_safe(value: Any) -> bool:
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return len(text) <= _MAX_ECHO_CHARS


def _item(error: dict) -> dict:
    loc = list(error.get("loc", ()))
    msg = error.get("msg", "invalid")
    if error.get("type") == "json_invalid":
        msg = f"malformed JSON: {error.get('ctx', {}).get('error', msg)}"
        loc = ["body"]
    elif error.get("type") == "string_pattern_mismatch":
        msg = "String does not match the pattern in the OpenAPI schema"
    item = {"loc": loc, "field": field_name(loc), "msg": msg, "type": error.get("type", "invalid")}
    value = error.get("input")
    if _json_safe(value) and not (isinstance(value, float) and not math.isfinite(value)):
        item["input"] = value
    return item


def _response(items: list[dict], status: int = 422) -> JSONResponse:
    message = "; ".join(f"{i['field']}: {i['msg']}" for i in items)
    return JSONResponse({"message": message, "detail": items}, status_code=status)


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    return _response([_item(e) for e in exc.errors()])


class NotFound(InvalidInput):
    """No item under this path parameter: 404."""


async def _invalid_input(_: Request, exc: InvalidInput) -> JSONResponse:
    where = "path" if isinstance(exc, NotFound) else "body"
    loc = [where, *exc.field.split(".")]
    kind = "not_found" if isinstance(exc, NotFound) else "invalid_input"
    item = {"loc": loc, "field": exc.field, "msg": exc.message, "type": kind}
    return _response([item], 404 if isinstance(exc, NotFound) else 422)


async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
    message, items = str(exc.detail), []
    if exc.status_code == 400:  # a body FastAPI could not read (e.g. not UTF-8)
        items = [{"loc": ["body"], "field": "body", "msg": message, "type": "body_unreadable"}]
        message = f"body: {message}"
    return JSONResponse({"message": message, "detail": items}, status_code=exc.status_code,
                        headers=exc.headers)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(HTTPException, _http_error)


# For `responses=` on routes, so the OpenAPI document states the error shape.
UNPROCESSABLE = {
    400: {"model": ErrorResponse, "description": "The body could not be read (e.g. not UTF-8)."},
    422: {"model": ErrorResponse,
          "description": "Malformed JSON, or a field out of bounds or breaking a rule; `message` names it."},
}
NOT_FOUND = {404: {"model": ErrorResponse, "description": "No such item."}}
