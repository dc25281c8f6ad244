"""Fine-tuning: LoRA, QLoRA, frozen parts and full fine-tuning of one step."""

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from starlette.concurrency import run_in_threadpool

from app.accounting.finetune.step import FineTuneStep
from app.api.compute import HeavyDep, Narrow
from app.api.errors import HEAVY, REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer
from app.api.services import calibration
from app.api.services import finetune as service
from app.api.services.finetune import FineTuneRequest
from app.deps import store_of

router = APIRouter(prefix="/finetune", tags=["fine-tuning"])

FINETUNE = examples(
    qlora_llama3_8b_on_an_rtx_4090={"model": "llama3-8b", "mode": "qlora", "lora_rank": 16, "seq_len": 2048,
                                     "recompute": "full", "gpu": "rtx-4090"},
    lora_every_matrix={"model": "llama3-8b", "mode": "lora", "lora_rank": 8,
                       "lora_targets": ["q", "k", "v", "o", "gate", "up", "down"], "seq_len": 2048,
                       "gpu": "h100-sxm"},
    last_4_layers_only={"model": "llama3.2-1b", "mode": "freeze", "freeze_embeddings": True,
                        "freeze_head": True, "freeze_layers": 12, "seq_len": 1024})


NARROW = Narrow("model", "a smaller model (fewer layers)")


@router.post("", response_model=answer(FineTuneStep), responses=REQUEST_ERRORS | HEAVY)
async def finetune(body: Annotated[FineTuneRequest, Body(openapi_examples=FINETUNE)], heavy: HeavyDep,
                   request: Request) -> Response:
    """Trainable and frozen parameters, bytes per GPU item by item (frozen base in its format,
    trainable states, activations autograd keeps), the step's FLOPs and its time at an MFU; with
    `calibration`, its time from the device's profile too."""
    profile = None if body.calibration is None else await run_in_threadpool(
        calibration.resolve, body.calibration, store_of(request))
    return await heavy.respond(service.step, body, NARROW, profile)
