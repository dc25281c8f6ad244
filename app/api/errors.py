"""Error responses: every 4xx names its field, and echoes only JSON-safe input.

422 body: {"message": "<field>: <msg>; ...", "detail": [{loc, field, msg, type, input?}]}.
type "invalid_input" marks a rule of the engine (a cross-field constraint a
JSON schema cannot state); every other type is a per-field schema check.
"""

import asyncio
import json
import logging
import math
import sqlite3
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.accounting.errors import InvalidInput
from app.inputs import quantities
from app.inputs.fields import UNION_TAGS
from app.jobs import storage

_LOCATIONS = {"body", "query", "path", "header", "cookie"}
# Names pydantic puts in a loc after a union field, for the member that failed: the tags of our
# tagged unions, and pydantic's own names for untagged members of these types.
_PYDANTIC_MEMBERS = {"float", "int", "str", "bool", "none"}
_MAX_ECHO_CHARS = 200
# pydantic's prefixes on a validator's own message: the message is ours, the prefix its framework's.
_FRAMEWORK_PREFIXES = ("Value error, ", "Assertion failed, ")
# A refusal costs in proportion to its answer, not to its request: a body of 95,000 unknown
# keys once got a 15 MB answer that held the event loop for 2 s. The first few problems are
# enough to fix a request; the rest are counted.
MAX_PROBLEMS = 20


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


def _is_union_member(part: str) -> bool:
    return (part in UNION_TAGS or part in _PYDANTIC_MEMBERS
            or part.startswith(("function-", "literal[", "constrained-")))


def field_name(loc: tuple | list, body: Any = None) -> str:
    """Dotted field path of a pydantic loc. A union adds its member's name after the
    field (model.params, value.float); only there is a name like `params` not a field.
    A body that is itself a tagged union (a job, tagged by its probe) puts the tag first:
    a leading name the body has no key for is that tag."""
    parts = [str(p) for p in loc]
    in_body = bool(parts) and parts[0] == "body"
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    if in_body and isinstance(body, dict) and len(parts) > 1 and parts[0] not in body:
        parts = parts[1:]
    parts = parts[:1] + [p for p in parts[1:] if not _is_union_member(p)]
    return ".".join(parts) or "body"


def _json_safe(value: Any) -> bool:
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return len(text) <= _MAX_ECHO_CHARS


_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _item(error: dict, body: Any = None) -> dict:
    loc = list(error.get("loc", ()))
    msg = error.get("msg", "invalid")
    if error.get("type") == "json_invalid":
        msg = f"malformed JSON: {error.get('ctx', {}).get('error', msg)}"
        loc = ["body"]
    elif error.get("type") in ("union_tag_invalid", "union_tag_not_found"):
        # The tag field itself is what to fix (e.g. a job's probe), not the object holding it.
        loc = [*loc, str(error.get("ctx", {}).get("discriminator", "")).strip("'")]
    elif error.get("type") in _BOUNDS and "ctx" in error:  # 1,000,000,000,000,000, not 1000000000000000
        limit = next(iter(error["ctx"].values()))
        if isinstance(limit, (int, float)) and not isinstance(limit, bool):
            msg = f"must be {_BOUNDS[error['type']]} {quantities.readable(limit)}"
    elif error.get("type") == "string_pattern_mismatch":
        msg = "String does not match the pattern in the OpenAPI schema"
    if msg.startswith(_FRAMEWORK_PREFIXES):
        msg = msg.split(", ", 1)[1]
    item = {"loc": loc, "field": field_name(loc, body), "msg": msg, "type": error.get("type", "invalid")}
    value = error.get("input")
    if _json_safe(value) and not (isinstance(value, float) and not math.isfinite(value)):
        item["input"] = value
    return item


def error_body(items: list[dict]) -> dict:
    """The ErrorResponse every 4xx carries: each item's field and message, joined, and the items."""
    return {"message": "; ".join(f"{i['field']}: {i['msg']}" for i in items), "detail": items}


def _response(items: list[dict], status: int = 422) -> JSONResponse:
    return JSONResponse(error_body(items), status_code=status)


def _in_union(error: dict) -> bool:
    loc = error.get("loc", ())
    return bool(loc) and isinstance(loc[-1], str) and _is_union_member(loc[-1])


def _read_as_quantity(errors: list[dict]) -> list[dict]:
    """Where a union member read the text as a quantity and only its bounds refused it
    (mfu: "0" is a number, below 1e-06), that is the answer; the other members' refusals
    (mfu: Input should be 'measured') are noise."""
    read = {tuple(e["loc"][:-1]) for e in errors if e.get("type") == "invalid_input" and _in_union(e)}
    if not read:
        return errors
    return [e for e in errors if not (_in_union(e) and tuple(e["loc"][:-1]) in read
                                      and e.get("type") != "invalid_input")]


def validation_items(errors: list[dict], body: Any = None) -> list[dict]:
    """pydantic's errors (a request's, or a page form's validated by the same model) as items:
    the first MAX_PROBLEMS, and then one item counting the rest."""
    items = _read_as_quantity(errors)
    items = [_item(e, body) for e in items[:MAX_PROBLEMS]]
    if len(errors) > MAX_PROBLEMS:
        more = len(errors) - MAX_PROBLEMS
        items.append({"loc": ["body"], "field": "body", "type": "too_many_errors",
                      "msg": f"{more} more problems not listed (the first {MAX_PROBLEMS} are)"})
    return items


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    return _response(validation_items(exc.errors(), exc.body))


class NotFound(InvalidInput):
    """No item under this path parameter: 404."""


class TooCostly(InvalidInput):
    """A heavy calculation stopped at its time budget (app/api/compute.py): 422 `too_costly`,
    naming the field to narrow."""


class Busy(Exception):
    """Too many heavy calculations at once (app/api/compute.py): this client's (429) or the
    server's (503), with Retry-After; `field` names whose limit it is."""

    def __init__(self, status: int, field: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.status, self.field, self.message, self.retry_after_s = status, field, message, retry_after_s


async def _busy(_: Request, exc: Busy) -> JSONResponse:
    item = {"loc": [exc.field], "field": exc.field, "msg": exc.message, "type": "busy"}
    return JSONResponse(error_body([item]), status_code=exc.status,
                        headers={"Retry-After": str(exc.retry_after_s)})


def invalid_input_item(exc: InvalidInput) -> dict:
    """An engine rule's refusal (or a missing item's) as an item naming its field."""
    where = "path" if isinstance(exc, NotFound) else "body"
    kind = ("not_found" if isinstance(exc, NotFound) else "too_costly" if isinstance(exc, TooCostly)
            else "invalid_input")
    loc = [where] if exc.field == where else [where, *exc.field.split(".")]  # the whole body: ["body"]
    return {"loc": loc, "field": exc.field, "msg": exc.message, "type": kind}


async def _invalid_input(_: Request, exc: InvalidInput) -> JSONResponse:
    return _response([invalid_input_item(exc)], 404 if isinstance(exc, NotFound) else 422)


class Conflict(InvalidInput):
    """The item exists but is in the wrong state for this request: 409."""


async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
    item = {"loc": ["path", *exc.field.split(".")], "field": exc.field, "msg": exc.message,
            "type": "conflict"}
    return _response([item], 409)


# Errors outside the body's fields, named by what they are about.
_HTTP_FIELDS = {400: ("body", "body_unreadable"), 413: ("body", "body_too_large"),
                408: ("body", "body_timeout"),
                401: ("authorization", "unauthorized"), 429: ("queue", "queue_full")}


class QueueFull(HTTPException):
    def __init__(self, limit: int, retry_after_s: int = 10) -> None:
        super().__init__(429, f"{limit} jobs are queued or running (TALLY_QUEUE_LIMIT); try again later",
                         headers={"Retry-After": str(retry_after_s)})


def _allowed(request: Request) -> str:
    """The methods of the path Starlette matched first. It names only that route's, and the
    flat route table (app/api/router.py) keeps one route per method of a path."""
    template, methods = None, set()
    for route in request.app.router.routes:
        if route.matches(request.scope)[0] == Match.PARTIAL:
            template = template or getattr(route, "path", None)
            if getattr(route, "path", None) == template:
                methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def http_error_body(exc: HTTPException) -> dict:
    """An HTTP-level refusal (401, 413, 429 ...) in the ErrorResponse shape, naming what it is about."""
    if exc.status_code not in _HTTP_FIELDS:
        return {"message": str(exc.detail), "detail": []}
    field, kind = _HTTP_FIELDS[exc.status_code]
    loc = ["header", "authorization"] if field == "authorization" else [field]
    return error_body([{"loc": loc, "field": field, "msg": str(exc.detail), "type": kind}])


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    headers = dict(exc.headers or {})
    if exc.status_code == 405 and "app" in request.scope:
        headers["Allow"] = _allowed(request)
    return JSONResponse(http_error_body(exc), status_code=exc.status_code, headers=headers)


class DuplicateKey(HTTPException):
    """A JSON object names `key` twice: 422 naming it (app/api/strict_json.py)."""

    def __init__(self, key: str) -> None:
        super().__init__(422, "appears twice in one object; name each key once")
        self.key = key


class TooManyKeys(HTTPException):
    """A JSON object far larger than any request of ours: 422, before validation lists each key."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(422, f"an object of {count} keys; no request has more than {limit}")


async def _json_refused(_: Request, exc: DuplicateKey | TooManyKeys) -> JSONResponse:
    if isinstance(exc, DuplicateKey):
        item = {"loc": ["body", exc.key], "field": exc.key, "msg": exc.detail, "type": "duplicate_key"}
    else:
        item = {"loc": ["body"], "field": "body", "msg": exc.detail, "type": "too_many_keys"}
    return _response([item])


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"larger than {limit} bytes")


class BodyTimeout(HTTPException):
    def __init__(self, limit_s: float) -> None:
        super().__init__(408, f"not received within {limit_s:g} s (TALLY_BODY_TIMEOUT_S)",
                         headers={"Connection": "close"})


class BodyLimit:
    """Refuse request bodies over `max_bytes` with the usual JSON error, by Content-Length
    up front or by counting a streamed body (Starlette's limiter answers in plain text), and
    bodies not complete within `timeout_s` of the first read, so a client that stalls or
    drips its body cannot hold a connection and a task open: 408."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 30) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            response = await _http_error(Request(scope), BodyTooLarge(self.max_bytes))
            return await response(scope, receive, send)
        seen, deadline, complete = 0, None, False

        async def counted() -> Message:
            nonlocal seen, deadline, complete
            if complete:  # the body is in; later reads wait for a disconnect, as long as it takes
                return await receive()
            deadline = deadline or asyncio.get_running_loop().time() + self.timeout_s
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(self.timeout_s) from None  # answered by _http_error
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)  # answered by _http_error
            return message

        await self.app(scope, counted, send)


# Seconds a client should wait before trying a request the database could not serve.
DATABASE_RETRY_AFTER_S = 30
log = logging.getLogger("tally")


def _unavailable(why: str, kind: str) -> JSONResponse:
    item = {"loc": ["database"], "field": "database", "msg": f"the job database is unavailable: {why}",
            "type": kind}
    return JSONResponse(error_body([item]), status_code=503,
                        headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)})


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    """A full disk, a locked or broken file, a PostgreSQL server gone or refusing: 503 with
    Retry-After; nothing was written (the transaction rolled back)."""
    log.error("job database error on %s %s: %s", request.method, request.url.path, exc)
    path = getattr(getattr(request.app.state, "store", None), "path", None)  # None: PostgreSQL
    why = storage.problem(exc, path=path)
    return _unavailable(why, "disk_full" if storage.is_full(exc, path) else "database_unavailable")


async def _store_unavailable(request: Request, exc: storage.StoreUnavailable) -> JSONResponse:
    log.error("%s", exc)
    return _unavailable(exc.problem, "database_unavailable")


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    """Anything else: the documented shape still, and the traceback in the server's log only."""
    return JSONResponse({"message": "internal error: the server's log has the details", "detail": []},
                        status_code=500)


def database_handlers() -> dict[type[Exception], Any]:
    """The answers to a failing job database. SQLAlchemy wraps the driver's errors (sqlite3's,
    psycopg's) in DBAPIError (OperationalError and the others); TimeoutError: no pooled connection
    came free in time, an overloaded server. Imported here, not at the top: SQLAlchemy costs
    0.1 s of CPU, and a calculator that reads no database should not pay it (bench/cli_speed.py)."""
    import sqlalchemy.exc

    return {sqlite3.Error: _database_error, sqlalchemy.exc.DBAPIError: _database_error,
            sqlalchemy.exc.TimeoutError: _database_error, storage.StoreUnavailable: _store_unavailable}


def install(app: FastAPI, *, max_body_bytes: int, body_timeout_s: float = 30, database: bool = True) -> None:
    """The error handlers and the body limit. `database=False` leaves out database_handlers():
    for an app whose store is not open yet, which adds them as it opens it (app/cli/calc.py)."""
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, timeout_s=body_timeout_s)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Conflict, _conflict)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(DuplicateKey, _json_refused)
    app.add_exception_handler(TooManyKeys, _json_refused)
    app.add_exception_handler(Busy, _busy)
    for error, handler in database_handlers().items() if database else ():
        app.add_exception_handler(error, handler)
    app.add_exception_handler(Exception, _internal_error)


# For `responses=` on routes, so the OpenAPI document states the error shape.
REQUEST_ERRORS = {
    400: {"model": ErrorResponse, "description": "The body could not be read (e.g. not UTF-8)."},
    413: {"model": ErrorResponse, "description": "The body is larger than TALLY_MAX_BODY_BYTES."},
    408: {"model": ErrorResponse, "description": "The body did not arrive within TALLY_BODY_TIMEOUT_S."},
    422: {"model": ErrorResponse,
          "description": "Malformed JSON, a key named twice, or a field out of bounds or breaking a rule; "
                         "`message` names it. At most 20 problems are listed, then a count of the rest."},
}
NOT_FOUND = {404: {"model": ErrorResponse, "description": "No such item."}}
CONFLICT = {409: {"model": ErrorResponse, "description": "The item is not in a state that allows this."}}
AUTH = {401: {"model": ErrorResponse, "description": "TALLY_API_TOKEN is set and the bearer token is "
                                                      "missing or wrong."}}
UNAVAILABLE = {503: {"model": ErrorResponse, "description": "The job database cannot be read or written "
                                                          "(a full disk, say); try again after Retry-After."}}
HEAVY = {
    422: {"model": ErrorResponse,
          "description": REQUEST_ERRORS[422]["description"] + " Type `too_costly`: the calculation ran past "
                         "TALLY_COMPUTE_BUDGET_S; narrow the field named."},
    429: {"model": ErrorResponse, "description": "This client has TALLY_COMPUTE_PER_CLIENT heavy calculations "
                                                 "running or waiting; retry after Retry-After."},
    503: {"model": ErrorResponse, "description": "TALLY_COMPUTE_QUEUE heavy calculations are running or "
                                                 "waiting; retry after Retry-After."},
}
"""The refusals of a heavy calculator (app/api/compute.py), beside REQUEST_ERRORS."""
QUEUE_FULL = {429: {"model": ErrorResponse, "description": "TALLY_QUEUE_LIMIT jobs are queued or running."}}
