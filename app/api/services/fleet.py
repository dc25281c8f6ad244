"""The fleet: its devices and their state, campaigns fanned out to every live device, and a
burn-in's results compared (app/measured/burn_in.py) and followed per device over time."""

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, create_model

from app.accounting.errors import InvalidInput
from app.api.errors import Conflict, NotFound, QueueFull
from app.config import Settings
from app.inputs.fields import Input, number
from app.jobs import admission, store
from app.jobs.fleet import LIVE_WITHIN_S, NoDevices
from app.jobs.store import Store
from app.measured import burn_in, dcgm_diag
from app.probes.registry import PROBES


def _when(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


class DeviceOut(BaseModel):
    device: str
    """NVML's UUID of a GPU, or "<box>:cpu"."""
    host: str
    kind: Literal["cuda", "cpu"]
    gpu_index: int | None
    name: str
    catalogue_id: str | None
    memory_bytes: int | None
    driver_version: str | None
    cuda_driver_version: str | None
    compute_capability: str | None
    max_sm_clock_mhz: int | None
    max_memory_clock_mhz: int | None
    power_limit_watts: float | None
    worker_id: str | None
    registered_at: datetime
    seen_at: datetime
    state: Literal["idle", "busy", "lost"]
    """lost: its dispatcher not seen for live_within_s seconds (its running job is requeued once
    that job's heartbeat is as stale)."""
    job_id: int | None
    """The job it runs now."""
    job_probe: str | None


class DispatcherOut(BaseModel):
    """One dispatcher (`tally worker`, or the server's embedded one): several may serve one device."""

    worker_id: str
    seen_at: datetime
    state: Literal["busy", "idle", "lost"]
    """lost: not seen within live_within_s."""
    job_id: int | None = None
    job_probe: str | None = None
    device: str | None = None
    """The device of the job it runs."""


class AcrossBoxes(BaseModel):
    """A job across several boxes (app/jobs/gangs.py), or one Slurm ran (imported)."""

    job_id: int
    probe: str
    status: str
    nodes: int
    boxes: list[str]
    """By node; empty while none has joined."""
    ran_by: str | None
    """The dispatcher of box 0, or the launcher that ran it ("slurm:<job id>")."""
    finished_at: datetime | None


class Fleet(BaseModel):
    live_within_s: float
    hosts: list[str]
    devices: list[DeviceOut]
    dispatchers: list[DispatcherOut] = []
    """Every dispatcher seen, live ones first: two on one box's CPU share its one device row."""
    across_boxes: list[AcrossBoxes] = []
    """The newest jobs across boxes (at most ACROSS_BOXES_SHOWN), newest first."""


def fleet(jobs: Store, now: float) -> Fleet:
    running = jobs.running_on()
    out = []
    for d in jobs.devices():
        job = running.get(d.device)
        state = "lost" if not d.live(now) else "busy" if job else "idle"
        out.append(
            DeviceOut(
                **{k: v for k, v in d.__dict__.items() if k not in ("registered_at", "seen_at")},
                registered_at=_when(d.registered_at),
                seen_at=_when(d.seen_at),
                state=state,
                job_id=job.id if job else None,
                job_probe=job.probe if job else None,
            )
        )
    by_worker = {job.worker_id: job for job in running.values() if job.worker_id}
    dispatchers = []
    for worker_id, seen_at in jobs.workers_seen():
        job = by_worker.get(worker_id)
        state = "lost" if now - seen_at > LIVE_WITHIN_S else "busy" if job else "idle"
        dispatchers.append(DispatcherOut(worker_id=worker_id, seen_at=_when(seen_at), state=state,
                                         job_id=job.id if job else None, job_probe=job.probe if job else None,
                                         device=job.ran_on_device if job else None))
    dispatchers.sort(key=lambda d: (d.state == "lost", d.worker_id))
    across = [AcrossBoxes(job_id=j.id, probe=j.probe, status=j.status, nodes=j.nodes,
                          boxes=[m.host for m in j.members], ran_by=j.worker_id,
                          finished_at=_when(j.finished_at))
              for j in jobs.across_boxes(limit=ACROSS_BOXES_SHOWN)]
    return Fleet(live_within_s=LIVE_WITHIN_S, hosts=sorted({d.host for d in out}), devices=out,
                 dispatchers=dispatchers, across_boxes=across)


ACROSS_BOXES_SHOWN = 10


def _campaign_model(name: str, params: type) -> type[Input]:
    return create_model(
        f"{params.__name__.removesuffix('Params')}Campaign",
        __base__=Input,
        probe=(Literal[name], ...),
        params=(params, Field(default_factory=params, description="The same on every device.")),
        timeout_s=(
            number(ge=1, le=86_400) | None,
            Field(None, description="Each job's limit in seconds; default TALLY_JOB_TIMEOUT_S."),
        ),
        outlier_fraction=(
            number(gt=0, le=0.99),
            Field(
                burn_in.OUTLIER_FRACTION,
                description="Flag a device more than this fraction below its "
                "model's fleet median on any figure.",
            ),
        ),
        model=(
            str | None,
            Field(
                None,
                min_length=1,
                max_length=200,
                description=("Only the GPUs of this model: its catalogue id (h100) or NVML's name."),
            ),
        ),
    )


CampaignRequest = Annotated[
    Union[tuple(_campaign_model(name, probe.params) for name, probe in PROBES.items())],  # type: ignore[valid-type]  # noqa: UP007
    Field(discriminator="probe"),
]


CAMPAIGN = TypeAdapter(CampaignRequest)
"""A campaign body read outside a route (the Burn-in page's form)."""


class CampaignJob(BaseModel):
    job_id: int
    status: str
    device: str | None
    """The device it targets."""
    finished_at: datetime | None


class DiagOut(BaseModel):
    """A GPU's last DCGM diagnostic (a succeeded dcgm_diag job that ran on it), beside its burn-in."""

    job_id: int
    finished_at: datetime | None
    level: int
    """dcgmi diag -r LEVEL: 1 quick to 4 extra long."""
    verdict: Literal["pass", "warn", "fail"]
    """This GPU's: fail when a test failed on it or on all GPUs, warn when one warned."""
    failed: list[str]
    """The tests that failed on it, by DCGM's names."""
    warned: list[str]
    skipped: list[str]
    dcgm_version: str | None


def last_diag(jobs: Store, device: str) -> DiagOut | None:
    """`device`'s newest DCGM diagnostic, or None when none has succeeded there."""
    found = dcgm_diag.last(jobs, device)
    if found is None:
        return None
    return DiagOut(job_id=found.job_id, finished_at=_when(found.finished_at), level=found.level,
                   verdict=found.verdict, failed=found.failed, warned=found.warned, skipped=found.skipped,
                   dcgm_version=found.dcgm_version)


class Compared(BaseModel):
    job_id: int
    device: str
    host: str | None
    model: str
    metrics: dict[str, float | None]
    """matmul_flop_per_sec, bandwidth_bytes_per_sec, train_step_flop_per_sec: each sustained."""
    median: dict[str, float | None]
    ratio: dict[str, float | None]
    flagged: bool
    worst: str | None
    shortfall: float
    reasons: list[str]
    siblings: int
    watts: dict[str, float | None]
    joules_per_iteration: dict[str, float | None]
    flop_per_sec_per_watt: dict[str, float | None]
    dcgm_diag: DiagOut | None = None
    """The device's last DCGM diagnostic (the dcgm_diag probe), whenever it ran; null when none has."""


class CampaignOut(BaseModel):
    id: int
    probe: str
    params: dict[str, Any]
    created_at: datetime
    outlier_fraction: float
    done: bool
    """Every job has ended."""
    jobs: list[CampaignJob]
    compared: list[Compared]
    """A burn-in's succeeded devices beside their model's median (empty for other probes)."""
    leaderboard: list[burn_in.ModelRow]


def campaign_out(jobs: Store, campaign_id: int) -> CampaignOut:
    found = burn_in.campaign(jobs, campaign_id)  # the comparison the verdicts read (burn_in.verdict)
    if found is None:
        raise NotFound("campaign_id", f"no campaign {campaign_id}")
    c, members, compared = found
    return CampaignOut(
        id=c.id,
        probe=c.probe,
        params=c.params,
        created_at=_when(c.created_at),
        outlier_fraction=c.outlier_fraction,
        done=all(j.terminal for j in members),
        jobs=[
            CampaignJob(
                job_id=j.id, status=j.status, device=j.target_device, finished_at=_when(j.finished_at)
            )
            for j in members
        ],
        compared=[
            Compared(
                job_id=x.reading.job_id,
                device=x.reading.gpu,
                host=x.reading.host,
                model=x.reading.model,
                metrics=x.reading.metrics,
                median=x.median,
                ratio=x.ratio,
                flagged=x.flagged,
                worst=x.worst,
                shortfall=x.shortfall,
                reasons=x.reasons,
                siblings=x.siblings,
                watts=x.reading.watts,
                joules_per_iteration=x.reading.joules_per_iteration,
                flop_per_sec_per_watt=x.reading.flop_per_sec_per_watt,
                dcgm_diag=last_diag(jobs, x.reading.gpu),
            )
            for x in compared
        ],
        leaderboard=burn_in.leaderboard(compared),
    )


def start(body: Any, *, jobs: Store, settings: Settings) -> CampaignOut:
    """Size each job against its device (a CampaignRequest member), and queue them all at once."""
    params = body.params
    timeout = body.timeout_s if body.timeout_s is not None else settings.job_timeout_s
    if timeout > settings.job_timeout_max_s:
        raise InvalidInput(
            "timeout_s", f"{timeout} exceeds TALLY_JOB_TIMEOUT_MAX_S ({settings.job_timeout_max_s})"
        )
    def admit(d) -> None:  # each device the campaign picks, inside its transaction
        admission.fits(body.probe, params, d.kind, d.memory_bytes, f"{d.name} ({d.device})")
        admission.check_time(body.probe, params, d.kind, timeout)

    try:
        c, _ = jobs.start_campaign(
            probe=body.probe,
            params=params.model_dump(mode="json"),
            timeout_s=timeout,
            limit=settings.queue_limit,
            outlier_fraction=body.outlier_fraction,
            model=body.model,
            admit=admit,
        )
    except NoDevices as e:
        raise InvalidInput("model" if body.model else "probe", str(e)) from None
    except store.QueueFull as e:
        raise QueueFull(e.limit) from None
    return campaign_out(jobs, c.id)


class HistoryPoint(BaseModel):
    job_id: int
    campaign_id: int | None
    finished_at: datetime | None
    metrics: dict[str, float | None]
    slowdowns: dict[str, list[str]]


def history(jobs: Store, device: str) -> list[HistoryPoint]:
    found = jobs.history(device)
    if not found and device not in {d.device for d in jobs.devices()}:
        raise NotFound("device", f"no device {device} in the fleet")
    by_id = {j.id: j for j in found}
    return [
        HistoryPoint(
            job_id=r.job_id,
            campaign_id=by_id[r.job_id].campaign_id,
            finished_at=_when(r.finished_at),
            metrics=r.metrics,
            slowdowns=r.slowdowns,
        )
        for r in burn_in.readings(jobs, found)
    ]


def cancel(campaign_id: int, *, jobs: Store) -> CampaignOut:
    """Every job of the campaign still queued is cancelled at once, every running one is stopped
    within a moment (as POST /jobs/{id}/cancel does); a campaign already done is a 409."""
    out = campaign_out(jobs, campaign_id)  # 404 when there is none
    if out.done:
        raise Conflict("campaign_id", f"campaign {campaign_id} has already ended")
    jobs.cancel_campaign(campaign_id)
    return campaign_out(jobs, campaign_id)
