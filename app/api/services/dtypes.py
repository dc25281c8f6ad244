"""Number formats: exact encoding of a value."""

import sys
from decimal import Decimal
from typing import Annotated

from pydantic import Field, StringConstraints, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from app.accounting import encode
from app.inputs.fields import Input, number
from app.inputs.schemas import DtypeName


def _readable(value: object, handler):  # noqa: ANN001  (pydantic's validator handler)
    """The pattern's own message ("does not match the pattern") says what it is not; this says
    what a value may be."""
    try:
        return handler(value)
    except ValidationError as e:
        if any(err["type"] == "string_pattern_mismatch" for err in e.errors()):
            raise PydanticCustomError(
                "value_text", "not a number: give a decimal (0.1, 1e-8, 65520), a C99 hex float "
                              "(0x1.8p-3), inf, -inf or nan") from None
        raise


ValueText = Annotated[str, StringConstraints(pattern=encode.VALUE_PATTERN, max_length=80),
                      WrapValidator(_readable)]
# Any finite float64; beyond this a JSON number parses as inf and is refused. Integers
# stay exact (no rounding to float64 on the way in), within the same written bound.
FiniteNumber = number(ge=-sys.float_info.max, le=sys.float_info.max, text=False)  # text: ValueText, exact
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


def encode_value(body: EncodeRequest) -> encode.Encoding:
    return encode.encode(body.value, body.dtype, saturate=body.saturate)
