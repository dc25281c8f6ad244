"""HTML pages, served from templates/ with assets from static/ (no CDN).

Each calculator page is a form whose inputs live in the URL (so a result is a link);
htmx fetches the result fragment as the inputs change. Pages validate with the API's
request models and compute with its service functions (app/web/forms.py): in a thread, or
for a heavy calculator (a search, a sweep) in the server's worker processes, within their
budget and each client's share (app/api/compute.py). A heavy page opened from another site
(Sec-Fetch-Site: cross-site: a link, or a hostile page's <img> tags) shows its form and waits
for a press of Compute, so no other site can make this server search; its fragments (/ui/...)
refuse other sites outright (app/ops/security.py).
"""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from app import device
from app.api.compute import client_of
from app.api.compute_tasks import StoreRef
from app.api.errors import Busy, TooCostly
from app.api.responses import jsonable
from app.api.services import device as device_service
from app.deps import SettingsDep, StoreDep
from app.jobs.store import Store
from app.web import heavy, model_pages
from app.web.calculators import CALCULATORS, Calculator
from app.web.templating import templates

router = APIRouter(include_in_schema=False)
router.include_router(model_pages.router)


@router.get("/", response_class=HTMLResponse)
def index(request: Request, jobs: StoreDep) -> HTMLResponse:
    """What this box is and what it has measured, then a way into each tool."""
    context = {"device": jsonable(device.describe()),
               "calibration": jsonable(device_service.calibration(jobs))}
    return templates.TemplateResponse(request, "index.html", context)


@router.get("/docs", response_class=HTMLResponse)
async def docs(request: Request) -> HTMLResponse:
    """Swagger UI, vendored, started by static/docs.js (the page runs no inline script)."""
    return templates.TemplateResponse(request, "docs.html")


async def _computed(calc: Calculator, request: Request, jobs: Store, form: dict[str, str]) -> dict[str, Any]:
    """The result's context: computed in a thread, or a heavy calculator's in a worker process;
    a budget or a limit run out is the page's refusal, in words."""
    if calc.heavy is None:
        return await run_in_threadpool(calc.compute, jobs, form)
    compute = request.app.state.compute
    try:
        return await compute.call(client_of(request), calc.heavy, heavy.page, calc.slug, form,
                                  StoreRef(str(request.app.state.settings.database())))
    except (TooCostly, Busy) as e:
        return {"errors": {}, "message": e.message, "unplaced": [], "launch": None}


def _cross_site(request: Request) -> bool:
    return request.headers.get("sec-fetch-site") == "cross-site"


def _page(calc: Calculator):
    async def page(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
        form = calc.form(dict(request.query_params), defaults=True)
        deferred = calc.heavy is not None and _cross_site(request)
        result = {"deferred": True} if deferred else await _computed(calc, request, jobs, form)
        context = {"calc": calc, "form": form, "token_needed": settings.api_token is not None, **result}
        return templates.TemplateResponse(request, "calc.html", context)

    async def fragment(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
        form = calc.form(dict(request.query_params), defaults=False)
        context = {"calc": calc, "token_needed": settings.api_token is not None,
                   **await _computed(calc, request, jobs, form)}
        response = templates.TemplateResponse(request, f"partials/{calc.slug}.html", context)
        response.headers["HX-Replace-Url"] = f"/{calc.slug}?{request.query_params}"
        if "answer" not in context:  # refused: the page keeps its last answer (static/app.js)
            response.headers["X-Tally-Refused"] = "1"
        return response

    return page, fragment


for _calc in CALCULATORS.values():
    _full, _fragment = _page(_calc)
    router.add_api_route(f"/{_calc.slug}", _full, response_class=HTMLResponse, methods=["GET"])
    router.add_api_route(f"/ui/{_calc.slug}", _fragment, response_class=HTMLResponse, methods=["GET"])
