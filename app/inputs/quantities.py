"""Numbers as people write them: "70B" parameters, "15T" tokens, "4k" tokens, "80GB" of memory.

The one place such text is read. Counts take the short scale: k or K 10^3, M 10^6, B or G
10^9, T 10^12. Sequence lengths (seq_len, max_seq_len) take the binary scale their writers mean:
"4k" is 4096 tokens, as "8k context" is 8192. Bytes take SI units (kB, MB, GB, TB, PB: powers
of 10^3) and IEC units (KiB, MiB, GiB, TiB, PiB: powers of 2^10); a bare scale on a byte
count ("80B", "80G") is refused as ambiguous. Plain decimal text ("2.5e12") is a number everywhere.

Digits may be grouped in threes with commas, as people write them ("70,000,000,000", "8,192").
Counts also take the lowercase suffixes people type ("70b", "1.5m" tokens); plain numbers take
"b", "g" and "t" too, but no lowercase "m" (milli, or million?). Rates of bytes take a unit per
second: "936GB/s", "3.35 TB/s", "400Gb/s" (bits: a network's 400 Gb/s is 50e9 bytes/s).

Text is matched with `re.search` against the pattern the OpenAPI schema states, as a JSON
Schema validator in Python does, so a fuzzer's schema-valid string is this parser's too.
Values stay exact (Decimal) until they are checked against the field's bounds.
"""

import re
from dataclasses import dataclass
from decimal import Decimal, localcontext

# Digits, an optional fraction and exponent: ASCII only ([0-9], not \d), as ECMA regexes read it.
_NUMBER = r"(-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,3})?)"
MAX_CHARS = 40
SHORT_SCALE = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
COUNT_SCALE = SHORT_SCALE | {"m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
NUMBER_SCALE = SHORT_SCALE | {"b": 10**9, "g": 10**9, "t": 10**12}
BYTE_UNITS = {"": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
RATE_UNITS = {"": 1, **{f"{u}/s": n for u, n in BYTE_UNITS.items() if u},
              "B/s": 1, "Mb/s": 10**6 // 8, "Gb/s": 10**9 // 8, "Tb/s": 10**12 // 8}
# What a bare scale on a byte count could have meant: SI, or IEC.
_BYTE_READINGS = {"k": ("kB", "KiB"), "K": ("kB", "KiB"), "KB": ("kB", "KiB"), "M": ("MB", "MiB"),
                  "B": ("GB", "GiB"), "G": ("GB", "GiB"), "T": ("TB", "TiB"), "P": ("PB", "PiB")}


class QuantityError(ValueError):
    """Text that is no quantity (`rule` false), or one the field's bounds or integrality
    refuse (`rule` true: a rule the schema's pattern cannot state)."""

    def __init__(self, message: str, *, rule: bool) -> None:
        super().__init__(message)
        self.message, self.rule = message, rule


@dataclass(frozen=True)
class Kind:
    units: dict[str, int]
    pattern: str
    description: str
    hint: str
    """Forms to suggest when text is no quantity."""


def _kind(units: dict[str, int], description: str, hint: str) -> Kind:
    names = "|".join(sorted((re.escape(u) for u in units if u), key=len, reverse=True))
    # Numbered groups only: JSON Schema patterns are ECMA regexes, which write names differently.
    return Kind(units, rf"^{_NUMBER} ?({names})?$", description, hint)


COUNT = _kind(COUNT_SCALE, 'Text with a short-scale suffix: "70B", "15T", "4k", "1.5M", "70,000,000,000" '
                           'or "2.5e12" (k/K 10^3, M/m 10^6, B/b/G/g 10^9, T/t 10^12).', "70B, 4k or 2.5e12")
# Context lengths are written in powers of two: Llama 3's "8k" is 8192 tokens, "128k" 131072.
SEQUENCE_SCALE = {"": 1, "k": 2**10, "K": 2**10, "M": 2**20}
SEQUENCE = _kind(SEQUENCE_SCALE, 'Text as context lengths are written: "4k" is 4096 tokens, "128k" 131072, '
                                 '"1M" 1048576 (k/K 2^10, M 2^20: sequence lengths are powers of two).',
                 "4096 or 4k")
NUMBER = _kind(NUMBER_SCALE, 'Text: "2.5e12", or with a short-scale suffix, "989T" (k/K 10^3, M 10^6, '
                             "B/b/G/g 10^9, T/t 10^12).", "0.5, 2.5e12 or 989T")
BYTES = _kind(BYTE_UNITS, 'Text with a byte unit: "80GB", "80 GiB", "512MiB", "4kB" (kB/MB/GB/TB/PB are '
                          "powers of 10^3, KiB/MiB/GiB/TiB/PiB of 2^10), or plain bytes, \"8e10\".",
                "80GB or 80GiB")


RATE = _kind(RATE_UNITS, 'Bytes per second, or text with a unit per second: "936GB/s", "3.35TB/s", '
                         '"900 GiB/s", "400Gb/s" (Gb/s: bits, 1/8 of a byte).', "936GB/s or 3.35TB/s")


def readable(limit: float | int | Decimal) -> str:
    """A bound as people read it: 1000000000000000 -> "1,000,000,000,000,000", 1e-06 -> "1e-06",
    0.5 -> "0.5"."""
    value = Decimal(repr(limit)) if isinstance(limit, float) else Decimal(limit)
    if value == value.to_integral_value() and abs(value) < 10**30:
        return f"{int(value):,}"
    return repr(float(value))


def schema(kind: Kind) -> dict:
    """The string member of a quantity field's OpenAPI schema."""
    return {"type": "string", "pattern": kind.pattern, "maxLength": MAX_CHARS,
            "description": kind.description}


def _ambiguous(text: str) -> str | None:
    match = re.fullmatch(rf"{_NUMBER} ?([kKMBGTP]B?)", text.strip())
    if match is None or match[2] not in _BYTE_READINGS:
        return None
    si, iec = _BYTE_READINGS[match[2]]
    number = match[1]
    return (f"{text.strip()!r} is ambiguous for bytes: write {number}{si} ({si}: powers of 10^3) or "
            f"{number}{iec} ({iec}: powers of 2^10)")


def read(text: str, kind: Kind) -> Decimal:
    """The exact value of `text`, or QuantityError (not `rule`) naming the forms it takes."""
    match = re.search(kind.pattern, text) if len(text) <= MAX_CHARS else None
    if match is None:
        if kind is BYTES and (why := _ambiguous(text)) is not None:
            raise QuantityError(why, rule=False)
        raise QuantityError(f"{text[:MAX_CHARS]!r} is not a number; write e.g. {kind.hint}", rule=False)
    with localcontext(prec=120):  # exact: 40 digits times at most 2^50
        return Decimal(match[1].replace(",", "")) * kind.units[match[2] or ""]


def _bounds_message(text: str, value: Decimal, lo: Decimal | None, hi: Decimal | None,
                    open_lo: bool) -> str | None:
    if lo is not None and (value <= lo if open_lo else value < lo):
        return f"{text.strip()!r} is {value:.4g}; must be {'>' if open_lo else '>='} {readable(lo)}"
    if hi is not None and value > hi:
        return f"{text.strip()!r} is {value:.4g}; must be <= {readable(hi)}"
    return None


def whole(text: str, kind: Kind, lo: int | None, hi: int | None) -> int:
    """An integer in [lo, hi] from text: refused when out of bounds or not whole."""
    value = read(text, kind)
    if value != value.to_integral_value():
        # :.6g, not :f: "-3e-442" written out in full is 440 characters of zeros.
        raise QuantityError(f"{text.strip()!r} is {value:.6g}, not a whole number", rule=True)
    why = _bounds_message(text, value, None if lo is None else Decimal(lo),
                          None if hi is None else Decimal(hi), False)
    if why:
        raise QuantityError(why, rule=True)
    return int(value)


def real(text: str, lo: float | None, hi: float | None, *, open_lo: bool = False, kind: Kind = NUMBER) -> float:
    """A float from text, checked against the bounds as the schema writes them."""
    value = read(text, kind)
    why = _bounds_message(text, value, None if lo is None else Decimal(repr(lo)),
                          None if hi is None else Decimal(repr(hi)), open_lo)
    if why:
        raise QuantityError(why, rule=True)
    if value != 0 and float(value) == 0:  # "8e-534" passes "> 0" exactly, then rounds to 0.0
        raise QuantityError(f"{text.strip()!r} is {value:.4g}, below the smallest double", rule=True)
    return float(value)
