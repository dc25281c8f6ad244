"""Number formats, described down to the bit.

Every float format here is sign | exponent | mantissa with an exponent bias;
its limits (max, min_normal, min_subnormal, eps) are derived from the layout,
never typed in. Formats differ in how they spend the all-ones exponent:

- "ieee": all-ones exponent holds inf (mantissa 0) and NaN (mantissa != 0).
- "all_ones": no inf; only S.1111.111 is NaN (OCP float8 e4m3fn).
- "negative_zero": no inf, no -0; the -0 pattern 1000...0 is the one NaN (AMD fnuz).
- "none": neither inf nor NaN (OCP float4 e2m1).
"""

from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Literal

from app.accounting import names
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD

NanStyle = Literal["ieee", "all_ones", "negative_zero", "none"]
# What a cast does with a finite value beyond max, as PyTorch 2.13 casts it.
OverflowRule = Literal["inf", "saturate", "nan"]


@dataclass(frozen=True, slots=True)
class FloatFormat:
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    storage_bits: int
    nan_style: NanStyle
    overflow: OverflowRule
    torch_dtype: str | None
    aliases: tuple[str, ...]
    notes: str

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def storage_bytes(self) -> float:
        return self.storage_bits / 8 if self.storage_bits % 8 else self.storage_bits // 8

    @property
    def has_inf(self) -> bool:
        return self.nan_style == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.nan_style != "none"

    @property
    def has_negative_zero(self) -> bool:
        return self.nan_style != "negative_zero"

    @property
    def max_exponent_field(self) -> int:
        """Largest biased exponent that still encodes finite numbers."""
        all_ones = 2**self.exponent_bits - 1
        return all_ones - 1 if self.nan_style == "ieee" else all_ones

    @property
    def max_mantissa_field(self) -> int:
        """Largest mantissa field at max_exponent_field (e4m3fn gives S.1111.111 to NaN)."""
        all_ones = 2**self.mantissa_bits - 1
        return all_ones - 1 if self.nan_style == "all_ones" else all_ones

    @property
    def max_exact(self) -> Fraction:
        m = self.mantissa_bits
        return Fraction(2**m + self.max_mantissa_field) * _pow2(self.max_exponent_field - self.bias - m)

    @property
    def min_normal_exact(self) -> Fraction:
        return _pow2(1 - self.bias)

    @property
    def min_subnormal_exact(self) -> Fraction:
        return _pow2(1 - self.bias - self.mantissa_bits)

    @property
    def eps_exact(self) -> Fraction:
        """Gap between 1.0 and the next representable value."""
        return _pow2(-self.mantissa_bits)


@dataclass(frozen=True, slots=True)
class IntFormat:
    name: str
    bits: int
    signed: bool
    torch_dtype: str
    aliases: tuple[str, ...]
    notes: str

    @property
    def storage_bits(self) -> int:
        return self.bits

    @property
    def storage_bytes(self) -> int:
        return self.bits // 8

    @property
    def min_value(self) -> int:
        return -(2 ** (self.bits - 1)) if self.signed else 0

    @property
    def max_value(self) -> int:
        return 2 ** (self.bits - 1) - 1 if self.signed else 2**self.bits - 1


Format = FloatFormat | IntFormat


def _pow2(e: int) -> Fraction:
    return Fraction(2**e) if e >= 0 else Fraction(1, 2**-e)


FORMATS: tuple[Format, ...] = (
    FloatFormat("float64", 11, 52, 1023, 64, "ieee", "inf", "float64", ("fp64", "double", "f64"),
                "IEEE 754 binary64."),
    FloatFormat("float32", 8, 23, 127, 32, "ieee", "inf", "float32", ("fp32", "float", "f32", "single"),
                "IEEE 754 binary32, PyTorch's default dtype."),
    FloatFormat("tfloat32", 8, 10, 127, 32, "ieee", "inf", None, ("tf32",),
                "NVIDIA TensorFloat-32: float32's range with float16's mantissa. Tensor cores read "
                "19 bits of a 32-bit register, so it occupies 4 bytes. Tally rounds to nearest "
                "even; the PTX instruction cvt.rna.tf32.f32 rounds ties away from zero."),
    FloatFormat("float16", 5, 10, 15, 16, "ieee", "inf", "float16", ("fp16", "half", "f16"),
                "IEEE 754 binary16."),
    FloatFormat("bfloat16", 8, 7, 127, 16, "ieee", "inf", "bfloat16", ("bf16",),
                "Google Brain float: float32's exponent range in 16 bits, with 8 bits of precision."),
    FloatFormat("float8_e4m3fn", 4, 3, 7, 8, "all_ones", "saturate", "float8_e4m3fn",
                ("fp8", "fp8_e4m3", "e4m3", "e4m3fn"),
                "OCP FP8 E4M3 (finite, no inf). PyTorch 2.13 casts saturate: overflow and inf "
                "become +-448; NaN stays NaN."),
    FloatFormat("float8_e5m2", 5, 2, 15, 8, "ieee", "inf", "float8_e5m2", ("fp8_e5m2", "e5m2"),
                "OCP FP8 E5M2, IEEE-like with inf and NaN; casts overflow to inf."),
    FloatFormat("float8_e4m3fnuz", 4, 3, 8, 8, "negative_zero", "nan", "float8_e4m3fnuz",
                ("fp8_e4m3fnuz", "e4m3fnuz"),
                "AMD MI300 FP8 E4M3: bias 8, no inf and no -0; the -0 pattern is NaN, and casts "
                "overflow to NaN."),
    FloatFormat("float8_e5m2fnuz", 5, 2, 16, 8, "negative_zero", "nan", "float8_e5m2fnuz",
                ("fp8_e5m2fnuz", "e5m2fnuz"),
                "AMD MI300 FP8 E5M2: bias 16, no inf and no -0; casts overflow to NaN."),
    FloatFormat("float4_e2m1fn", 2, 1, 1, 4, "none", "saturate", None, ("fp4", "e2m1"),
                "OCP MX FP4 E2M1 element (values 0, 0.5, 1, 1.5, 2, 3, 4, 6): no inf, no NaN, "
                "conversions saturate. Two values share a byte (PyTorch's float4_e2m1fn_x2)."),
    FloatFormat("float6_e2m3fn", 2, 3, 1, 6, "none", "saturate", None, ("fp6", "fp6_e2m3", "e2m3"),
                "OCP MX FP6 E2M3 element (max 7.5, min normal 1, min subnormal 0.125): no inf, no NaN, "
                "conversions saturate; the FP6 AMD CDNA 4 and NVIDIA Blackwell tensor cores read (OCP "
                "Microscaling Formats v1.0, section 5.3.2)."),
    FloatFormat("float6_e3m2fn", 3, 2, 3, 6, "none", "saturate", None, ("fp6_e3m2", "e3m2"),
                "OCP MX FP6 E3M2 element (max 28, min normal 0.25, min subnormal 0.0625): no inf, no NaN, "
                "conversions saturate (OCP Microscaling Formats v1.0, section 5.3.2)."),
    IntFormat("int8", 8, True, "int8", ("i8",), "Two's complement."),
    IntFormat("uint8", 8, False, "uint8", ("u8",), "Unsigned."),
    IntFormat("int32", 32, True, "int32", ("i32", "int"), "Two's complement."),
    IntFormat("int64", 64, True, "int64", ("i64", "long"), "Two's complement; PyTorch's index dtype."),
)

# Keys of a GPU's peak table that a dtype's matmuls run at.
PEAK_KEYS = ("float64", "float32", "tfloat32", "bfloat16", "float16", "float8", "float6", "float4", "int8")


@cache
def _by_name() -> dict[str, Format]:
    table: dict[str, Format] = {}
    for fmt in FORMATS:
        for key in (fmt.name, *fmt.aliases):
            assert key not in table, key
            table[key] = fmt
    return table


def accepted_names() -> tuple[str, ...]:
    """Every spelling a dtype field accepts: canonical names, then aliases."""
    return tuple(f.name for f in FORMATS) + tuple(a for f in FORMATS for a in f.aliases)


DTYPES_LISTING = "GET /api/v1/dtypes"


def lookup(name: str, *, field: str = "dtype") -> Format:
    """Resolve a canonical name or alias (fp32, bf16, fp8 ...) to its format."""
    try:
        return _by_name()[name]
    except KeyError:
        raise InvalidInput(field, names.unknown("dtype", name, _by_name(), DTYPES_LISTING)) from None


def peak_key(name: str, *, field: str = "dtype") -> str:
    """The key of a hardware peak table that matmuls in this dtype run at."""
    fmt = lookup(name, field=field)
    if fmt.name.startswith("float8"):
        return "float8"
    if fmt.name == "float4_e2m1fn":
        return "float4"
    if fmt.name.startswith("float6"):
        return "float6"
    return fmt.name


@dataclass(frozen=True, slots=True)
class DtypeInfo:
    """One number format. Floats: limits derived from the bit layout. Integers:
    mantissa_bits counts value bits, min_normal and eps are 1, no subnormals."""

    name: str
    kind: Literal["float", "int"]
    bits: int
    bytes: float | int
    exponent_bits: int
    mantissa_bits: int
    exponent_bias: int | None
    max: float | int
    lowest: float | int
    min_normal: float | int
    min_subnormal: float | None
    eps: float | int
    has_infinity: bool
    has_nan: bool
    overflow: str
    aliases: list[str]
    torch_dtype: str | None
    notes: str

    __pydantic_config__ = RECORD


def describe(fmt: Format) -> DtypeInfo:
    """The public description of a format."""
    if isinstance(fmt, IntFormat):
        return DtypeInfo(
            name=fmt.name, kind="int", bits=fmt.bits, bytes=fmt.storage_bytes, exponent_bits=0,
            mantissa_bits=fmt.bits - fmt.signed, exponent_bias=None, max=fmt.max_value,
            lowest=fmt.min_value, min_normal=1, min_subnormal=None, eps=1, has_infinity=False,
            has_nan=False, overflow="saturate", aliases=list(fmt.aliases),
            torch_dtype=f"torch.{fmt.torch_dtype}", notes=fmt.notes,
        )
    return DtypeInfo(
        name=fmt.name, kind="float", bits=fmt.bits, bytes=fmt.storage_bytes,
        exponent_bits=fmt.exponent_bits, mantissa_bits=fmt.mantissa_bits, exponent_bias=fmt.bias,
        max=float(fmt.max_exact), lowest=-float(fmt.max_exact),
        min_normal=float(fmt.min_normal_exact), min_subnormal=float(fmt.min_subnormal_exact),
        eps=float(fmt.eps_exact), has_infinity=fmt.has_inf, has_nan=fmt.has_nan,
        overflow=fmt.overflow, aliases=list(fmt.aliases),
        torch_dtype=f"torch.{fmt.torch_dtype}" if fmt.torch_dtype else None, notes=fmt.notes,
    )


def list_dtypes() -> list[DtypeInfo]:
    return [describe(f) for f in FORMATS]
