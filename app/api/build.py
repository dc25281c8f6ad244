"""build_api(): the JSON API (/api/v1) with its error handlers, over the settings and the job
store; the server's core (app/main.py create_app adds the pages, metrics and dispatchers) and
what `tally calc` and `tally probe` call in process.

`routes` narrows the table to some route modules, and `path` to their routes that can route a
request for that path: `tally calc` builds the API for its one request, as importing every
module costs more than a second of CPU and each route it builds ~10 ms (bench/cli_speed.py).
The request is answered as the whole table answers it: routes of different modules never share
a path's first segment (tests/api/test_cli_table.py), and a route whose pattern does not match the
path takes no part in routing it.
"""

from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from fastapi import FastAPI

from app import __version__
from app.api import errors, openapi, router
from app.api.compute import Compute
from app.api.limits import RequestLimit
from app.api.strict_json import StrictJsonRoute
from app.config import Settings

if TYPE_CHECKING:  # the store's module imports SQLAlchemy and the probes: a calculator needs neither
    from app.jobs.store import Store

DESCRIPTION = """Deep-learning resource accounting: FLOPs, bytes and seconds.

Conventions: one multiply-add is 2 FLOPs (MACs are reported separately); GPU peaks
are dense (no 2:4 sparsity); byte counts are exact integers, with GB = 10^9 and
GiB = 2^30 both given where a human reading helps. Every 4xx names its field.
"""


# The order /docs shows; routes themselves are matched hottest-first (app/api/router.py).
TAGS = [
    {"name": "number formats", "description": "Bit layouts, limits and exact encoding."},
    {"name": "tensors", "description": "Bytes, strides, contiguity and views."},
    {"name": "flops", "description": "Matmul, linear stack and transformer FLOPs."},
    {"name": "models", "description": "Presets and Hugging Face config import."},
    {"name": "memory", "description": "Training memory per GPU; the largest model that fits."},
    {"name": "time", "description": "Training time, cost and MFU."},
    {"name": "energy", "description": "Energy (kWh) and carbon (CO2e) of GPU-hours, every input sourced."},
    {"name": "inference", "description": "Serving: weights by format, KV cache, capacity, prefill and decode "
                                         "time on the roofline."},
    {"name": "fine-tuning", "description": "LoRA, QLoRA, frozen parts and full fine-tuning: parameters, "
                                           "memory, FLOPs and time of a step."},
    {"name": "fit", "description": "Will it run on my GPU: serving and fine-tuning options side by side."},
    {"name": "communication", "description": "Collectives between GPUs: time, algbw and busbw as nccl-tests "
                                             "reports them."},
    {"name": "planning", "description": "Training layouts over many GPUs: data, tensor, pipeline and expert "
                                        "parallelism searched, timed and sized."},
    {"name": "data", "description": "A tokenized dataset on disk: bytes by token dtype, shards, and the read "
                                    "bandwidth a run needs."},
    {"name": "checkpoints", "description": "A checkpoint's bytes, its write and read time, and the share "
                                           "of a run spent saving it."},
    {"name": "hardware", "description": "Accelerator catalogue: dense peaks, memory, bandwidth."},
    {"name": "jobs", "description": "Benchmark probes queued and run on this server's device."},
    {"name": "device", "description": "The worker's device and what it has measured."},
    {"name": "fleet", "description": "Many boxes on one queue: their devices, campaigns, burn-ins."},
    {"name": "calibration", "description": "What this fleet measured, as profiles the time calculators "
                                           "answer from: campaigns, build, export, import."},
    {"name": "operations", "description": "Liveness, readiness and Prometheus metrics."},
]
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def build_api(settings: Settings, store: "Store", *, lifespan: Lifespan | None = None,
              routes: Iterable[str] | None = None, path: str | None = None,
              database: bool = True, compute: Compute | None = None) -> FastAPI:
    """The JSON API (/api/v1) with its error handlers, over `settings` and `store` (app.state);
    the routes of the modules `routes` (app/api/router.py MODULES), or of every one; with
    `path`, only those that route a request for it (router.include_api). `database=False`:
    without the database's error handlers, for a store not open yet (errors.install).
    `compute`: where heavy calculations run (app/api/compute.py); default a worker pool."""
    app = FastAPI(title="Tally", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  openapi_tags=TAGS, docs_url=None, redoc_url=None)
    app.state.settings, app.state.store = settings, store
    app.state.compute = compute or Compute.of(settings)
    # Inside the body's limits (installed next, so run first): a request counts once its body is in.
    app.add_middleware(RequestLimit, limit=settings.limit_concurrency, max_header_bytes=settings.max_header_bytes)
    errors.install(app, max_body_bytes=settings.max_body_bytes, body_timeout_s=settings.body_timeout_s,
                   database=database)
    app.router.route_class = StrictJsonRoute  # every route added from here on parses JSON strictly
    router.include_api(app, routes, path)
    openapi.state_auth(app, required=settings.api_token is not None)
    return app
