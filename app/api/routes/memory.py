"""Training memory per GPU, and the largest model that fits."""

from fastapi import APIRouter, Response

from app.accounting import memory
from app.api.errors import REQUEST_ERRORS
from app.api.responses import answer, respond
from app.api.services import memory as service
from app.api.services.memory import MaxModelRequest, TrainingMemoryRequest

router = APIRouter(prefix="/memory", tags=["memory"])


@router.post("/training", response_model=answer(memory.TrainingMemory), responses=REQUEST_ERRORS)
async def training_memory(body: TrainingMemoryRequest) -> Response:
    """Per-GPU bytes of parameters, gradients, optimizer state, master weights and activations."""
    return respond(service.training(body), body)


@router.post("/max-model", response_model=answer(memory.MaxModel), responses=REQUEST_ERRORS)
async def max_model(body: MaxModelRequest) -> Response:
    """The largest parameter count whose training state fits on num_gpus GPUs."""
    return respond(service.max_model(body), body)
