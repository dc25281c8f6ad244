"""Planning runs over many GPUs: the layout search."""

from typing import Annotated

from fastapi import APIRouter, Body, Response
from starlette.concurrency import run_in_threadpool

from app.accounting.plan.training import TrainingPlan
from app.api.compute import HeavyDep, Narrow
from app.api.errors import HEAVY, REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer
from app.api.services import calibration
from app.api.services import plan as service
from app.api.services.plan import TrainingPlanRequest
from app.deps import StoreDep
from app.measured.here import read

router = APIRouter(prefix="/plan", tags=["planning"])

TRAINING = examples(
    llama3_70b_on_1024_h100s={"model": "llama3-70b", "gpu": "h100-sxm", "num_gpus": 1024,
                              "global_batch_sequences": 512, "seq_len": 8192, "training_tokens": 15e12},
    llama3_8b_on_one_node={"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                           "global_batch_sequences": 64, "seq_len": 4096, "limits": {"zero_stage": [1, 3]}})


NARROW = Narrow("limits", "search fewer layouts: fewer tensor_parallel, pipeline_parallel, "
                          "virtual_stages, micro_batch or zero_stage choices in limits, or fewer num_gpus")


@router.post("/training", response_model=answer(TrainingPlan), responses=REQUEST_ERRORS | HEAVY)
async def training(body: Annotated[TrainingPlanRequest, Body(openapi_examples=TRAINING)],
                   jobs: StoreDep, heavy: HeavyDep) -> Response:
    """Every valid data x tensor x pipeline x expert layout, ZeRO stage, micro-batch, interleaving and
    recompute for the GPUs: timed (compute, exposed communication, bubble) and sized by the memory engine;
    the fastest that fit, and the counts evaluated, fitting and refused by reason."""
    # What is measured here (for a measured power), read off the event loop, then the worker searches.
    here = await run_in_threadpool(read, jobs) if body.reads_store() else None
    profile = None if body.calibration is None else await run_in_threadpool(
        calibration.resolve, body.calibration, jobs)
    return await heavy.respond(service.plan_training, body, NARROW, here, profile)
