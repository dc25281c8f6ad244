"""Every JSON route, under /api/v1.

Each module keeps its own APIRouter; the app gets their routes flat. FastAPI
0.16x matches an included router as a live subtree, re-matching it at each
level, which cost ~20-40 us per request here (bench/api_throughput.py), more
than most calculators take. Copying the routes keeps one router per module in
the source and a flat table at run time; tests/api/test_openapi.py checks that
the OpenAPI document is the one include_router would give.

The modules are named, not imported, here: importing them all costs more than a second of
CPU (their services, pydantic's schemas), and `tally calc` needs one (bench/cli_speed.py).
"""

import importlib
import inspect
from collections.abc import Iterable
from types import ModuleType

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter
from starlette.routing import compile_path

PREFIX = "/api/v1"
# Tried in this order: the calculators most called first, catalogue reads last.
MODULES = tuple(f"app.api.routes.{name}" for name in (
    "memory", "inference", "flops", "time", "finetune", "fit", "comm", "plan", "tensors", "dtypes", "models",
    "hardware", "jobs", "device", "calibration", "accuracy", "fleet", "data", "checkpoint", "energy",
    "imports"))
_ROUTE_OPTIONS = tuple(name for name in inspect.signature(APIRouter.add_api_route).parameters
                       if name not in ("self", "path", "endpoint"))


def modules(names: Iterable[str] | None = None) -> list[ModuleType]:
    """The route modules `names` (every one by default), imported, in the table's order."""
    wanted = set(MODULES if names is None else names)
    assert wanted <= set(MODULES), wanted - set(MODULES)
    return [importlib.import_module(name) for name in MODULES if name in wanted]


def include_api(app: FastAPI, names: Iterable[str] | None = None, path: str | None = None) -> None:
    """Add the routes of the modules `names` (every one by default) to the app under PREFIX,
    with all their options. With `path`, only the routes that can take part in routing a
    request for it: those whose pattern matches it, or matches it with its trailing slash
    toggled (Starlette redirects there); the others match neither, so they change nothing."""
    for module in modules(names):
        for route in module.router.routes:
            assert isinstance(route, APIRoute), route
            if path is not None and not _matches(PREFIX + route.path, path):
                continue
            options = {name: getattr(route, name) for name in _ROUTE_OPTIONS if hasattr(route, name)}
            app.router.add_api_route(PREFIX + route.path, route.endpoint, **options)


def _matches(pattern: str, path: str) -> bool:
    regex = compile_path(pattern)[0]
    toggled = path.rstrip("/") if path.endswith("/") else path + "/"
    return any(regex.match(p) for p in (path, toggled))


def include_api_nested(app: FastAPI, names: Iterable[str] | None = None, path: str | None = None) -> None:
    """The same routes through include_router: the reference the flat table must match (whole
    modules only: no `path`)."""
    assert path is None, path
    for module in modules(names):
        app.include_router(module.router, prefix=PREFIX)
