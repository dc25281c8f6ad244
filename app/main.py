"""create_app(): the JSON API, the pages, static files and error handlers.

This process never imports torch: GPU work runs in child processes.
"""

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app import __version__
from app.api import errors
from app.api.router import include_api
from app.config import get_settings
from app.paths import STATIC_DIR
from app.web.pages import router as pages_router

DESCRIPTION = """Deep-learning resource accounting: FLOPs, bytes and seconds.

Conventions: one multiply-add is 2 FLOPs (MACs are reported separately); GPU peaks
are dense (no 2:4 sparsity); byte counts are exact integers, with GB = 10^9 and
GiB = 2^30 both given where a human reading helps. Every 4xx names its field.
"""


# The order /docs shows; routes themselves are matched hottest-first (app/api/router.py).
TAGS = [
    {"name": "number formats", "description": "Bit layouts, limits and exact encoding."},
    {"name": "tensors", "description": "Bytes, strides, contiguity and views."},
    {"name": "flops", "description": "Matmul, linear stack and transformer FLOPs."},
    {"name": "models", "description": "Presets and Hugging Face config import."},
    {"name": "memory", "description": "Training memory per GPU; the largest model that fits."},
    {"name": "time", "description": "Training time, cost and MFU."},
    {"name": "hardware", "description": "Accelerator catalogue: dense peaks, memory, bandwidth."},
]


def create_app() -> FastAPI:
    app = FastAPI(title="Tally", version=__version__, description=DESCRIPTION,
                  openapi_tags=TAGS, docs_url=None, redoc_url=None)
    install(app)
    return app


def install(app: FastAPI) -> None:
    """Error handlers, the JSON API, the pages and static files, onto `app`."""
    errors.install(app, max_body_bytes=get_settings().max_body_bytes)
    include_api(app)
    app.include_router(pages_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


app = create_app()
