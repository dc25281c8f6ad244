"""Calibration profiles: built from this store's runs, listed, exported and imported as JSON,
and resolved for a calculator's `calibration` field."""

import dataclasses
from typing import Any

from pydantic import Field, TypeAdapter

from app import device
from app.accounting.calibration.profile import Profile, check
from app.accounting.errors import InvalidInput
from app.api.errors import QueueFull
from app.api.services import jobs as job_service
from app.api.services.jobs import JobRequest
from app.config import Settings
from app.inputs.fields import Input, count, strict_input
from app.jobs.profiles import Calibration
from app.jobs.store import Store
from app.measured import profile as builder
from app.probes import campaign

PROFILE = builder.PROFILE
ProfileIn = strict_input(Profile, suffix="In")
"""An imported profile, as strict as every request: the profile's fields and bounds."""


class BuildRequest(Input):
    device_model: str | None = Field(
        None, min_length=1, max_length=200,
        description="The device name its runs report (GET /api/v1/devices: name). Default: this server's "
                    "device, or with `device` that device's.")
    device: str | None = Field(
        None, min_length=1, max_length=200,
        description="One device's own profile, from its runs alone: a GPU's NVML UUID or \"<host>:cpu\" "
                    "(GET /api/v1/fleet lists them). For an outlier, which a model-wide profile leaves out.")


@dataclasses.dataclass(slots=True)
class ProfileSummary:
    id: int
    device_model: str
    device: str | None
    """Null: every device of the model; else the one device it was built from."""
    version: int
    created_at: str
    matmul_shapes: int
    train_step_precisions: list[str]
    flags: list[str]
    imported_from: str | None


def _datasheet_peaks(device_model: str) -> dict[str, float]:
    """A CPU's datasheet peak, where the profile is this server's own CPU (a GPU's comes from the
    catalogue, app/measured/profile.py)."""
    here = device.host()
    peak = device.cpu_peak_flop_per_sec() if here.name == device_model else None
    return {} if peak is None else {"float32": peak, "bfloat16": peak}


def _store(jobs: Store, profile: Profile) -> Profile:
    body = PROFILE.dump_python(profile, mode="json")
    return PROFILE.validate_python(jobs.add_profile(device_model=profile.device_model, body=body,
                                                    device=profile.device))


def build(body: BuildRequest, jobs: Store, *, exclude: frozenset[int] = frozenset()) -> Profile:
    model = body.device_model or (_model_of(body.device, jobs) if body.device else device.describe().name)
    profile = builder.build(jobs, model, version=0, datasheet_peaks=_datasheet_peaks(model), exclude=exclude,
                            device=body.device, field="device" if body.device else "device_model")
    return _store(jobs, profile)


def _model_of(name: str, jobs: Store) -> str:
    """The device model the matmul runs of the device `name` report; InvalidInput naming `device`
    when it ran none here."""
    for job in jobs.latest(probe="matmul", limit=builder.LOOKBACK):
        if job.ran_on_device == name:
            return job.result.environment.device_name
    raise InvalidInput("device", f"no matmul run here ran on device {name!r}: GET /api/v1/fleet lists the "
                                 "devices (a GPU's UUID, or \"<host>:cpu\")")


def import_profile(profile: Profile, jobs: Store) -> Profile:
    """A profile exported elsewhere, stored as this server's next version of its device model."""
    check(profile)
    origin = f"{profile.device_model} version {profile.version}, built {profile.created_at}"
    if profile.imported_from:
        origin += f" (itself imported from {profile.imported_from})"
    return _store(jobs, dataclasses.replace(profile, id=None, imported_from=origin))


def summaries(jobs: Store) -> list[ProfileSummary]:
    out = []
    for body in jobs.profiles():
        p = PROFILE.validate_python(body)
        out.append(ProfileSummary(p.id or 0, p.device_model, p.device, p.version, p.created_at, len(p.matmul),
                                  [f.precision for f in p.train_step], list(p.flags), p.imported_from))
    return out


def get(profile_id: int, jobs: Store) -> Profile | None:
    body = jobs.profile(profile_id)
    return None if body is None else PROFILE.validate_python(body)


def resolve(ref: Any, jobs: Store, *, field: str = "calibration") -> Profile:
    """The profile a calculator's `calibration` names (app/measured/profile.py's `stored`)."""
    return builder.stored(jobs, ref, field=field)


# ---- campaigns -------------------------------------------------------------------------------

JOBS: TypeAdapter[Any] = TypeAdapter(JobRequest)


class CampaignRequest(Input):
    gpu: count(0, 1023) | None = Field(
        None, description="This box's GPU to calibrate (NVML's index); default the first served, or the "
                          "CPU on a box without one.")
    gpu_model: str | None = Field(
        None, min_length=1, max_length=200,
        description="The fleet: calibrate this device model (catalogue id or NVML's name); every job runs "
                    "on any device of it, so the profile speaks for the model. Not with gpu.")
    held_out: bool = Field(
        False, description="Queue the held-out train steps as well (six shapes x three sizes no campaign "
                           "run trains): the accuracy ledger scores the profile on them.")


@dataclasses.dataclass(slots=True)
class CampaignOut:
    id: int
    device_model: str
    jobs: list[int]
    """The profile's, in the order they were queued: matmul, bandwidth, transfer, generate, train steps."""
    held_out: list[int]
    """The held-out train steps (held_out): they score the profile and never enter it."""
    status: str
    """running until every job has ended; then built (profile_id names the profile) or failed (error)."""
    done: int
    """Jobs ended."""
    profile_id: int | None
    error: str | None


def start_campaign(body: CampaignRequest, jobs: Store, settings: Settings) -> CampaignOut:
    if body.gpu is not None and body.gpu_model is not None:
        raise InvalidInput("gpu_model", "give gpu (this box) or gpu_model (the fleet), not both")
    if body.gpu_model is not None:
        models = [d for d in jobs.devices() if body.gpu_model in (d.name, d.catalogue_id)]
        if not models:
            raise InvalidInput("gpu_model", f"no device of the fleet is a {body.gpu_model} "
                                            "(GET /api/v1/fleet)")
        name, kind, target = models[0].name, models[0].kind, {"gpu_model": body.gpu_model}
    else:
        served = device.served_gpus(settings.gpus)
        index = body.gpu if body.gpu is not None else served[0] if served else None
        here = device.host() if index is None else device.describe_served(index)
        name, kind, target = here.name, here.kind, ({} if index is None else {"gpu": index})
    fit, scoring = campaign.jobs(kind), campaign.held_out(kind) if body.held_out else []
    # All or none: a campaign half queued would build a profile from half its probes.
    if jobs.queue_depth() + len(fit) + len(scoring) > settings.queue_limit:
        raise QueueFull(settings.queue_limit)
    # Every job parsed and admitted (memory, least duration, time limit) before any queues.
    admitted = [job_service.admit(JOBS.validate_python(job | target), jobs=jobs, settings=settings)
                for job in fit + scoring]

    def queue(asked: list[job_service.Admitted]) -> list[int]:
        return [job_service.queue(job, jobs=jobs, settings=settings).id for job in asked]

    ids = queue(admitted[:len(fit)])
    held = queue(admitted[len(fit):])
    return campaign_out(jobs.add_calibration(device_model=name, job_ids=ids, held_out=held), jobs)


def campaign_out(found: Calibration, jobs: Store) -> CampaignOut:
    """The campaign as it stands; once its jobs have all ended, its profile built (once)."""
    every = found.jobs + found.held_out
    ended = [j for j in (jobs.get(i) for i in every) if j is not None and j.terminal]
    if len(ended) == len(every) and found.profile_id is None and found.error is None:
        try:
            built: Profile | None = build(BuildRequest(device_model=found.device_model), jobs,
                                          exclude=frozenset(found.held_out))
            error = None
        except InvalidInput as e:
            built, error = None, e.message
        jobs.end_calibration(found.id, profile_id=None if built is None else built.id, error=error)
        found = jobs.calibration(found.id) or found
    status = "running" if len(ended) < len(every) else "built" if found.profile_id else "failed"
    return CampaignOut(found.id, found.device_model, found.jobs, found.held_out, status, len(ended),
                       found.profile_id, found.error)


def get_campaign(calibration_id: int, jobs: Store) -> CampaignOut | None:
    found = jobs.calibration(calibration_id)
    return None if found is None else campaign_out(found, jobs)
