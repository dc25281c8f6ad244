"""The fleet's routes: its devices, campaigns over every live device, and a device's history."""

import time
from typing import Annotated

from fastapi import APIRouter, Body, Path, Request, Response

from app.api.errors import AUTH, CONFLICT, NOT_FOUND, QUEUE_FULL, REQUEST_ERRORS, UNAVAILABLE
from app.api.services import fleet as service
from app.api.services.fleet import CampaignOut, CampaignRequest, Fleet, HistoryPoint
from app.deps import Authorized, SettingsDep, StoreDep

router = APIRouter(tags=["fleet"])
CampaignId = Annotated[int, Path(ge=1, le=2**62)]
CampaignBody = Annotated[
    CampaignRequest,
    Body(
        openapi_examples={  # type: ignore[valid-type]
            "burn_in": {
                "summary": "a burn-in of every GPU",
                "value": {"probe": "burn_in", "params": {"sustain_s": 10}, "outlier_fraction": 0.1},
            }
        }
    ),
]


@router.get("/fleet", response_model=Fleet, responses=UNAVAILABLE)
def get_fleet(jobs: StoreDep) -> Fleet:
    """Every device a worker has registered: its host, what NVML says of it, and its state."""
    return service.fleet(jobs, time.time())


@router.post(
    "/campaigns",
    status_code=202,
    response_model=CampaignOut,
    responses=REQUEST_ERRORS | AUTH | QUEUE_FULL | UNAVAILABLE,
)
def start_campaign(
    body: CampaignBody, request: Request, jobs: StoreDep, settings: SettingsDep, authorized: Authorized
) -> Response:
    """One job of the probe on every live device (the GPUs; on a fleet of none, its CPUs), each
    sized against its device. 202 with the campaign; follow it at /campaigns/{id}."""
    out = service.start(body, jobs=jobs, settings=settings)
    return Response(
        out.model_dump_json(),
        status_code=202,
        media_type="application/json",
        headers={"Location": f"{request.url.path}/{out.id}"},
    )


@router.get("/campaigns", response_model=list[CampaignOut], responses=UNAVAILABLE)
def list_campaigns(jobs: StoreDep) -> list[CampaignOut]:
    """The newest 20 campaigns first."""
    return [service.campaign_out(jobs, c.id) for c in jobs.campaigns(limit=20)]


@router.get("/campaigns/{campaign_id}", response_model=CampaignOut, responses=NOT_FOUND | UNAVAILABLE)
def get_campaign(campaign_id: CampaignId, jobs: StoreDep) -> CampaignOut:
    """Its jobs, and for a burn-in every device beside its model's fleet median, the ones more than
    outlier_fraction below it flagged with NVML's reason, and the models against the catalogue."""
    return service.campaign_out(jobs, campaign_id)


@router.post("/campaigns/{campaign_id}/cancel", response_model=CampaignOut,
             responses=NOT_FOUND | CONFLICT | AUTH | UNAVAILABLE)
def cancel_campaign(campaign_id: CampaignId, jobs: StoreDep, authorized: Authorized) -> CampaignOut:
    """Its queued jobs are cancelled at once, its running ones stopped within a moment; 409 when it
    has ended already."""
    return service.cancel(campaign_id, jobs=jobs)


@router.get(
    "/fleet/devices/{device}/history", response_model=list[HistoryPoint], responses=NOT_FOUND | UNAVAILABLE
)
def device_history(
    device: Annotated[str, Path(min_length=1, max_length=300)], jobs: StoreDep
) -> list[HistoryPoint]:
    """A device's burn-ins, oldest first, by its UUID (or "<box>:cpu")."""
    return service.history(jobs, device)
