"""Benchmark pages: launch a probe, follow it, read and compare results. The launch form is
validated by the jobs API's request model and submitted by its service function; what a result
shows (its figures, charts, tables and launch form) is its probe's faces (app/probes/faces.py)."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool

from app import device
from app.api.responses import jsonable
from app.api.services import device as device_service
from app.api.services import jobs as service
from app.config import Settings
from app.deps import SettingsDep, StoreDep
from app.jobs.job import Job
from app.jobs.store import Store
from app.measured.past import StoredPast
from app.probes.base import Probe
from app.probes.faces import Fieldset, Input, derived_form, table_of
from app.probes.registry import PROBES
from app.web import forms, measures
from app.web.forms import ABSENT
from app.web.templating import templates

router = APIRouter(include_in_schema=False)
JOB_REQUEST = TypeAdapter(service.JobRequest)


def _read(control: Input, form: dict[str, str]) -> Any:
    """One control's posted value as the API's JSON value, or ABSENT when it sent none."""
    if control.kind == "checks":
        return [v for v, _ in control.choices() if form.get(f"{control.name}_{v}")] or ABSENT
    text = form.get(control.name, "").strip()
    if control.kind == "check":
        return text in ("1", "true", "on") if control.name in form else ABSENT
    if text == "":
        return ABSENT
    if control.kind == "list":
        return [forms.number(v.strip()) for v in text.strip("()[]").split(",") if v.strip()]
    return forms.number(text) if control.kind == "number" else text


def params_from(form: dict[str, str]) -> dict[str, Any]:
    """The launch form's fields as the API's {probe, params}: each fieldset of the probe's launch
    form (its faces) reads its controls, and assembles them into the parameters they set."""
    name = form["probe"]
    p: dict[str, Any] = {"device": form.get("device", "auto")}
    for fieldset in launch_form(PROBES[name]) if name in PROBES else ():
        read = {c.key: v for c in fieldset.inputs if (v := _read(c, form)) is not ABSENT}
        p |= fieldset.assemble(read) if fieldset.assemble else read
    gpu = form.get("gpu", "").strip()
    return {"probe": name, "params": p} | ({"gpu": forms.number(gpu)} if gpu else {})


def launch_form(probe: Probe) -> tuple[Fieldset, ...]:
    return probe.faces.form if probe.faces.form is not None else derived_form(probe.name, probe.params)


def fieldsets() -> list[tuple[Fieldset, list[str]]]:
    """Every probe's fieldsets once, each with the probes it serves (the page shows it for those)."""
    found: dict[int, tuple[Fieldset, list[str]]] = {}
    for name, probe in PROBES.items():
        for fieldset in launch_form(probe):
            found.setdefault(id(fieldset), (fieldset, []))[1].append(name)
    return list(found.values())


def _shown(job: Job, jobs: Store, settings: Settings) -> dict[str, Any]:
    """What a job page shows: the job as GET /api/v1/jobs/{id} answers it, and its probe's faces:
    the headline figures, the charts, and its page's template (or its tables, for a probe with none)."""
    shown: dict[str, Any] = {"job": jsonable(service.job_out(job)), "charts": {}, "metrics": [], "page": None,
                             "tables": [], "sustained": "", "token_needed": settings.api_token is not None}
    if job.result is not None:
        faces = PROBES[job.probe].faces
        shown |= {"charts": faces.charts(job.result, StoredPast(jobs)), "metrics": faces.headline(job.result),
                  "page": faces.page, "tables": [] if faces.page else table_of(faces, job.result),
                  "sustained": faces.sustained}
    return shown


HISTORY_ROWS = 25


def _history(jobs: Store) -> list[dict]:
    return jsonable(service.page(jobs=jobs, limit=HISTORY_ROWS))["data"]


@router.get("/benchmarks", response_class=HTMLResponse)
def benchmarks(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "benchmarks.html", {
        "device": jsonable(device.describe()), "devices": jsonable(device_service.devices(settings)),
        "history": _history(jobs), "probes": tuple(PROBES), "fieldsets": fieldsets(),
        "token_needed": settings.api_token is not None})


@router.post("/ui/benchmarks/launch", response_class=HTMLResponse)
async def launch(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    """422 for a body that is not the launch form (urlencoded, naming its probe)."""
    form = forms.posted(request.headers.get("content-type"), await request.body(), "probe")

    def submit(body: Any) -> dict:
        forms.check_token(form, settings)
        return jsonable(service.job_out(service.submit(body, jobs=jobs, settings=settings)))

    job, refused = await run_in_threadpool(forms.run, JOB_REQUEST, params_from(form), submit)
    if refused is not None:
        return templates.TemplateResponse(request, "partials/launch_error.html", {
            "message": refused["message"], "errors": forms.field_errors(refused)})
    response = templates.TemplateResponse(request, "partials/job_status.html", {
        "job": job, "token_needed": settings.api_token is not None})
    response.headers["HX-Trigger"] = "job-launched"  # the history lists it at once
    return response


@router.get("/ui/benchmarks/jobs/{job_id}", response_class=HTMLResponse)
def job_status(request: Request, job_id: int, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    """404 with the API's message for an unknown job, as every job page. The poll that finds the
    job ended tells the page (history, a roofline waiting for its ceiling) to refresh."""
    job = service.get(job_id, jobs=jobs)
    response = templates.TemplateResponse(request, "partials/job_status.html", _shown(job, jobs, settings))
    if job.terminal:
        response.headers["HX-Trigger"] = "job-ended"
    return response


@router.get("/ui/benchmarks/history", response_class=HTMLResponse)
def history(request: Request, jobs: StoreDep) -> HTMLResponse:
    """The history table alone, refreshed when a job is launched or ends."""
    return templates.TemplateResponse(request, "partials/history.html", {"history": _history(jobs)})


@router.get("/benchmarks/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: int, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    job = service.get(job_id, jobs=jobs)
    return templates.TemplateResponse(request, "job.html", _shown(job, jobs, settings))


@router.get("/benchmarks/compare", response_class=HTMLResponse)
def compare(request: Request, a: int, b: int, jobs: StoreDep) -> HTMLResponse:
    runs = [service.get(i, jobs=jobs) for i in (a, b)]
    return templates.TemplateResponse(request, "compare.html", {
        "jobs": [jsonable(service.job_out(job)) for job in runs],
        "compared": measures.compare(*(job.result if job.status == "succeeded" else None for job in runs))})
