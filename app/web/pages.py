"""HTML pages, served from templates/ with assets from static/ (no CDN).

Each calculator page is a form whose inputs live in the URL (so a result is a link);
htmx fetches the result fragment as the inputs change, and the fragment comes from
the JSON API through app/web/bridge.py.
"""

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

from app.web import bridge
from app.web.calculators import CALCULATORS, Calculator
from app.web.templating import templates

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
async def index(request: Request) -> HTMLResponse:
    """What this box is and what it has measured, then a way into each tool."""
    device = await bridge.get(request, "/api/v1/device")
    calibration = await bridge.get(request, "/api/v1/calibration")
    return templates.TemplateResponse(request, "index.html", {"device": device, "calibration": calibration})


@router.get("/docs", response_class=HTMLResponse)
async def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json", title="Tally API",
        swagger_js_url="/static/vendor/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url="/static/vendor/swagger-ui/swagger-ui.css",
        swagger_favicon_url="/static/favicon.svg",
        swagger_ui_parameters={"validatorUrl": None},  # no call to validator.swagger.io
    )


def _page(calc: Calculator):
    async def page(request: Request) -> HTMLResponse:
        form = calc.form(dict(request.query_params), defaults=True)
        context = {"calc": calc, "form": form, **await calc.compute(request, form)}
        return templates.TemplateResponse(request, "calc.html", context)

    async def fragment(request: Request) -> HTMLResponse:
        form = calc.form(dict(request.query_params), defaults=False)
        context = {"calc": calc, **await calc.compute(request, form)}
        response = templates.TemplateResponse(request, f"partials/{calc.slug}.html", context)
        response.headers["HX-Replace-Url"] = f"/{calc.slug}?{request.query_params}"
        return response

    return page, fragment


for _calc in CALCULATORS.values():
    _full, _fragment = _page(_calc)
    router.add_api_route(f"/{_calc.slug}", _full, response_class=HTMLResponse, methods=["GET"])
    router.add_api_route(f"/ui/{_calc.slug}", _fragment, response_class=HTMLResponse, methods=["GET"])
