"""The Fleet page (its boxes and devices, live) and the Burn-in page (a campaign's devices beside
their model's median, the slow ones highlighted, each with its last DCGM diagnostic, and each
device's history), over the same services as the JSON API (app/api/services/fleet.py)."""

import time
from datetime import UTC, datetime

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from app.api.services import fleet as service
from app.deps import SettingsDep, StoreDep
from app.web import forms
from app.web.templating import templates

router = APIRouter(include_in_schema=False)


@router.get("/fleet", response_class=HTMLResponse)
def fleet_page(request: Request, jobs: StoreDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "fleet.html", {"fleet": service.fleet(jobs, time.time())})


@router.get("/ui/fleet", response_class=HTMLResponse)
def fleet_table(request: Request, jobs: StoreDep) -> HTMLResponse:
    """The devices table alone, polled by the page."""
    return templates.TemplateResponse(
        request, "partials/fleet.html", {"fleet": service.fleet(jobs, time.time())}
    )


@router.get("/burn-in", response_class=HTMLResponse)
def burn_in_page(
    request: Request,
    jobs: StoreDep,
    campaign: int | None = Query(None, ge=1, le=2**62),
    device: str | None = Query(None, min_length=1, max_length=300),
) -> HTMLResponse:
    """The campaign asked for (default the newest), and the history of `device` (default the
    campaign's most flagged device, else its first)."""
    campaigns = jobs.campaigns(limit=20)
    shown = service.campaign_out(jobs, campaign or campaigns[0].id) if campaign or campaigns else None
    if device is None and shown is not None and shown.compared:
        device = max(shown.compared, key=lambda row: (row.flagged, row.shortfall)).device
    history = service.history(jobs, device) if device else []
    diag = service.last_diag(jobs, device) if device else None
    listed = [{"id": c.id, "probe": c.probe, "created_at": datetime.fromtimestamp(c.created_at, UTC)}
              for c in campaigns]
    return templates.TemplateResponse(request, "burn_in.html", {
        "campaigns": listed, "campaign": shown, "device": device, "history": history, "diag": diag,
        "token_needed": request.app.state.settings.api_token is not None})


START_FIELDS = ("sustain_s", "model", "outlier_fraction")
"""The Burn-in page's start form: POST /api/v1/campaigns's burn_in body, empty fields left out."""


@router.post("/ui/burn-in/start", response_class=HTMLResponse)
async def start_campaign(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    """The page's Start form: POST /api/v1/campaigns {"probe": "burn_in", ...} with the token the
    form holds (a cross-site post is refused before this, app/api/security.py); the page opens the
    new campaign, and a refusal shows beside its field."""
    form = forms.posted(request.headers.get("content-type"), await request.body(), "token")
    given = {k: form[k].strip() for k in START_FIELDS if form.get(k, "").strip()}
    body = {"probe": "burn_in", "params": {"sustain_s": given.pop("sustain_s")} if "sustain_s" in given else {},
            **given}
    out, refused = await forms.act(form, settings, lambda: run_in_threadpool(
        service.start, service.CAMPAIGN.validate_python(body), jobs=jobs, settings=settings), body)
    if refused is None:
        return HTMLResponse("", headers={"HX-Redirect": f"/burn-in?campaign={out.id}"})
    # Each message beside its box: burn_in.params.sustain_s (the union's tag, the params) -> sustain_s
    found = {}
    for item in refused["detail"]:
        field = item["field"].removeprefix("burn_in.").removeprefix("params.")
        found.setdefault(field, item["msg"])
        item["field"] = field
    return templates.TemplateResponse(request, "partials/launch_error.html", {
        "message": "; ".join(f"{i['field']}: {i['msg']}" for i in refused["detail"]), "errors": found})


@router.post("/ui/burn-in/{campaign_id}/cancel", response_class=HTMLResponse)
async def cancel_campaign(request: Request, jobs: StoreDep, settings: SettingsDep,
                          campaign_id: int = Path(ge=1, le=2**62)) -> HTMLResponse:
    """The page's Cancel button: POST /api/v1/campaigns/{id}/cancel with the token the form holds;
    the page reloads on success, and a refusal shows beside the button."""
    form = forms.posted(request.headers.get("content-type"), await request.body(), "token")
    _, refused = await forms.act(form, settings,
                                 lambda: run_in_threadpool(service.cancel, campaign_id, jobs=jobs))
    if refused is None:
        return HTMLResponse("", headers={"HX-Refresh": "true"})
    return templates.TemplateResponse(request, "partials/launch_error.html", {
        "message": refused["message"], "errors": forms.field_errors(refused)})

