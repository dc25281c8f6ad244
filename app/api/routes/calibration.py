"""Calibration: campaigns that queue a profile's probes, and profiles built from this server's runs,
listed, exported and imported."""

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response
from pydantic import Field

from app.accounting.calibration.profile import Profile
from app.api.errors import AUTH, NOT_FOUND, QUEUE_FULL, REQUEST_ERRORS, NotFound
from app.api.openapi import examples
from app.api.responses import respond
from app.api.services import calibration as service
from app.api.services import device as device_service
from app.api.services.calibration import BuildRequest, CampaignOut, CampaignRequest, ProfileIn, ProfileSummary
from app.deps import Authorized, SettingsDep, StoreDep
from app.measured import calibration as calib

router = APIRouter(prefix="/calibration", tags=["calibration"])
ProfileId = Annotated[int, Field(ge=1, le=2**63 - 1)]
CampaignId = ProfileId
CAMPAIGN = examples(this_box={}, a_fleets_h200s={"gpu_model": "h200"})
# Two bfloat16 squares of the matmul sweep on the H200 lent once (docs/measurements/gpu-targets-h200.json).
IMPORT = examples(two_h200_shapes={
    "device_model": "NVIDIA H200", "device_kind": "cuda", "catalogue_id": "h200", "version": 1,
    "created_at": "2026-11-25T09:00:00+00:00",
    "matmul": [
        {"dtype": "bfloat16", "m": 4096, "k": 4096, "n": 4096, "seconds": 0.000191, "spread": 0,
         "jobs": [1]},
        {"dtype": "bfloat16", "m": 8192, "k": 8192, "n": 8192, "seconds": 0.001578, "spread": 0,
         "jobs": [1]}]})
DeviceModel = Annotated[str | None, Query(
    min_length=1, max_length=200,
    description="The device name its runs report (GET /api/v1/devices: name). Default: this server's "
                "device.")]


Device = Annotated[str | None, Query(
    min_length=1, max_length=200,
    description="One device's own profile: a GPU's NVML UUID or \"<host>:cpu\" (GET /api/v1/fleet).")]


@router.get("", response_model=calib.Calibration)
def calibration(jobs: StoreDep) -> Response:
    """The measured matmul peak per dtype and train-step MFU per precision on this device:
    the best of the last 5 succeeded runs of each (the answer's `rule` states it, `job_id`
    names the run). POST /api/v1/time/training with `mfu: "measured"` uses the train-step MFU."""
    return respond(device_service.calibration(jobs))


@router.post("/campaigns", status_code=202, response_model=CampaignOut,
             responses=REQUEST_ERRORS | AUTH | QUEUE_FULL)
def start_campaign(body: Annotated[CampaignRequest, Body(openapi_examples=CAMPAIGN)], jobs: StoreDep,
                   settings: SettingsDep, authorized: Authorized) -> Response:
    """Queue the probes a complete profile needs (app/probes/campaign.py) on this box's device, or on
    any device of a fleet's model; the profile is built once they have all ended. Follow it at
    GET /calibration/campaigns/{id}."""
    response = respond(service.start_campaign(body, jobs, settings))
    response.status_code = 202
    return response


@router.get("/campaigns/{campaign_id}", response_model=CampaignOut, responses=REQUEST_ERRORS | NOT_FOUND)
def campaign(campaign_id: CampaignId, jobs: StoreDep) -> Response:
    """How far the campaign has come; once its jobs have ended, the profile built from them (or why
    none could be)."""
    found = service.get_campaign(campaign_id, jobs)
    if found is None:
        raise NotFound("campaign_id", f"no calibration campaign {campaign_id}")
    return respond(found)


@router.post("/profiles", status_code=201, response_model=Profile, responses=REQUEST_ERRORS | AUTH)
def build(jobs: StoreDep, authorized: Authorized, device_model: DeviceModel = None,
          device: Device = None) -> Response:
    """Build the next version of a device model's profile from the runs this server holds (matmul,
    attention, bandwidth, transfer, generate, train_step, collectives, burn_in; contended or
    wide-spread runs left out and listed; a device slower than its model's others left out and
    flagged), or with `device` that one device's own. 422 naming device_model (or device) where no
    usable matmul run was measured on it."""
    response = respond(service.build(BuildRequest(device_model=device_model, device=device), jobs))
    response.status_code = 201
    return response


@router.get("/profiles", response_model=list[ProfileSummary])
def list_profiles(jobs: StoreDep) -> Response:
    """Every stored profile, newest first."""
    return respond(service.summaries(jobs))


@router.post("/import", status_code=201, response_model=Profile, responses=REQUEST_ERRORS | AUTH)
def import_profile(body: Annotated[ProfileIn, Body(openapi_examples=IMPORT)],  # type: ignore[valid-type]
                   jobs: StoreDep, authorized: Authorized) -> Response:
    """Store a profile exported elsewhere (GET /calibration/profiles/{id}) as the next version of its
    device model here, so a device this server does not have can still calibrate its answers."""
    response = respond(service.import_profile(body.to_engine(), jobs))
    response.status_code = 201
    return response


@router.get("/profiles/{profile_id}", response_model=Profile, responses=REQUEST_ERRORS | NOT_FOUND)
def export(profile_id: ProfileId, jobs: StoreDep) -> Response:
    """A profile whole: the JSON POST /calibration/import takes on another server."""
    found = service.get(profile_id, jobs)
    if found is None:
        raise NotFound("profile_id", f"no calibration profile {profile_id}")
    return respond(found)
