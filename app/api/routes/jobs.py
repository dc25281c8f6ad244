"""Benchmark jobs: submit, list, read, cancel, follow live, export."""

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import Field

from app.api.errors import AUTH, CONFLICT, NOT_FOUND, QUEUE_FULL, REQUEST_ERRORS, UNAVAILABLE
from app.api.openapi import examples
from app.api.responses import respond
from app.api.services import jobs as service
from app.api.services.jobs import JobOut, JobPage, JobRequest, Status
from app.deps import Authorized, SettingsDep, StoreDep
from app.jobs import export
from app.jobs.job import Job
from app.probes.registry import ProbeName

router = APIRouter(prefix="/jobs", tags=["jobs"])

JobId = Annotated[int, Field(ge=1, le=2**63 - 1)]
# The README's jobs: a quick custom matmul sweep; GPT-2 training steps under bf16 autocast; the
# loader against the H200 burn-in's gpt2 step (docs/measurements/burn-in-h200.json); a checkpoint.
JOBS = examples(
    a_small_matmul_sweep={"probe": "matmul", "params": {
        "sweep": "custom", "shapes": [{"m": 256, "k": 256, "n": 256}], "dtypes": ["float32", "bfloat16"]}},
    gpt2_training_steps={"probe": "train_step", "params": {
        "model": "gpt2", "batch_size": 8, "seq_len": 1024, "optimizer": "adamw",
        "precision": "bf16_autocast"}, "timeout_s": 900},
    collectives_over_two_ranks={"probe": "collectives", "params": {
        "ranks": 2, "sizes_bytes": [4096, 1048576]}},
    an_fsdp_step_over_two_ranks={"probe": "data_parallel_step", "params": {
        "model": {"kind": "cruncher"}, "strategy": "fsdp", "ranks": 2}},
    bandwidth_on_any_h200_of_the_fleet={"probe": "bandwidth", "gpu_model": "h200"},
    a_loader_feeding_gpt2_on_an_h200={"probe": "data_loader", "params": {
        "file_bytes": "256MiB", "token_dtype": "uint16", "model": "gpt2", "batch_size": 8, "seq_len": 1024,
        "precision": "bf16_autocast", "train_tokens_per_s": 201737}},
    a_gpt2_checkpoint_with_adamw={"probe": "checkpoint", "params": {
        "model": "gpt2", "optimizer": "adamw", "precision": "bf16_autocast"}})
JobBody = Annotated[JobRequest, Body(openapi_examples=JOBS)]  # type: ignore[valid-type]


def _existing(job_id: JobId, jobs: StoreDep) -> Job:
    """As a dependency, so a stream's 404 is answered before the stream starts."""
    return service.get(job_id, jobs=jobs)


@router.post("", status_code=202, response_model=JobOut,
             responses=REQUEST_ERRORS | AUTH | QUEUE_FULL | UNAVAILABLE)
def submit(body: JobBody, request: Request, jobs: StoreDep, settings: SettingsDep,  # type: ignore[valid-type]
           authorized: Authorized) -> Response:
    """Queue a probe. 202 with the job; follow it at /jobs/{id} or /jobs/{id}/events."""
    job = service.submit(body, jobs=jobs, settings=settings)
    return Response(service.job_out(job).model_dump_json(), status_code=202, media_type="application/json",
                    headers={"Location": f"{request.url.path}/{job.id}"})


@router.get("", response_model=JobPage, responses=REQUEST_ERRORS)
def list_jobs(jobs: StoreDep, probe: ProbeName | None = None,  # type: ignore[valid-type]
              status: Annotated[list[Status] | None, Query()] = None,  # type: ignore[valid-type]
              limit: Annotated[int, Query(ge=1, le=500)] = 50,
              offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> Response:
    """Newest first. status may repeat: ?status=queued&status=running."""
    return respond(service.page(jobs=jobs, probe=probe, status=status, limit=limit, offset=offset))


@router.get("/{job_id}", response_model=JobOut, responses=REQUEST_ERRORS | NOT_FOUND)
def get_job(job_id: JobId, jobs: StoreDep) -> Response:
    """Status, progress, result and error."""
    return respond(service.job_out(service.get(job_id, jobs=jobs)))


@router.post("/{job_id}/cancel", response_model=JobOut,
             responses=REQUEST_ERRORS | NOT_FOUND | CONFLICT | AUTH)
def cancel(job_id: JobId, jobs: StoreDep, authorized: Authorized) -> Response:
    """A queued job is cancelled at once; a running one is stopped within a moment."""
    return respond(service.job_out(service.cancel(job_id, jobs=jobs)))


POLL_S = 0.25


def _as_json(responses: dict) -> dict:
    """Error docs for a route whose success is not JSON: the errors still are."""
    ref = {"$ref": "#/components/schemas/ErrorResponse"}
    return {code: {"description": doc["description"], "content": {"application/json": {"schema": ref}}}
            for code, doc in responses.items()}


@router.get("/{job_id}/events", response_class=EventSourceResponse,
            responses=_as_json(REQUEST_ERRORS | NOT_FOUND))
async def events(job_id: JobId, request: Request, jobs: StoreDep, job: Annotated[Job, Depends(_existing)]):
    """Server-sent events: `progress` with the job (no result) whenever it changes, then
    one `end` with the whole job once it has ended. The stream then closes."""
    seen = -1
    while True:
        if job.revision != seen:
            seen = job.revision
            if job.terminal:
                yield ServerSentEvent(raw_data=service.job_out(job).model_dump_json(), event="end",
                                      id=str(seen))
                return
            yield ServerSentEvent(raw_data=service.summary(job).model_dump_json(), event="progress",
                                  id=str(seen))
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
        job = await asyncio.to_thread(jobs.get, job_id)


@router.get("/{job_id}/result", response_model=JobOut,
            responses=REQUEST_ERRORS | NOT_FOUND | CONFLICT | {
                200: {"content": {"text/csv": {"schema": {"type": "string"}}},
                      "description": "JSON: the job. CSV: one row per measurement."}})
def result(job_id: JobId, jobs: StoreDep, format: Literal["json", "csv"] = "json") -> Response:
    """Download a succeeded job's result, as JSON (the whole job) or CSV."""
    job = service.succeeded(job_id, jobs=jobs)
    name = f"tally-job-{job.id}-{job.probe}.{format}"
    disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
    if format == "csv":
        return Response(export.to_csv(job), media_type="text/csv", headers=disposition)
    return Response(service.job_out(job).model_dump_json(), media_type="application/json",
                    headers=disposition)
