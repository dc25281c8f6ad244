"""HTML pages, served from templates/ with assets from static/ (no CDN).

Each calculator page is a form whose inputs live in the URL (so a result is a link);
htmx fetches the result fragment as the inputs change. Pages validate with the API's
request models and compute with its service functions (app/web/forms.py), in-process.
"""

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from app import device
from app.api.responses import jsonable
from app.api.services import device as device_service
from app.deps import SettingsDep, StoreDep
from app.web import model_pages
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


def _page(calc: Calculator):
    async def page(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
        form = calc.form(dict(request.query_params), defaults=True)
        context = {"calc": calc, "form": form, "token_needed": settings.api_token is not None,
                   **await run_in_threadpool(calc.compute, jobs, form)}
        return templates.TemplateResponse(request, "calc.html", context)

    async def fragment(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
        form = calc.form(dict(request.query_params), defaults=False)
        context = {"calc": calc, "token_needed": settings.api_token is not None,
                   **await run_in_threadpool(calc.compute, jobs, form)}
        response = templates.TemplateResponse(request, f"partials/{calc.slug}.html", context)
        response.headers["HX-Replace-Url"] = f"/{calc.slug}?{request.query_params}"
        return response

    return page, fragment


for _calc in CALCULATORS.values():
    _full, _fragment = _page(_calc)
    router.add_api_route(f"/{_calc.slug}", _full, response_class=HTMLResponse, methods=["GET"])
    router.add_api_route(f"/ui/{_calc.slug}", _fragment, response_class=HTMLResponse, methods=["GET"])
