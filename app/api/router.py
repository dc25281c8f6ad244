"""Every JSON route, under /api/v1.

Each module keeps its own APIRouter; the app gets their routes flat. FastAPI
0.16x matches an included router as a live subtree, re-matching it at each
level, which cost ~20-40 us per request here (bench/api_throughput.py), more
than most calculators take. Copying the routes keeps one router per module in
the source and a flat table at run time; tests/test_openapi.py checks that
the OpenAPI document is the one include_router would give.
"""

import inspect

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter

from app.api.routes import (
    checkpoint,
    comm,
    data,
    device,
    dtypes,
    energy,
    finetune,
    fit,
    fleet,
    flops,
    hardware,
    inference,
    jobs,
    memory,
    models,
    plan,
    tensors,
    time,
)

PREFIX = "/api/v1"
# Tried in this order: the calculators most called first, catalogue reads last.
MODULES = (memory, inference, flops, time, finetune, fit, comm, plan, tensors, dtypes, models, hardware, jobs,
           device, fleet, data, checkpoint, energy)
_ROUTE_OPTIONS = tuple(name for name in inspect.signature(APIRouter.add_api_route).parameters
                       if name not in ("self", "path", "endpoint"))


def include_api(app: FastAPI) -> None:
    """Add every module's routes to the app under PREFIX, with all their options."""
    for module in MODULES:
        for route in module.router.routes:
            assert isinstance(route, APIRoute), route
            options = {name: getattr(route, name) for name in _ROUTE_OPTIONS if hasattr(route, name)}
            app.router.add_api_route(PREFIX + route.path, route.endpoint, **options)


def include_api_nested(app: FastAPI) -> None:
    """The same routes through include_router: the reference the flat table must match."""
    for module in MODULES:
        app.include_router(module.router, prefix=PREFIX)
