"""The accelerator catalogue."""

from typing import Annotated

from fastapi import APIRouter, Path, Response

from app.accounting import hardware
from app.accounting.errors import InvalidInput
from app.api.errors import NOT_FOUND, NotFound
from app.api.openapi import examples
from app.api.responses import respond
from app.inputs.schemas import Page

router = APIRouter(prefix="/hardware", tags=["hardware"])
GpuIdParam = Annotated[str, Path(max_length=40, openapi_examples=examples(h100_sxm="h100-sxm"))]


@router.get("", response_model=Page[hardware.Accelerator])
async def list_hardware() -> Response:
    """Every accelerator with dense peaks per dtype, memory and bandwidth."""
    data = list(hardware.catalogue().values())
    return respond(Page(data=data, count=len(data)))


@router.get("/{gpu_id}", response_model=hardware.Accelerator, responses=NOT_FOUND)
async def read_hardware(gpu_id: GpuIdParam) -> Response:
    """One accelerator by id, or by a name people write ("H100 80GB", "4090") that points at one part."""
    try:
        return respond(hardware.gpu(gpu_id, field="gpu_id"))
    except InvalidInput as e:
        raise NotFound(e.field, e.message) from None
