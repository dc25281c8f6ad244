"""The OpenAPI document states the authentication this server really asks for.

Routes declare the bearer scheme and a 401 once, in their source (app/deps.py Authorized,
app/api/errors.py AUTH). A server with no token refuses nobody, so its document drops both:
otherwise clients and fuzzers are told to send a token that changes nothing.
"""

from typing import Any

from fastapi import FastAPI


def without_auth(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (changed in place) with no security requirement, scheme, or 401 answer."""
    for path in document.get("paths", {}).values():
        for operation in path.values():
            if isinstance(operation, dict) and operation.pop("security", None) is not None:
                operation.get("responses", {}).pop("401", None)
    components = document.get("components", {})
    components.pop("securitySchemes", None)
    return document


def state_auth(app: FastAPI, *, required: bool) -> None:
    """Make `app.openapi()` declare bearer authentication only when it is `required`."""
    if required:
        return
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = without_auth(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def examples(**bodies: Any) -> dict[str, dict[str, Any]]:
    """FastAPI `openapi_examples` from named bodies, the first of which Swagger's "Try it out"
    pre-fills (instead of a body generated from the schema, with every optional object in it).
    tests/api/test_examples.py replays every one and expects a 2xx."""
    return {name.replace("_", " "): {"summary": name.replace("_", " "), "value": body}
            for name, body in bodies.items()}
