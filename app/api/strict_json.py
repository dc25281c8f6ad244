"""JSON request bodies, parsed strictly: an object that names a key twice is refused with a
422 naming the key (json.loads would silently keep the last), and so is an object of more
than MAX_KEYS keys, before pydantic spends time listing each one as a problem.

FastAPI parses a body with `await request.json()`; StrictJsonRoute hands its handler a
request whose json() does this instead. dict(pairs) runs in C, so the check costs one
length comparison per object (bench/api_throughput.py: the echo route pays it too).

A route that needs the API token (its dependencies include deps.authorize) checks it first,
before its body is read: FastAPI reads and parses a body before it solves dependencies, so a
client without the token learned 422 (bad JSON, a key twice) instead of 401.
"""

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from app import deps
from app.api.errors import DuplicateKey, TooManyKeys

# No request of ours has objects this large; the largest is a Hugging Face config.json,
# whose id2label may list 1,000 classes.
MAX_KEYS = 1024


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len(pairs) > MAX_KEYS:
        raise TooManyKeys(len(pairs), MAX_KEYS)
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


def loads(text: str | bytes) -> Any:
    """json.loads, refusing duplicate keys and oversized objects."""
    return json.loads(text, object_pairs_hook=_object)


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


def _calls(dependant: Dependant, call: Callable[..., Any]) -> bool:
    """Whether `call` is among the dependencies of `dependant`, at any depth."""
    return any(d.call is call or _calls(d, call) for d in dependant.dependencies)


class StrictJsonRoute(APIRoute):
    """An APIRoute whose JSON body goes through `loads`, and whose token, where it needs one, is
    checked before the body is read."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        token_first = _calls(self.dependant, deps.authorize)

        async def strict(request: Request) -> Response:
            if token_first:
                deps.check_token(request.app.state.settings, deps.bearer_token(request))
            request.__class__ = StrictJsonRequest  # same state, stricter json(); nothing read yet
            return await handler(request)

        return strict
