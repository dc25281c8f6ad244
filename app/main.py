"""create_app(): the JSON API, the pages, static files and error handlers; a uvicorn app
factory (`uvicorn --factory app.main:create_app`), so importing this module creates nothing.
build_api(): the JSON API alone, which `tally calc` and `tally probe` call in process.

This process never imports torch: GPU work runs in child processes.
"""

import logging
import secrets
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from pydantic import SecretStr
from starlette.concurrency import run_in_threadpool

from app import __version__, device, logs
from app.api import errors, openapi
from app.api.router import include_api
from app.api.strict_json import StrictJsonRoute
from app.config import Settings, get_settings
from app.jobs.dispatcher import Dispatcher, default_worker_id
from app.jobs.storage import StoreUnavailable
from app.jobs.store import Store
from app.ops.metrics import Metrics, RequestMetrics
from app.ops.routes import router as ops_router
from app.ops.security import RequestGuard
from app.paths import STATIC_DIR
from app.web.benchmarks import router as benchmarks_router
from app.web.fleet import router as fleet_router
from app.web.headers import PageHeaders
from app.web.pages import router as pages_router

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
    {"name": "operations", "description": "Liveness, readiness and Prometheus metrics."},
]
log = logging.getLogger("tally")
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def dispatchers(store: Store, settings: Settings) -> list[Dispatcher]:
    """One dispatcher per GPU served (TALLY_GPUS, or every GPU NVML sees), so jobs on different
    GPUs run side by side and never two on one; one CPU dispatcher on a box without a GPU."""
    gpus, host = device.served_gpus(settings.gpus), settings.box()
    return [Dispatcher(store, default_worker_id(settings.worker_id, gpu), gpu=gpu, served=gpus, host=host,
                       fleet_device=device.fleet_device(host, gpu),
                       worker_loss_retries=settings.worker_loss_retries) for gpu in gpus or [None]]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The embedded dispatchers run for as long as the server does."""
    settings: Settings = app.state.settings
    running: list[Dispatcher] = []
    if settings.embedded_worker:
        running = dispatchers(app.state.store, settings)
        for dispatcher in running:
            dispatcher.start()
        app.state.dispatchers = running
        log.info("embedded dispatchers %s started on %s", [d.worker_id for d in running],
                 app.state.store.where)
    try:
        yield
    finally:
        for dispatcher in running:  # each stop requeues its running job; stop them all at once
            dispatcher.request_stop()
        for dispatcher in running:
            await run_in_threadpool(dispatcher.stop)


def build_api(settings: Settings, store: Store, *, lifespan: Lifespan | None = None) -> FastAPI:
    """The JSON API (/api/v1) with its error handlers, over `settings` and `store` (app.state)."""
    app = FastAPI(title="Tally", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  openapi_tags=TAGS, docs_url=None, redoc_url=None)
    app.state.settings, app.state.store = settings, store
    errors.install(app, max_body_bytes=settings.max_body_bytes, body_timeout_s=settings.body_timeout_s)
    app.router.route_class = StrictJsonRoute  # every route added from here on parses JSON strictly
    include_api(app)
    openapi.state_auth(app, required=settings.api_token is not None)
    return app


def open_store_or_exit(database: str | Path) -> Store:
    """Start-up's open: a database that cannot be opened, created or written (a missing or
    read-only directory, a file that is no database, a full disk; a PostgreSQL server that is not
    there, lacks the database or refuses the login) stops the process with one line naming the
    database and the problem, status 2, as a bad setting does."""
    try:
        return Store(database)
    except StoreUnavailable as e:
        print(f"tally: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def with_token(settings: Settings) -> Settings:
    """`settings`, with a generated API token when it would otherwise take anonymous jobs on a
    network address; the token is logged once, with the URL that hands it to the dashboard
    (as Jupyter does). One per process: run one server process per token."""
    if not settings.exposed_without_token():
        return settings
    token = secrets.token_urlsafe(24)
    host = socket.gethostname() if settings.host in ("0.0.0.0", "::", "") else settings.host
    log.warning("TALLY_API_TOKEN is not set and the server binds %s, so submitting and cancelling "
                "jobs need this generated token (set TALLY_API_TOKEN to choose one, or "
                "TALLY_ALLOW_ANONYMOUS=true to need none). Open the dashboard at "
                "http://%s:%d/?token=%s or send Authorization: Bearer %s",
                settings.host, host, settings.port, token, token, extra={"reveal": True})
    return settings.model_copy(update={"api_token": SecretStr(token)})


def create_app(settings: Settings | None = None) -> FastAPI:
    """The server: the API, with the embedded dispatchers, request metrics, /healthz, /readyz
    and /metrics, the pages and static files; the Host and cross-site checks in front of
    them all (app/ops/security.py), the security headers on the pages (app/web/headers.py)."""
    settings = with_token(settings or get_settings())
    logs.protect(settings.secrets())
    app = build_api(settings, open_store_or_exit(settings.database()), lifespan=lifespan)
    app.state.metrics = Metrics(app.state.store, device.gauges)
    # The last added runs first: metrics count the guard's refusals too.
    app.add_middleware(PageHeaders)
    app.add_middleware(RequestGuard, allowed_hosts=settings.host_names())
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)
    app.include_router(ops_router)
    app.include_router(pages_router)
    app.include_router(benchmarks_router)
    app.include_router(fleet_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
