"""Training memory per GPU, and the largest model that fits."""

from typing import Annotated

from fastapi import APIRouter, Body, Response

from app.accounting.training import memory
from app.api.compute import HeavyDep, Narrow
from app.api.errors import HEAVY, REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import memory as service
from app.api.services.memory import MaxModelRequest, TrainingMemoryRequest

router = APIRouter(prefix="/memory", tags=["memory"])

TRAINING = examples(
    llama2_7b_on_8_h100s_with_zero_1={
        "model": "llama2-7b", "precision": "bf16_mixed", "optimizer": "adamw", "batch_size": 1,
        "seq_len": 4096, "recompute": "selective", "zero_stage": 1, "data_parallel": 8, "gpu": "h100-sxm"},
    llama3_8b_on_one_h100_at_4k={"model": "llama3-8b", "gpu": "h100-sxm", "seq_len": "4k"})
MAX_MODEL = examples(fp32_adamw_on_8_h100s={"gpu": "h100-sxm", "num_gpus": 8, "precision": "fp32",
                                            "optimizer": "adamw"})
TrainingBody = Annotated[TrainingMemoryRequest, Body(openapi_examples=TRAINING)]


NARROW_TRAINING = Narrow("model", "a smaller model (fewer layers)")


@router.post("/training", response_model=answer(memory.TrainingMemory), responses=REQUEST_ERRORS | HEAVY)
async def training_memory(body: TrainingBody, heavy: HeavyDep) -> Response:
    """Per-GPU bytes of parameters, gradients, optimizer state, master weights and activations."""
    return await heavy.respond(service.training, body, NARROW_TRAINING)


@router.post("/max-model", response_model=answer(memory.MaxModel), responses=REQUEST_ERRORS)
async def max_model(body: Annotated[MaxModelRequest, Body(openapi_examples=MAX_MODEL)]) -> Response:
    """The largest parameter count whose training state fits on num_gpus GPUs."""
    return respond(service.max_model(body), body)
