"""Number formats: their layouts and limits, and exact encoding of a value."""

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response

from app.accounting import dtypes, encode
from app.accounting.errors import InvalidInput
from app.api.errors import NOT_FOUND, REQUEST_ERRORS, NotFound
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import dtypes as service
from app.api.services.dtypes import EncodeRequest
from app.inputs.schemas import Page

# Fixed paths come before "/{...}" ones, so OPTIONS and 405 answer with the
# methods of the route the path names.
router = APIRouter(prefix="/dtypes", tags=["number formats"])

ENCODE = examples(five_thirty_seconds_in_fp32={"value": 0.15625, "dtype": "float32"},
                  a_tenth_in_bf16={"value": "0.1", "dtype": "bf16"})
DtypeNameParam = Annotated[str, Path(max_length=40, openapi_examples=examples(bf16="bf16"))]

@router.get("", response_model=Page[dtypes.DtypeInfo])
async def list_dtypes() -> Response:
    """Every number format, with bits, range and precision."""
    data = dtypes.list_dtypes()
    return respond(Page(data=data, count=len(data)))


@router.post("/encode", response_model=answer(encode.Encoding), responses=REQUEST_ERRORS)
async def encode_value(body: Annotated[EncodeRequest, Body(openapi_examples=ENCODE)]) -> Response:
    """Store a value in a format: rounded to nearest even, with its bits and errors."""
    return respond(service.encode_value(body), body)


@router.get("/{name}", response_model=dtypes.DtypeInfo, responses=NOT_FOUND)
async def read_dtype(name: DtypeNameParam) -> Response:
    """One number format, by name or alias."""
    try:
        return respond(dtypes.describe(dtypes.lookup(name, field="name")))
    except InvalidInput as e:
        raise NotFound(e.field, e.message) from None
