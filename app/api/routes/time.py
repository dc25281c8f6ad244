"""Training time and MFU."""

from fastapi import APIRouter, Response
from starlette.concurrency import run_in_threadpool

from app.accounting import timing
from app.api.errors import REQUEST_ERRORS
from app.api.responses import answer, respond
from app.api.services import time as service
from app.api.services.time import MfuRequest, TrainingTimeRequest
from app.deps import StoreDep

router = APIRouter(prefix="/time", tags=["time"])


@router.post("/training", response_model=answer(timing.TrainingTime), responses=REQUEST_ERRORS)
async def training_time(body: TrainingTimeRequest, jobs: StoreDep) -> Response:
    """Days, GPU-hours and cost of a run at a given MFU."""
    if service.reads_store(body):  # a database read: off the event loop
        return respond(await run_in_threadpool(service.training, body, store=jobs), body)
    return respond(service.training(body, store=jobs), body)


@router.post("/mfu", response_model=answer(timing.Utilization), responses=REQUEST_ERRORS)
async def model_flops_utilization(body: MfuRequest) -> Response:
    """Achieved FLOP/s over the dense peak."""
    return respond(service.mfu(body), body)
