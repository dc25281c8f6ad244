"""Every JSON route, under /api/v1."""

from fastapi import APIRouter

from app.api.routes import dtypes, flops, hardware, memory, models, tensors, time

api_router = APIRouter(prefix="/api/v1")
for module in (dtypes, tensors, flops, models, memory, time, hardware):
    api_router.include_router(module.router)
