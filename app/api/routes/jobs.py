"""Benchmark jobs: submit, list, read, cancel, follow live, export."""

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field, create_model

from app.accounting.errors import InvalidInput
from app.api import deps
from app.api.errors import (
    AUTH,
    CONFLICT,
    NOT_FOUND,
    QUEUE_FULL,
    REQUEST_ERRORS,
    Conflict,
    NotFound,
    QueueFull,
)
from app.api.fields import Input, count, number
from app.api.responses import respond
from app.bench.results import ProbeResult
from app.bench.specs import PARAMS
from app.jobs import admission, export, store

router = APIRouter(prefix="/jobs", tags=["jobs"])

Probe = Literal[tuple(PARAMS)]  # type: ignore[valid-type]
Status = Literal[store.STATES]  # type: ignore[valid-type]


def _request_model(name: str, params: type) -> type[Input]:
    return create_model(
        f"{params.__name__.removesuffix('Params')}Job", __base__=Input,
        probe=(Literal[name], ...),
        params=(params, Field(default_factory=params, description="Bounded like the schema says.")),
        timeout_s=(number(ge=1, le=86_400) | None, Field(
            None, description="Hard time limit in seconds; default TALLY_JOB_TIMEOUT_S, at most "
                              "TALLY_JOB_TIMEOUT_MAX_S.")),
        gpu=(count(ge=0, le=1023) | None, Field(
            None, description="Run on this GPU (NVML's index, GET /api/v1/devices) and "
                                             "no other; default the first GPU free.")),
    )


JobRequest = Annotated[
    _request_model("matmul", PARAMS["matmul"]) | _request_model("bandwidth", PARAMS["bandwidth"])
    | _request_model("transfer", PARAMS["transfer"]) | _request_model("train_step", PARAMS["train_step"]),
    Field(discriminator="probe")]


class Progress(BaseModel):
    done: int
    total: int
    message: str
    fraction: float | None
    """done / total; null before the probe has said how much there is."""


class JobError(BaseModel):
    type: str
    """The exception's class, or ChildCrashed, Timeout, Cancelled, Interrupted, ProtocolError."""
    message: str
    detail: dict[str, Any]
    """oom: the allocator's figures in bytes; crashed: exit code, signal, the child's last stderr."""


class JobSummary(BaseModel):
    id: int
    probe: Probe  # type: ignore[valid-type]
    status: Status  # type: ignore[valid-type]
    params: dict[str, Any]
    device: str | None
    """cuda or cpu: where the job runs."""
    gpu: int | None
    """The GPU the job asked for; null: any."""
    ran_on_gpu: int | None
    """The GPU its dispatcher ran it on (NVML's index); null on the CPU or before it starts."""
    attempts: int
    """Times a dispatcher took it: 2 after one interruption (a killed worker)."""
    timeout_s: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress: Progress
    error: JobError | None
    cancel_requested: bool
    revision: int
    """Goes up whenever the row changes."""


class JobOut(JobSummary):
    result: Annotated[ProbeResult, Field(discriminator="probe")] | None  # type: ignore[valid-type]


class JobPage(BaseModel):
    data: list[JobSummary]
    count: int
    """Jobs matching the filter, over all pages."""
    limit: int
    offset: int


def _time(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


def _fields(job: store.Job) -> dict[str, Any]:
    total = job.progress_total
    return dict(
        id=job.id, probe=job.probe, status=job.status, params=job.params, device=job.device,
        gpu=job.gpu, ran_on_gpu=job.ran_on_gpu, attempts=job.attempts, timeout_s=job.timeout_s,
        created_at=_time(job.created_at), started_at=_time(job.started_at),
        finished_at=_time(job.finished_at),
        progress=Progress(done=job.progress_done, total=total, message=job.progress_message,
                          fraction=job.progress_done / total if total else None),
        error=job.error, cancel_requested=job.cancel_requested, revision=job.revision)


def job_out(job: store.Job) -> JobOut:
    return JobOut(**_fields(job), result=job.result)


def _found(jobs: store.Store, job_id: int) -> store.Job:
    job = jobs.get(job_id)
    if job is None:
        raise NotFound("job_id", f"no job {job_id}")
    return job


def _existing(job_id: int, request: Request) -> store.Job:
    """As a dependency, so a stream's 404 is answered before the stream starts."""
    return _found(deps.store(request), job_id)


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(deps.bearer)]
JobId = Annotated[int, Field(ge=1, le=2**63 - 1)]


@router.post("", status_code=202, response_model=JobOut, responses=REQUEST_ERRORS | AUTH | QUEUE_FULL)
def submit(body: JobRequest, request: Request, credentials: Credentials) -> Response:  # type: ignore[valid-type]
    """Queue a probe. 202 with the job; follow it at /jobs/{id} or /jobs/{id}/events."""
    deps.require_token(request, credentials)
    settings = deps.settings(request)
    timeout = body.timeout_s if body.timeout_s is not None else settings.job_timeout_s
    if timeout > settings.job_timeout_max_s:
        raise InvalidInput("timeout_s", f"{timeout} exceeds TALLY_JOB_TIMEOUT_MAX_S "
                                        f"({settings.job_timeout_max_s})")
    where = admission.device_for(body.gpu, body.params, settings.gpus)
    kind = admission.check_fits(body.params, where)
    try:
        job = deps.store(request).submit(probe=body.probe, params=body.params.model_dump(mode="json"),
                                         timeout_s=timeout, limit=settings.queue_limit, device=kind,
                                         gpu=body.gpu)
    except store.QueueFull as e:
        raise QueueFull(e.limit) from None
    return Response(job_out(job).model_dump_json(), status_code=202, media_type="application/json",
                    headers={"Location": f"{request.url.path}/{job.id}"})


@router.get("", response_model=JobPage, responses=REQUEST_ERRORS)
def list_jobs(request: Request, probe: Probe | None = None,  # type: ignore[valid-type]
              status: Annotated[list[Status] | None, Query()] = None,  # type: ignore[valid-type]
              limit: Annotated[int, Query(ge=1, le=500)] = 50,
              offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> Response:
    """Newest first. status may repeat: ?status=queued&status=running."""
    jobs, total = deps.store(request).page(probe=probe, status=status, limit=limit, offset=offset)
    page = JobPage(data=[JobSummary(**_fields(j)) for j in jobs], count=total, limit=limit, offset=offset)
    return respond(page)


@router.get("/{job_id}", response_model=JobOut, responses=REQUEST_ERRORS | NOT_FOUND)
def get_job(job_id: JobId, request: Request) -> Response:
    """Status, progress, result and error."""
    return respond(job_out(_found(deps.store(request), job_id)))


@router.post("/{job_id}/cancel", response_model=JobOut,
             responses=REQUEST_ERRORS | NOT_FOUND | CONFLICT | AUTH)
def cancel(job_id: JobId, request: Request, credentials: Credentials) -> Response:
    """A queued job is cancelled at once; a running one is stopped within a moment."""
    deps.require_token(request, credentials)
    jobs = deps.store(request)
    job = _found(jobs, job_id)
    if job.terminal:
        raise Conflict("job_id", f"job {job_id} has already ended: {job.status}")
    return respond(job_out(jobs.cancel(job_id)))


POLL_S = 0.25


def _as_json(responses: dict) -> dict:
    """Error docs for a route whose success is not JSON: the errors still are."""
    ref = {"$ref": "#/components/schemas/ErrorResponse"}
    return {code: {"description": doc["description"], "content": {"application/json": {"schema": ref}}}
            for code, doc in responses.items()}


@router.get("/{job_id}/events", response_class=EventSourceResponse,
            responses=_as_json(REQUEST_ERRORS | NOT_FOUND))
async def events(job_id: JobId, request: Request, job: Annotated[store.Job, Depends(_existing)]):
    """Server-sent events: `progress` with the job (no result) whenever it changes, then
    one `end` with the whole job once it has ended. The stream then closes."""
    jobs = deps.store(request)
    seen = -1
    while True:
        if job.revision != seen:
            seen = job.revision
            if job.terminal:
                yield ServerSentEvent(raw_data=job_out(job).model_dump_json(), event="end", id=str(seen))
                return
            yield ServerSentEvent(raw_data=JobSummary(**_fields(job)).model_dump_json(), event="progress",
                                  id=str(seen))
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
        job = await asyncio.to_thread(jobs.get, job_id)


@router.get("/{job_id}/result", response_model=JobOut,
            responses=REQUEST_ERRORS | NOT_FOUND | CONFLICT | {
                200: {"content": {"text/csv": {"schema": {"type": "string"}}},
                      "description": "JSON: the job. CSV: one row per measurement."}})
def result(job_id: JobId, request: Request, format: Literal["json", "csv"] = "json") -> Response:
    """Download a succeeded job's result, as JSON (the whole job) or CSV."""
    job = _found(deps.store(request), job_id)
    if job.status != "succeeded":
        raise Conflict("job_id", f"job {job_id} is {job.status}; only a succeeded job has a result")
    name = f"tally-job-{job.id}-{job.probe}.{format}"
    disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
    if format == "csv":
        return Response(export.to_csv(job), media_type="text/csv", headers=disposition)
    return Response(job_out(job).model_dump_json(), media_type="application/json", headers=disposition)
