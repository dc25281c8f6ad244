"""Communication between GPUs: collectives, as nccl-tests reports them."""

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from starlette.concurrency import run_in_threadpool

from app.accounting.comm.collectives import CollectiveTime
from app.api.errors import REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import calibration
from app.api.services import comm as service
from app.api.services.comm import CollectiveRequest
from app.deps import store_of

router = APIRouter(prefix="/comm", tags=["communication"])

COLLECTIVE = examples(
    gradients_of_an_8b_model_over_64_h100s={"collective": "all_reduce", "bytes": "16GB", "ranks": 64,
                                            "gpu": "h100-sxm"},
    all_gather_inside_one_node={"collective": "all_gather", "bytes": "1GiB", "ranks": 8, "gpu": "h100-sxm"})


@router.post("/collective", response_model=answer(CollectiveTime), responses=REQUEST_ERRORS)
async def collective(body: Annotated[CollectiveRequest, Body(openapi_examples=COLLECTIVE)],
                     request: Request) -> Response:
    """Time, algbw and busbw of one collective over ring algorithms, inside a node and across nodes;
    with `calibration`, over the link a profile fitted to its collectives runs."""
    profile = None if body.calibration is None else await run_in_threadpool(
        calibration.resolve, body.calibration, store_of(request))
    return respond(service.collective(body, profile), body)
