"""create_app(): the JSON API, the pages, static files and error handlers; a uvicorn app
factory (`uvicorn --factory app.main:create_app`), so importing this module creates nothing.
build_api() (app/api/build.py): the JSON API alone, which `tally calc` and `tally probe` call
in process.

This process never imports torch: GPU work runs in child processes.
"""

import asyncio
import logging
import secrets
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from pydantic import SecretStr
from starlette.concurrency import run_in_threadpool

from app import device, logs
from app.api.build import build_api
from app.api.compute import Compute, close_pools
from app.config import Settings, get_settings
from app.jobs.dispatcher import Dispatcher, default_worker_id
from app.jobs.storage import StoreUnavailable
from app.jobs.store import Store
from app.ops.metrics import Metrics, RequestMetrics
from app.ops.routes import router as ops_router
from app.ops.security import RequestGuard
from app.paths import STATIC_DIR
from app.web.benchmarks import router as benchmarks_router
from app.web.calibration import router as calibration_router
from app.web.fleet import router as fleet_router
from app.web.headers import PageHeaders
from app.web.pages import router as pages_router

log = logging.getLogger("tally")


def dispatchers(store: Store, settings: Settings) -> list[Dispatcher]:
    """One dispatcher per GPU served (TALLY_GPUS, or every GPU NVML sees), so jobs on different
    GPUs run side by side and never two on one; one CPU dispatcher on a box without a GPU."""
    gpus, host = device.served_gpus(settings.gpus), settings.box()
    return [Dispatcher(store, default_worker_id(settings.worker_id, gpu), gpu=gpu, served=gpus, host=host,
                       fleet_device=device.fleet_device(host, gpu), stale_after_s=settings.stale_after_s,
                       worker_loss_retries=settings.worker_loss_retries, address=settings.node_address,
                       gather_wait_s=settings.gather_wait_s) for gpu in gpus or [None]]


async def expire_lost(store: Store, after_s: float) -> None:
    """Every min(30 s, after_s / 4), fail the queued jobs whose device was lost for good (the fleet's
    rule: app/jobs/fleet.py expire_lost), whatever dispatchers run: lost ones run nothing."""
    while True:
        await asyncio.sleep(min(30.0, after_s / 4))
        try:
            if expired := await run_in_threadpool(store.expire_lost, after_s=after_s):
                log.warning("jobs %s failed as DeviceLost: their targets were lost %g s ago", expired, after_s)
        except Exception:  # a database out for a while: the next round tries again
            log.exception("checking for jobs of lost devices failed; trying again")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The embedded dispatchers, and the check for jobs of lost devices, run for as long as the
    server does."""
    settings: Settings = app.state.settings
    running: list[Dispatcher] = []
    app.state.compute.start()  # its workers start now, not on the first heavy request
    janitor = asyncio.create_task(expire_lost(app.state.store, settings.device_lost_after_s))
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
        janitor.cancel()
        for dispatcher in running:  # each stop requeues its running job; stop them all at once
            dispatcher.request_stop()
        for dispatcher in running:
            await run_in_threadpool(dispatcher.stop)
        await run_in_threadpool(close_pools)


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
    # The pool's fork server also holds the heavy pages' task and calculators (app/web/heavy.py).
    app = build_api(settings, open_store_or_exit(settings.database()), lifespan=lifespan,
                    compute=Compute.of(settings, preload=("app.web.heavy",)))
    app.state.metrics = Metrics(app.state.store, device.gauges, app.state.compute)
    # The last added runs first: metrics count the guard's refusals too.
    app.add_middleware(PageHeaders)
    app.add_middleware(RequestGuard, allowed_hosts=settings.host_names())
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)
    app.include_router(ops_router)
    app.include_router(pages_router)
    app.include_router(benchmarks_router)
    app.include_router(fleet_router)
    app.include_router(calibration_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
