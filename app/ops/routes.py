"""Liveness, readiness and Prometheus metrics, at the root as orchestrators expect."""

from typing import Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from app.deps import StoreDep
from app.jobs.store import Store

router = APIRouter(tags=["operations"])
# A dispatcher says it is alive every heartbeat (1 s), idle or running a job.
WORKER_SEEN_WITHIN_S = 15


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    ready: bool
    database: bool
    """The job database answered a query."""
    dispatcher: Literal["embedded", "external", "none"]
    dispatcher_running: bool
    """Every embedded dispatcher (one per GPU) runs, or an external one was seen."""
    workers: list[str]
    """Dispatchers seen in the last 15 seconds."""


@router.get("/healthz", response_model=Health)
async def healthz() -> Response:
    """The process is alive and serving."""
    return JSONResponse({"status": "ok"})


def _readiness(store: Store, embedded: list | None) -> Readiness:
    try:
        store.counts()
        workers, database = store.live_workers(within_s=WORKER_SEEN_WITHIN_S), True
    except Exception:  # any database failure means not ready, never a 500
        workers, database = [], False
    if embedded:
        kind, running = "embedded", all(d.is_running() for d in embedded)
    else:
        kind, running = ("external", True) if workers else ("none", False)
    return Readiness(ready=database and running, database=database, dispatcher=kind,
                     dispatcher_running=running, workers=workers)


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness,
                                                                  "description": "Not ready."}})
async def readyz(request: Request, jobs: StoreDep) -> Response:
    """Ready when the database answers and a dispatcher runs (embedded, or a `tally worker`
    seen in the last 15 s); 503 otherwise."""
    state = await run_in_threadpool(_readiness, jobs, getattr(request.app.state, "dispatchers", None))
    return JSONResponse(state.model_dump(), status_code=200 if state.ready else 503)


@router.get("/metrics", response_class=Response, responses={200: {
    "content": {"text/plain": {"schema": {"type": "string"}}},
    "description": "Prometheus text format 0.0.4."}})
async def metrics(request: Request) -> Response:
    """Requests by route and status with latency histograms, jobs by state, queue depth,
    and the GPU's NVML gauges where there is one."""
    body = await run_in_threadpool(request.app.state.metrics.exposition)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
