"""Exact encoding of a number into a format: the stored value and its bits.

All arithmetic is on fractions.Fraction, so rounding happens once, from the
exact input, to nearest with ties to even. PyTorch differs in one place: a cast
from float64 to a 16- or 8-bit format goes through float32 and rounds twice
(c10's Half and BFloat16 constructors take a float).
"""

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from app.accounting.dtypes import FloatFormat, IntFormat, _pow2, lookup
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD

Category = Literal["zero", "subnormal", "normal", "inf", "nan"]

# Decimal, hexadecimal (C99 %a) or special; exponents bounded so parsing stays cheap.
VALUE_PATTERN = (
    r"^[+-]?(inf|Inf|INF|infinity|Infinity|nan|NaN|NAN"
    r"|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,4})?"
    r"|0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)([pP][+-]?[0-9]{1,5})?)$"
)
_VALUE_RE = re.compile(VALUE_PATTERN)
_HEX_RE = re.compile(r"0[xX]([0-9a-fA-F]*)\.?([0-9a-fA-F]*)(?:[pP]([+-]?[0-9]+))?")


@dataclass(frozen=True, slots=True)
class _Parsed:
    negative: bool
    magnitude: Fraction | None  # None for inf and nan
    special: Literal["inf", "nan"] | None
    text: str


@dataclass(slots=True)
class Encoding:
    """A value as one format stores it."""

    dtype: str
    input: str
    """The input as parsed: a JSON number's shortest repr, or the string given."""
    stored: float | int | None
    """The stored value as a JSON number; null when it is inf or NaN (see stored_text)."""
    stored_text: str
    """Shortest decimal that reads back to the same stored value, or inf, -inf, nan."""
    stored_exact: str | None
    """The stored value's exact decimal expansion (finite values only)."""
    stored_hex: str | None
    """C99 hexadecimal float of the stored value (finite floats only)."""
    bits: str
    """The bit pattern split as sign|exponent|mantissa (integers: sign|value bits)."""
    sign: str
    exponent: str
    mantissa: str
    hex: str
    """The whole bit pattern as hexadecimal."""
    exponent_value: int | None
    """The unbiased exponent (subnormals use the minimum normal exponent)."""
    significand: float | None
    """1.f for normals, 0.f for subnormals, so stored = sign x significand x 2^exponent_value."""
    category: Category
    underflow: bool
    """A non-zero input stored as zero."""
    overflow: bool
    """A finite input beyond the format's range, stored as inf, NaN or the saturated max."""
    inexact: bool
    """The stored value differs from the input."""
    abs_error: float | None
    """|stored - input|; null when either is not finite."""
    rel_error: float | None
    """abs_error / |input|; null when either is not finite, 0 for an exact zero."""
    overflow_rule: str
    """What happened, or would happen, to an overflow: inf, saturate or nan."""

    __pydantic_config__ = RECORD


def parse_value(value: int | float | str) -> _Parsed:
    """Read a JSON number or a decimal/hex/inf/nan string into an exact value."""
    if isinstance(value, bool):
        raise InvalidInput("value", "must be a number or a numeric string")
    if isinstance(value, int):  # exact, however large
        return _Parsed(value < 0, Fraction(abs(value)), None, str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput("value", "must be finite; pass 'inf' or 'nan' as a string")
        negative = math.copysign(1.0, value) < 0
        return _Parsed(negative, abs(Fraction(value)), None, repr(value))
    text = value.strip()
    if not _VALUE_RE.match(text):
        raise InvalidInput("value", f"not a number: {text[:40]!r}")
    negative = text.startswith("-")
    body = text.lstrip("+-").lower()
    if body in ("inf", "infinity"):
        return _Parsed(negative, None, "inf", text)
    if body == "nan":
        return _Parsed(negative, None, "nan", text)
    if body.startswith("0x"):
        whole, frac, exp = _HEX_RE.fullmatch(body).groups()
        digits = (whole or "") + (frac or "")
        magnitude = Fraction(int(digits or "0", 16), 16 ** len(frac or "")) * _pow2(int(exp or 0))
        return _Parsed(negative, magnitude, None, text)
    return _Parsed(negative, abs(Fraction(Decimal(body))), None, text)


def _round(a: Fraction, fmt: FloatFormat) -> tuple[int, int]:
    """Round a > 0 to n * 2^q with the format's precision and lower exponent
    limit but no upper limit; n is the integer significand (ties to even)."""
    m, emin = fmt.mantissa_bits, 1 - fmt.bias
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if _pow2(e) > a:
        e -= 1  # now 2^e <= a < 2^(e+1)
    q = max(e, emin) - m
    n = round(a / _pow2(q))  # Fraction.__round__ rounds half to even
    if n == 2 ** (m + 1):  # rounding carried into the next binade
        n, q = n // 2, q + 1
    return n, q


def _float_fields(fmt: FloatFormat, negative: bool, kind: Category, n: int = 0, q: int = 0):
    """Sign, exponent and mantissa fields (as ints) for a category and n*2^q."""
    e_ones, m_bits = 2**fmt.exponent_bits - 1, fmt.mantissa_bits
    if kind == "nan":
        if fmt.nan_style == "negative_zero":
            return 1, 0, 0
        if fmt.nan_style == "all_ones" or fmt.bits == 8:  # torch's e4m3fn and e5m2 NaN is 0x7F
            return int(negative), e_ones, 2**m_bits - 1
        return 0, e_ones, 2 ** (m_bits - 1)  # canonical quiet NaN
    sign = int(negative) if fmt.has_negative_zero or kind != "zero" else 0
    if kind == "inf":
        return sign, e_ones, 0
    if kind == "zero":
        return sign, 0, 0
    if kind == "subnormal":
        return sign, 0, n
    return sign, q + m_bits + fmt.bias, n - 2**m_bits


def _shortest(value: Fraction, fmt: FloatFormat) -> str:
    """Fewest significant digits that round back to `value` in this format;
    integers below 2^53 are written out in full ("448", not "4.5e+02")."""
    if value.denominator == 1 and value < 2**53:
        return str(value.numerator)
    target = _round(abs(value), fmt)
    f = float(value)  # exact: every format here is a subset of float64
    for digits in range(1, 18):
        text = f"{f:.{digits}g}"
        if _round(abs(Fraction(Decimal(text))), fmt) == target:
            return text
    return repr(f)


def _exact_decimal(value: Fraction) -> str:
    """Exact decimal expansion of a dyadic rational."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    k = value.denominator.bit_length() - 1  # denominator is 2^k
    digits = str(value.numerator * 5**k)
    if k == 0:
        return f"{sign}{digits}"
    digits = digits.rjust(k + 1, "0")
    return f"{sign}{digits[:-k]}.{digits[-k:]}".rstrip("0").rstrip(".")


def _signed(parsed: _Parsed) -> Fraction:
    return -parsed.magnitude if parsed.negative else parsed.magnitude


def _error(stored: Fraction | None, parsed: _Parsed) -> tuple[float | None, float | None]:
    if stored is None or parsed.magnitude is None:
        return None, None
    exact = _signed(parsed)
    diff = abs(stored - exact)
    try:
        abs_err = float(diff)
        rel_err = float(diff / abs(exact)) if exact else 0.0
    except OverflowError:  # an input beyond float64's range
        return None, None
    return abs_err, rel_err


def _overflow_rule(fmt: FloatFormat, saturate: bool | None) -> str:
    if saturate is None:
        return fmt.overflow
    if saturate or not fmt.has_nan:  # a format with neither inf nor NaN can only clamp
        return "saturate"
    return "inf" if fmt.has_inf else "nan"


def _classify(parsed: _Parsed, fmt: FloatFormat, rule: str) -> tuple[Category, int, int, bool, bool]:
    """What the value becomes: its category, stored as n * 2^q, and whether it
    overflowed or underflowed on the way."""
    if parsed.special == "nan":
        return "nan", 0, 0, False, False
    if parsed.special == "inf":  # already infinite: the overflow rule decides, no flag
        if rule == "saturate":
            return "normal", *_max_significand(fmt), False, False
        return rule, 0, 0, False, False  # "inf", or "nan" where the format has no inf
    if not parsed.magnitude:
        return "zero", 0, 0, False, False
    n, q = _round(parsed.magnitude, fmt)
    if n * _pow2(q) > fmt.max_exact:
        if rule == "saturate":
            return "normal", *_max_significand(fmt), True, False
        return rule, 0, 0, True, False  # "inf" or "nan"
    if n == 0:
        return "zero", 0, 0, False, True
    return ("normal" if n >= 2**fmt.mantissa_bits else "subnormal"), n, q, False, False


def _max_significand(fmt: FloatFormat) -> tuple[int, int]:
    """The largest finite value as n * 2^q."""
    return (2**fmt.mantissa_bits + fmt.max_mantissa_field,
            fmt.max_exponent_field - fmt.bias - fmt.mantissa_bits)


def encode(value: int | float | str, dtype: str, *, saturate: bool | None = None) -> Encoding:
    """Store `value` in `dtype`. saturate=None follows the format's own overflow
    rule (as PyTorch casts); True clamps to +-max; False overflows to inf, or NaN
    where the format has no inf."""
    fmt = lookup(dtype)
    parsed = parse_value(value)
    if isinstance(fmt, IntFormat):
        return _encode_int(parsed, fmt)
    rule = _overflow_rule(fmt, saturate)
    if not fmt.has_nan and parsed.special == "nan":
        raise InvalidInput("value", f"{fmt.name} has no NaN encoding")

    kind, n, q, overflow, underflow = _classify(parsed, fmt, rule)
    magnitude = n * _pow2(q) if kind in ("zero", "subnormal", "normal") else None
    stored = None if magnitude is None else (-magnitude if parsed.negative else magnitude)
    s, e, m = _float_fields(fmt, parsed.negative, kind, n, q)
    ebits = format(e, f"0{fmt.exponent_bits}b")
    mbits = format(m, f"0{fmt.mantissa_bits}b")
    pattern = (s << (fmt.exponent_bits + fmt.mantissa_bits)) | (e << fmt.mantissa_bits) | m
    abs_err, rel_err = _error(stored, parsed)
    if stored is None:
        text = "nan" if kind == "nan" else ("-inf" if parsed.negative else "inf")
        f_stored = None
    else:
        f_stored = float(stored)
        if parsed.negative and stored == 0 and fmt.has_negative_zero:
            f_stored = -0.0
        text = ("-" if math.copysign(1, f_stored) < 0 else "") + _shortest(magnitude, fmt)
    exp_value = None if kind in ("inf", "nan", "zero") else (
        1 - fmt.bias if kind == "subnormal" else e - fmt.bias)
    return Encoding(
        dtype=fmt.name,
        input=parsed.text,
        stored=f_stored,
        stored_text=text,
        stored_exact=None if stored is None else _exact_decimal(stored),
        stored_hex=None if f_stored is None else f_stored.hex(),
        bits=f"{s}|{ebits}|{mbits}",
        sign=str(s),
        exponent=ebits,
        mantissa=mbits,
        hex=f"0x{pattern:0{(fmt.bits + 3) // 4}x}",
        exponent_value=exp_value,
        significand=None if exp_value is None else float(magnitude / _pow2(exp_value)),
        category=kind,
        underflow=underflow,
        overflow=overflow,
        inexact=(stored is None) != (parsed.special is not None) or (
            stored is not None and parsed.magnitude is not None and stored != _signed(parsed)),
        abs_error=abs_err,
        rel_error=rel_err,
        overflow_rule=rule,
    )


def _encode_int(parsed: _Parsed, fmt: IntFormat) -> Encoding:
    """Integers truncate toward zero, as a PyTorch cast does, and saturate on
    overflow (a C++ cast of an out-of-range float is undefined behaviour)."""
    if parsed.special == "nan":
        raise InvalidInput("value", f"{fmt.name} has no NaN encoding")
    if parsed.special == "inf":
        truncated = None
    else:
        truncated = math.trunc(parsed.magnitude) * (-1 if parsed.negative else 1)
    lo, hi = fmt.min_value, fmt.max_value
    if truncated is None:
        stored, overflow = (lo if parsed.negative else hi), False
    else:
        stored = min(max(truncated, lo), hi)
        overflow = stored != truncated
    pattern = stored % 2**fmt.bits  # two's complement
    all_bits = format(pattern, f"0{fmt.bits}b")
    sign, rest = (all_bits[0], all_bits[1:]) if fmt.signed else ("", all_bits)
    abs_err, rel_err = _error(Fraction(stored), parsed)
    return Encoding(
        dtype=fmt.name, input=parsed.text, stored=stored, stored_text=str(stored),
        stored_exact=str(stored), stored_hex=None,
        bits=f"{sign}|{rest}" if fmt.signed else rest, sign=sign, exponent="", mantissa=rest,
        hex=f"0x{pattern:0{fmt.bits // 4}x}", exponent_value=None, significand=None,
        category="zero" if stored == 0 else "normal",
        underflow=truncated == 0 and bool(parsed.magnitude), overflow=overflow,
        inexact=abs_err != 0, abs_error=abs_err, rel_error=rel_err, overflow_rule="saturate",
    )
