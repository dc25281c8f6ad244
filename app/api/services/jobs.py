"""Benchmark jobs: submit, page through, read, cancel; and the job as clients see it."""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, create_model

from app import device as dev
from app.accounting.errors import InvalidInput
from app.api.errors import Conflict, NotFound, QueueFull
from app.config import Settings
from app.inputs.fields import Input, count, number
from app.jobs import admission, job, store
from app.jobs.fleet import Targets
from app.jobs.job import Job
from app.jobs.store import Store
from app.measured.past import StoredPast
from app.probes.registry import PROBES, ProbeName, ProbeResult

Status = Literal[job.STATES]  # type: ignore[valid-type]


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
                              "no other; default the first GPU free. Not with gpus or num_gpus.")),
        num_gpus=(count(ge=1, le=1024) | None, Field(
            None, description="Run on this many GPUs at once, any free ones (default 1); the child sees "
                              "them as cuda:0..n-1. A CPU job runs on the host whatever its ranks: its "
                              "probe's own parameters set those.")),
        gpus=(list[count(ge=0, le=1023)] | None, Field(
            None, min_length=1, max_length=1024,
            description="Run on these GPUs (NVML's indices), all at once, and no others; the child sees "
                        "them as cuda:0..n-1 in ascending order.")),
        host=(str | None, Field(None, min_length=1, max_length=253, description=(
            "The fleet: run on this box only (its TALLY_BOX_NAME, GET /api/v1/fleet)."))),
        gpu_uuid=(str | None, Field(None, min_length=1, max_length=300, description=(
            "The fleet: run on this GPU only, by NVML's UUID (or \"<box>:cpu\" for a box's CPU). Not "
            "with gpu, gpus or num_gpus."))),
        gpu_model=(str | None, Field(None, min_length=1, max_length=200, description=(
            "The fleet: run on any GPU of this model, by catalogue id (h100) or NVML's name."))),
        nodes=(count(ge=1, le=256) | None, Field(None, description=(
            "The fleet: run across this many boxes at once (default 1), num_gpus GPUs on each (a CPU "
            "job: its probe's ranks on each), started by torch.distributed's elastic launcher; for "
            "probes whose ranks may span boxes (collectives, data_parallel_step). Not with host, gpu_uuid, "
            "gpu or gpus."))),
    )


JobRequest = Annotated[
    Union[tuple(_request_model(name, probe.params) for name, probe in PROBES.items())],  # type: ignore[valid-type]  # noqa: UP007
    Field(discriminator="probe")]


class Progress(BaseModel):
    done: int
    total: int
    message: str
    fraction: float | None
    """done / total; null before the probe has said how much there is."""


class JobError(BaseModel):
    type: str
    """The exception's class, or ChildCrashed, Timeout, Cancelled, WorkerLost, ProtocolError."""
    message: str
    detail: dict[str, Any]
    """oom: the allocator's figures in bytes; crashed: exit code, signal, the child's last stderr."""


class Attempt(BaseModel):
    """One ended run of a job."""

    attempt: int
    worker_id: str | None
    """The dispatcher that ran it."""
    started_at: datetime | None
    ended_at: datetime | None
    reason: str
    """The status it ended in, or worker_lost (its dispatcher died under it; requeued, not the
    job's fault) or requeued (its dispatcher stopped)."""


class JobSummary(BaseModel):
    id: int
    probe: ProbeName  # type: ignore[valid-type]
    status: Status  # type: ignore[valid-type]
    params: dict[str, Any]
    device: str | None
    """cuda or cpu: where the job runs."""
    gpu: int | None
    """The one GPU the job asked for; null: any (or it asked for several: gpus, num_gpus)."""
    num_gpus: int
    """How many GPUs the job asked for."""
    gpus: list[int] | None
    """The GPUs the job asked for by index, ascending; null: any num_gpus free ones."""
    ran_on_gpu: int | None
    """The GPU its dispatcher ran a one-GPU job on (NVML's index); null on the CPU, before it
    starts, and for a job on several GPUs."""
    ran_on_gpus: list[int]
    """Every GPU its dispatcher ran it on (NVML's indices, ascending: its child's cuda:0..n-1);
    empty on the CPU or before it starts."""
    host: str | None = None
    """The fleet's box it must run on (asked), or null."""
    gpu_uuid: str | None = None
    """The fleet's device it must run on (asked), or null."""
    gpu_model: str | None = None
    """The GPU model it must run on (asked), or null."""
    campaign_id: int | None = None
    ran_on_device: str | None = None
    """The fleet's device it ran on: a GPU's UUID, or "<box>:cpu"; null before it starts."""
    attempts: int
    """Times a dispatcher took it: 2 after one interruption (a killed worker)."""
    attempts_log: list[Attempt]
    """How each ended attempt ended, oldest first."""
    timeout_s: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress: Progress
    error: JobError | None
    cancel_requested: bool
    revision: int
    """Goes up whenever the row changes."""
    nodes: int = 1
    """The boxes it runs across at once (asked); 1 for a job on one box."""


class Box(BaseModel):
    """One box of a job that spans several (app/jobs/gangs.py)."""

    box: str
    node: int
    """Its place, 0 first: box 0 hosts the rendezvous."""
    device: str | None
    """The fleet's device its dispatcher serves."""
    status: Literal["waiting", "running", "done", "failed", "stopped"]
    """waiting for the others; running its part; done; failed (error says how); stopped (the job
    ended on another box)."""
    error: JobError | None
    joined_at: datetime
    heartbeat_at: datetime


class JobOut(JobSummary):
    result: ProbeResult | None  # type: ignore[valid-type]
    boxes: list[Box] = []
    """A job on several boxes: each box, by node (its last attempt's); empty on one box."""


class JobPage(BaseModel):
    data: list[JobSummary]
    count: int
    """Jobs matching the filter, over all pages."""
    limit: int
    offset: int


def _time(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


def _fields(job: Job) -> dict[str, Any]:
    total = job.progress_total
    return dict(
        id=job.id, probe=job.probe, status=job.status, params=job.params, device=job.device,
        gpu=job.gpu, num_gpus=job.num_gpus, gpus=job.gpus, ran_on_gpu=job.ran_on_gpu,
        ran_on_gpus=job.ran_on_gpus, attempts=job.attempts, timeout_s=job.timeout_s, host=job.target_host,
        gpu_uuid=job.target_device, gpu_model=job.target_model, campaign_id=job.campaign_id,
        ran_on_device=job.ran_on_device,
        attempts_log=[Attempt(**e | {"started_at": _time(e["started_at"]), "ended_at": _time(e["ended_at"])})
                      for e in job.attempts_log],
        created_at=_time(job.created_at), started_at=_time(job.started_at),
        finished_at=_time(job.finished_at),
        progress=Progress(done=job.progress_done, total=total, message=job.progress_message,
                          fraction=job.progress_done / total if total else None),
        error=job.error, cancel_requested=job.cancel_requested, revision=job.revision, nodes=job.nodes)


def summary(job: Job) -> JobSummary:
    return JobSummary(**_fields(job))


def job_out(job: Job) -> JobOut:
    boxes = [Box(box=m.host, node=m.node, device=m.device, status=m.status, error=m.error,
                 joined_at=_time(m.joined_at), heartbeat_at=_time(m.heartbeat_at)) for m in job.members]
    return JobOut(**_fields(job), result=job.result, boxes=boxes)


@dataclass(frozen=True)
class Admitted:
    """A job request that passed the time limit and admission, ready to queue."""

    body: Any
    """The request, its params as `prepare` made them."""
    timeout_s: float
    kind: str
    num_gpus: int
    gpus: list[int] | None
    targets: Targets
    nodes: int = 1


def submit(body: Any, *, jobs: Store, settings: Settings) -> Job:
    """Queue `body` (a JobRequest member) once it passes the time limit and admission."""
    return queue(admit(body, jobs=jobs, settings=settings), jobs=jobs, settings=settings)


def queue(job: Admitted, *, jobs: Store, settings: Settings) -> Job:
    try:
        return jobs.submit(probe=job.body.probe, params=job.body.params.model_dump(mode="json"),
                           timeout_s=job.timeout_s, limit=settings.queue_limit, device=job.kind,
                           gpu=job.body.gpu, num_gpus=job.num_gpus, gpus=job.gpus, targets=job.targets,
                           nodes=job.nodes)
    except store.QueueFull as e:
        raise QueueFull(e.limit) from None


def admit(body: Any, *, jobs: Store, settings: Settings) -> Admitted:
    """`body` checked against the time limit and admission (InvalidInput naming the field that
    fails), queued by nothing: a caller queueing several (a campaign) admits them all first."""
    timeout = body.timeout_s if body.timeout_s is not None else settings.job_timeout_s
    if timeout > settings.job_timeout_max_s:
        raise InvalidInput("timeout_s", f"{timeout} exceeds TALLY_JOB_TIMEOUT_MAX_S "
                                        f"({settings.job_timeout_max_s})")
    targets = Targets(host=body.host, device=body.gpu_uuid, model=body.gpu_model)
    nodes = body.nodes or 1
    if nodes > 1:
        kind, num_gpus, gpus = _spanning(body, nodes, jobs), body.num_gpus or 1, None
    elif targets != Targets():
        kind, num_gpus, gpus = _in_fleet(body, targets, jobs), 1, None
    else:
        num_gpus, gpus = admission.several_gpus(body.gpu, body.num_gpus, body.gpus, body.params,
                                                settings.gpus)
        where = admission.device_for(body.gpu if gpus is None else gpus[0], body.params, settings.gpus)
        prepare = PROBES[body.probe].prepare
        if prepare is not None:  # what the job takes from this server's own runs on its device
            here = where if admission.target(body.params, where) == where.kind else dev.host()
            body = body.model_copy(update={"params": prepare(body.params, here, StoredPast(jobs))})
        kind = admission.check_fits(body.probe, body.params, where)
    admission.check_time(body.probe, body.params, kind, timeout)
    return Admitted(body, timeout, kind, num_gpus, gpus, targets, nodes)


def _spanning(body: Any, nodes: int, jobs: Store) -> str:
    """The device kind of a job across `nodes` boxes of the fleet; InvalidInput naming the field
    when its probe cannot span boxes, it pins one box or GPU, the fleet has fewer live boxes than
    it asks for, or a parameter sets a need larger than their memory."""
    if not PROBES[body.probe].spans_boxes:
        spanning = sorted(name for name, probe in PROBES.items() if probe.spans_boxes)
        raise InvalidInput("nodes", f"the {body.probe} probe runs on one box; these may span several: "
                                    f"{', '.join(spanning)}")
    for field in ("host", "gpu_uuid", "gpu", "gpus"):
        if getattr(body, field) is not None:
            raise InvalidInput(field, f"pins one box or GPU: a job across {nodes} boxes takes num_gpus "
                                      "on each")
    now = time.time()
    live = [d for d in jobs.devices() if d.live(now) and body.gpu_model in (None, d.name, d.catalogue_id)]
    kind = "cuda" if any(d.kind == "cuda" for d in live) and body.params.device != "cpu" else "cpu"
    boxes = {d.host for d in live if d.kind == kind}
    if len(boxes) < nodes:
        raise InvalidInput("nodes", f"the fleet has {len(boxes)} live "
                                    f"box{'es' if len(boxes) != 1 else ''}"
                                    + (f" with a {body.gpu_model}" if body.gpu_model else "")
                                    + f"; the job asks for {nodes} (GET /api/v1/fleet lists them)")
    smallest = min((d for d in live if d.kind == kind), key=lambda d: d.memory_bytes or 0)
    admission.fits(body.probe, body.params, kind, smallest.memory_bytes,
                   f"{smallest.name} ({smallest.device})")
    return kind


def _in_fleet(body: Any, targets: Targets, jobs: Store) -> str:
    """The device kind of a job that targets the fleet; InvalidInput naming the target no registered
    device meets, or the parameter that sets a need larger than every such device's memory."""
    named = "gpu_uuid" if body.gpu_uuid else "gpu_model" if body.gpu_model else "host"
    if body.gpu is not None or body.gpus is not None or body.num_gpus:
        raise InvalidInput(named, "targets the fleet's devices one at a time: leave out gpu, gpus, num_gpus")
    meets = [d for d in jobs.devices()
             if targets.host in (None, d.host) and targets.device in (None, d.device)
             and targets.model in (None, d.name, d.catalogue_id)]
    if not meets:
        raise InvalidInput(named, "no device of the fleet meets host, gpu_uuid and gpu_model together "
                                  "(GET /api/v1/fleet lists them)")
    kinds = {d.kind for d in meets}
    kind = "cuda" if "cuda" in kinds and body.params.device != "cpu" else "cpu"
    roomiest = max((d for d in meets if d.kind == kind), key=lambda d: d.memory_bytes or 0)
    where = f"{roomiest.name} ({roomiest.device})"
    admission.fits(body.probe, body.params, kind, roomiest.memory_bytes, where)
    return kind


def page(*, jobs: Store, probe: str | None = None, status: Sequence[str] | None = None, limit: int = 50,
         offset: int = 0) -> JobPage:
    """Newest first."""
    found, total = jobs.page(probe=probe, status=status, limit=limit, offset=offset)
    return JobPage(data=[summary(j) for j in found], count=total, limit=limit, offset=offset)


def get(job_id: int, *, jobs: Store) -> Job:
    job = jobs.get(job_id)
    if job is None:
        raise NotFound("job_id", f"no job {job_id}")
    return job


def cancel(job_id: int, *, jobs: Store) -> Job:
    """A queued job is cancelled at once; a running one is flagged for its dispatcher to stop."""
    job = get(job_id, jobs=jobs)
    if job.terminal:
        raise Conflict("job_id", f"job {job_id} has already ended: {job.status}")
    return jobs.cancel(job_id)


def succeeded(job_id: int, *, jobs: Store) -> Job:
    """A job with a result to download."""
    job = get(job_id, jobs=jobs)
    if job.status != "succeeded":
        raise Conflict("job_id", f"job {job_id} is {job.status}; only a succeeded job has a result")
    return job
