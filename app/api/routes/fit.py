"""Will it run on my GPU: serving and fine-tuning options side by side."""

from typing import Annotated

from fastapi import APIRouter, Body, Response

from app.accounting.fit import FitAnswer
from app.api.compute import HeavyDep, Narrow
from app.api.errors import HEAVY, REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer
from app.api.services import fit as service
from app.api.services.fit import FitRequest

router = APIRouter(tags=["fit"])

FIT = examples(
    llama3_8b_on_an_rtx_4090={"model": "llama3-8b", "gpu": "rtx-4090", "seq_len": 2048},
    llama3_8b_on_an_h100={"model": "llama3-8b", "gpu": "h100-sxm", "seq_len": 2048, "batch_size": 4},
    llama3_8b_on_a_gpu_of_ones_own={"model": "llama3-8b", "seq_len": 2048, "gpu": {
        "name": "RTX 3080 Ti", "memory_bytes": "12GB", "memory_bandwidth_bytes_per_sec": "912GB/s",
        "peak_flop_per_sec": {"bfloat16": "68.2T"}}})


NARROW = Narrow("model", "a smaller model (fewer layers)")


@router.post("/fit", response_model=answer(FitAnswer), responses=REQUEST_ERRORS | HEAVY)
async def will_it_fit(body: Annotated[FitRequest, Body(openapi_examples=FIT)], heavy: HeavyDep) -> Response:
    """Serving in the weight formats that make sense on this GPU, LoRA, QLoRA and full fine-tuning:
    whether each fits, its bytes by kind, the largest batch and context, its time, and when it
    does not fit, the smallest change that makes it fit."""
    return await heavy.respond(service.answer, body, NARROW)
