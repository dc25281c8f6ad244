"""The Calibration page (campaigns and the profiles built from them, with a button that calibrates
this server's device) and the Accuracy page (the ledger: Tally's predictions against this fleet's
measurements), over the same services as the JSON API."""

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from app.api.services import calibration as service
from app.deps import SettingsDep, StoreDep
from app.measured import accuracy as ledger
from app.web import forms
from app.web.templating import templates

router = APIRouter(include_in_schema=False)


@router.get("/calibration", response_class=HTMLResponse)
def calibration_page(request: Request, jobs: StoreDep,
                     profile: int | None = Query(None, ge=1, le=2**53)) -> HTMLResponse:
    """The newest campaigns, every profile, and one profile's figures (default the newest)."""
    campaigns = [service.campaign_out(c, jobs) for c in jobs.calibrations(limit=10)]
    summaries = service.summaries(jobs)
    shown = service.get(profile or summaries[0].id, jobs) if profile or summaries else None
    return templates.TemplateResponse(request, "calibration.html", {
        "campaigns": campaigns, "profiles": summaries, "profile": shown,
        "token_needed": request.app.state.settings.api_token is not None})


@router.post("/ui/calibration/start", response_class=HTMLResponse)
async def start_campaign(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    """The page's button: POST /api/v1/calibration/campaigns with the form's token; the page reloads
    showing the campaign, and a refusal shows beside the button."""
    form = forms.posted(request.headers.get("content-type"), await request.body(), "token")
    body = {"held_out": form.get("held_out") == "on"}
    out, refused = await forms.act(form, settings, lambda: run_in_threadpool(
        service.start_campaign, service.CampaignRequest(**body), jobs, settings), body)
    if refused is None:
        return HTMLResponse("", headers={"HX-Redirect": f"/calibration?campaign={out.id}"})
    return templates.TemplateResponse(request, "partials/launch_error.html", {
        "message": refused["message"], "errors": forms.field_errors(refused)})


@router.get("/accuracy", response_class=HTMLResponse)
def accuracy_page(request: Request, jobs: StoreDep) -> HTMLResponse:
    report = ledger.report(jobs)
    charts = {}
    for point in report.points:
        chart = charts.setdefault(point.metric, {"type": "predicted_measured", "metric": point.metric,
                                                 "series": {}})
        chart["series"].setdefault(point.mode, []).append(
            {"x": point.measured, "y": point.predicted, "job": point.job_id})
    return templates.TemplateResponse(request, "accuracy.html", {"report": report, "charts": charts})
