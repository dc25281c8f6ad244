"""How much the server takes on at once, counted where it costs: requests whose body is all in.

uvicorn's own limit (its limit_concurrency) counts open connections, so a client that opens
connections and sends nothing, or sends its body a byte a second, filled every slot and everyone
else got 503 (260 idle sockets did it). Here a connection costs nothing until its request is
whole: the protocol drops one whose headers are late (app/cli/protocol.py) and caps the open
connections (TALLY_LIMIT_CONNECTIONS), BodyLimit (app/api/errors.py) ends a body that is late,
and RequestLimit admits at most TALLY_LIMIT_CONCURRENCY requests at a time once their bodies have
arrived; beyond that, 503 with Retry-After. Liveness, readiness and metrics are never refused, so
monitoring sees an overload. It also answers 431 to a request line and headers over
TALLY_MAX_HEADER_BYTES, which h11 enforces only on a header block that arrives in pieces.
"""

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body, http_error_body

# Never refused for load: what tells an operator the server is overloaded.
UNLIMITED = frozenset({"/healthz", "/readyz", "/metrics"})
RETRY_AFTER_S = 1


def _refusal(status: int, field: str, msg: str, kind: str, **headers: str) -> JSONResponse:
    return JSONResponse(error_body([{"loc": ["header" if field == "headers" else field], "field": field,
                                     "msg": msg, "type": kind}]), status_code=status, headers=headers)


def header_bytes(scope: Scope) -> int:
    """The request line and header block's size as sent: "METHOD target HTTP/1.1\\r\\n", then each
    "name: value\\r\\n", then the blank line."""
    target = len(scope.get("raw_path") or scope["path"].encode()) + (
        1 + len(scope["query_string"]) if scope.get("query_string") else 0)
    line = len(scope["method"]) + 1 + target + 1 + len("HTTP/1.1") + 2
    return line + sum(len(name) + 2 + len(value) + 2 for name, value in scope["headers"]) + 2


class RequestLimit:
    """At most `limit` requests at once, each counted from when its body is all in, and none whose
    headers exceed `max_header_bytes`."""

    def __init__(self, app: ASGIApp, limit: int, max_header_bytes: int) -> None:
        self.app, self.limit, self.max_header_bytes = app, limit, max_header_bytes
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if (size := header_bytes(scope)) > self.max_header_bytes:
            refusal = _refusal(431, "headers", f"the request line and headers are {size} bytes, over "
                               f"{self.max_header_bytes} (TALLY_MAX_HEADER_BYTES)", "headers_too_large",
                               Connection="close")
            return await refusal(scope, receive, send)
        if scope["path"] in UNLIMITED:
            return await self.app(scope, receive, send)
        # The body first (BodyLimit, outside, bounds its size and its time): a request still
        # arriving holds no slot.
        body: list[Message] = []
        try:
            while True:
                message = await receive()
                body.append(message)
                if message["type"] != "http.request" or not message.get("more_body", False):
                    break
        except HTTPException as exc:  # BodyLimit's 408 or 413, answered as the routes' would be
            refusal = JSONResponse(http_error_body(exc), status_code=exc.status_code, headers=exc.headers)
            return await refusal(scope, receive, send)
        if self.in_flight >= self.limit:
            refusal = _refusal(503, "server", f"{self.limit} requests are being answered (TALLY_LIMIT_CONCURRENCY); "
                               "try again shortly", "busy", **{"Retry-After": str(RETRY_AFTER_S)})
            return await refusal(scope, receive, send)

        async def replay() -> Message:
            return body.pop(0) if body else await receive()

        self.in_flight += 1
        try:
            await self.app(scope, replay, send)
        finally:
            self.in_flight -= 1
