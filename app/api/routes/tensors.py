"""Tensor memory, strides, contiguity and views."""

from fastapi import APIRouter, Response

from app.accounting import tensors
from app.api.errors import REQUEST_ERRORS
from app.api.responses import answer, respond
from app.api.services import tensors as service
from app.api.services.tensors import LayoutRequest, MemoryRequest

router = APIRouter(prefix="/tensors", tags=["tensors"])


@router.post("/memory", response_model=answer(tensors.TensorMemory), responses=REQUEST_ERRORS)
async def tensor_memory(body: MemoryRequest) -> Response:
    """Bytes of a contiguous tensor, in GB and GiB."""
    return respond(service.memory(body), body)


@router.post("/layout", response_model=answer(tensors.TensorLayout), responses=REQUEST_ERRORS)
async def tensor_layout(body: LayoutRequest) -> Response:
    """Contiguity, the storage index of an element, and whether a view needs a copy."""
    return respond(service.layout(body), body)
