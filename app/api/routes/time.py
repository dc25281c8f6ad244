"""Training time and MFU."""

from typing import Annotated

from fastapi import APIRouter, Body, Response
from starlette.concurrency import run_in_threadpool

from app.accounting import timing
from app.api.errors import REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import time as service
from app.api.services import calibration, step
from app.api.services.step import StepTimeAnswer, StepTimeRequest
from app.api.services.time import MfuRequest, TrainingTimeRequest
from app.deps import StoreDep
from app.measured.here import read

router = APIRouter(prefix="/time", tags=["time"])

# LLaMA-3-70B's pre-training (15T tokens) on 1024 H100s; an MFU from a measured step.
TRAINING = examples(
    llama3_70b_on_1024_h100s={"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm", "dtype": "bf16",
                              "num_gpus": 1024, "mfu": 0.5, "price_per_gpu_hour": 2.5},
    the_same_in_human_units={"params": "70B", "tokens": "15T", "gpu": "h100-sxm", "num_gpus": "1k"})
MFU = examples(a_step_on_8_h100s={"flops": 5.05e16, "seconds": 16, "gpu": "h100-sxm", "dtype": "bf16",
                                  "num_gpus": 8})
STEP = examples(
    gpt2_on_an_h200={"model": "gpt2", "batch_size": 8, "seq_len": 1024, "precision": "bf16_autocast", "gpu": "h200"},
    a_small_llama_on_an_h100={"model": "llama3.2-1b", "batch_size": 4, "seq_len": 2048,
                              "precision": "bf16_autocast", "gpu": "h100-sxm"})
TrainingBody = Annotated[TrainingTimeRequest, Body(openapi_examples=TRAINING)]


@router.post("/training", response_model=answer(timing.TrainingTime), responses=REQUEST_ERRORS)
async def training_time(body: TrainingBody, jobs: StoreDep) -> Response:
    """Days, GPU-hours and cost of a run at a given MFU, or with `calibration` at the MFU a device's
    profile gives the model's step."""
    # What is measured here, read off the event loop only when the request asks for it.
    here = await run_in_threadpool(read, jobs) if service.reads_store(body) else None
    profile = (None if body.calibration is None else
               await run_in_threadpool(calibration.resolve, body.calibration, jobs))
    return respond(await run_in_threadpool(service.training, body, here, profile), body)


@router.post("/mfu", response_model=answer(timing.Utilization), responses=REQUEST_ERRORS)
async def model_flops_utilization(body: Annotated[MfuRequest, Body(openapi_examples=MFU)]) -> Response:
    """Achieved FLOP/s over the dense peak."""
    return respond(service.mfu(body), body)


@router.post("/step", response_model=answer(StepTimeAnswer), responses=REQUEST_ERRORS)
def step_time(body: Annotated[StepTimeRequest, Body(openapi_examples=STEP)], jobs: StoreDep) -> Response:
    """One training step on one device: the datasheet answer (FLOPs over the dense peak x 0.5) and,
    with `calibration`, the device's own: GEMMs on its measured matmul surface, per-op, activation
    and optimizer terms fitted over its train_step runs, each naming the jobs it came from."""
    profile = None if body.calibration is None else calibration.resolve(body.calibration, jobs)
    return respond(step.step_time(body, profile), body)
