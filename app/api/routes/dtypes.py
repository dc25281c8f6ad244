"""Number formats: their layouts and limits, and exact encoding of a value."""

import sys
from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import Field, StringConstraints

from app.accounting import dtypes, encode
from app.accounting.errors import InvalidInput
from app.api.errors import NOT_FOUND, REQUEST_ERRORS, NotFound
from app.contract.fields import Input, number
from app.api.responses import respond
from app.contract.schemas import DtypeName, Page

# Fixed paths come before "/{...}" ones, so OPTIONS and 405 answer with the
# methods of the route the path names.
router = APIRouter(prefix="/dtypes", tags=["number formats"])

ValueText = Annotated[str, StringConstraints(pattern=encode.VALUE_PATTERN, max_length=80)]
# Any finite float64; beyond this a JSON number parses as inf and is refused. Integers
# stay exact (no rounding to float64 on the way in), within the same written bound.
FiniteNumber = number(ge=-sys.float_info.max, le=sys.float_info.max)
_MAX_INT = int(Decimal(repr(sys.float_info.max)))
ExactInteger = Annotated[int, Field(ge=-_MAX_INT, le=_MAX_INT)]


class EncodeRequest(Input):
    value: ExactInteger | FiniteNumber | ValueText = Field(
        description="A finite JSON number, or a string: decimal (read exactly, e.g. '0.1'), "
                    "C99 hex ('0x1.8p-3'), 'inf', '-inf' or 'nan'.",
        examples=[0.15625])
    dtype: DtypeName = Field(description="Format name or alias (fp32, bf16, fp16, fp8 ...).")
    saturate: bool | None = Field(
        None, description="Overflow: null follows the format's rule as PyTorch casts it (e4m3fn "
                          "and fp4 saturate, others go to inf or NaN); true clamps to +-max; "
                          "false goes to inf, or NaN where the format has no inf.")


@router.get("", response_model=Page[dtypes.DtypeInfo])
async def list_dtypes() -> Response:
    """Every number format, with bits, range and precision."""
    data = dtypes.list_dtypes()
    return respond(Page(data=data, count=len(data)))


@router.post("/encode", response_model=encode.Encoding, responses=REQUEST_ERRORS)
async def encode_value(body: EncodeRequest) -> Response:
    """Store a value in a format: rounded to nearest even, with its bits and errors."""
    return respond(encode.encode(body.value, body.dtype, saturate=body.saturate))


@router.get("/{name}", response_model=dtypes.DtypeInfo, responses=NOT_FOUND)
async def read_dtype(name: Annotated[str, Path(max_length=40)]) -> Response:
    """One number format, by name or alias."""
    try:
        return respond(dtypes.describe(dtypes.lookup(name, field="name")))
    except InvalidInput as e:
        raise NotFound(e.field, e.message) from None
