"""Tensor memory, strides, contiguity and views."""

from typing import Annotated

from fastapi import APIRouter, Body, Response

from app.accounting import tensors
from app.api.errors import REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import tensors as service
from app.api.services.tensors import LayoutRequest, MemoryRequest

router = APIRouter(prefix="/tensors", tags=["tensors"])

# GPT-3's embedding matrix in fp32; a transposed (3, 2) tensor, which view() cannot reshape.
MEMORY = examples(gpt3_embedding_in_fp32={"shape": [49152, 12288], "dtype": "float32"})
LAYOUT = examples(a_transposed_tensor={"shape": [3, 2], "stride": [1, 3], "index": [2, 1],
                                       "view_shape": [2, 3]})


@router.post("/memory", response_model=answer(tensors.TensorMemory), responses=REQUEST_ERRORS)
async def tensor_memory(body: Annotated[MemoryRequest, Body(openapi_examples=MEMORY)]) -> Response:
    """Bytes of a contiguous tensor, in GB and GiB."""
    return respond(service.memory(body), body)


@router.post("/layout", response_model=answer(tensors.TensorLayout), responses=REQUEST_ERRORS)
async def tensor_layout(body: Annotated[LayoutRequest, Body(openapi_examples=LAYOUT)]) -> Response:
    """Contiguity, the storage index of an element, and whether a view needs a copy."""
    return respond(service.layout(body), body)
