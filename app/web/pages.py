"""HTML pages, served from templates/ with assets from static/ (no CDN).

Each calculator page is a form whose inputs live in the URL (so a result is a link);
htmx fetches the result fragment as the inputs change, and the fragment comes from
the JSON API through app/web/bridge.py.
"""

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from app import __version__
from app.accounting import hardware
from app.paths import TEMPLATES_DIR
from app.web import bridge

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=TEMPLATES_DIR)
templates.env.globals["version"] = __version__


@router.get("/", response_class=HTMLResponse)
async def index(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {})


@router.get("/docs", response_class=HTMLResponse)
async def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json", title="Tally API",
        swagger_js_url="/static/vendor/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url="/static/vendor/swagger-ui/swagger-ui.css",
        swagger_favicon_url="/static/favicon.svg",
        swagger_ui_parameters={"validatorUrl": None},  # no call to validator.swagger.io
    )


TIME_FIELDS = {"params": "number", "tokens": "number", "gpu": "text", "dtype": "text", "num_gpus": "number",
               "mfu": "number", "price_per_gpu_hour": "number"}
TIME_DEFAULTS = {"params": "70e9", "tokens": "15e12", "gpu": "h100-sxm", "dtype": "bfloat16",
                 "num_gpus": "1024", "mfu": "0.5", "price_per_gpu_hour": ""}
GPU_SWEEP = (8, 64, 256, 1024, 4096, 16384)


@router.get("/time", response_class=HTMLResponse)
async def time_page(request: Request) -> HTMLResponse:
    form = TIME_DEFAULTS | {k: v for k, v in request.query_params.items() if k in TIME_FIELDS}
    return templates.TemplateResponse(request, "time.html", {
        "form": form, "gpus": sorted(hardware.catalogue()), **await _time(request, form)})


@router.get("/ui/time", response_class=HTMLResponse)
async def time_fragment(request: Request) -> HTMLResponse:
    form = {k: v for k, v in request.query_params.items() if k in TIME_FIELDS}
    response = templates.TemplateResponse(request, "partials/time_result.html", await _time(request, form))
    response.headers["HX-Replace-Url"] = "/time?" + str(request.query_params)
    return response


async def _time(request: Request, form: dict[str, str]) -> dict:
    """The run's time, and days against the number of GPUs, both from /api/v1/time/training."""
    payload = bridge.body(form, TIME_FIELDS)
    status, answer = await bridge.call(request, "/api/v1/time/training", payload)
    if status != 200:
        return {"errors": bridge.field_errors(answer), "message": answer.get("message", "")}
    sweep = []
    for gpus in GPU_SWEEP:
        _, point = await bridge.call(request, "/api/v1/time/training", payload | {"num_gpus": gpus})
        sweep.append({"x": gpus, "y": point["days"]})
    current = {"x": answer["num_gpus"], "y": answer["days"]}
    return {"answer": answer, "errors": {},
            "chart": {"type": "days_vs_gpus", "points": sweep, "current": current}}
