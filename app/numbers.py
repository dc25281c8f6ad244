"""Numbers as a person reads them, the one formatter of the pages, the CLI's tables and the
engine's human readings: three significant figures, named scales, one byte unit, never
"1.2e+04" and never "-0.0%".

Conventions (the pages state them once, in the footer):
- bytes are GB, 10^9 bytes (GPU vendors' unit); the exact byte count sits beside it where
  it matters. GiB never appears on a page (the API's human readings give both: human_bytes).
- counts (parameters, tokens) use short scale: K 10^3, M 10^6, B 10^9, T 10^12.
- FLOP counts and FLOP/s use three significant figures; FLOP/s are always TFLOP/s.
- a missing figure reads "n/a".
static/app.js formats chart ticks by the same rules (`Tally.sig`, `Tally.amount`), and a browser
test holds them to these functions value for value.

Pure standard library: the lowest layer, so the engine may use it too.
"""

import math

GB = 10**9

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
_SCALES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))


def _clean(x: float) -> float:
    """-0.0 and values that round to zero print as 0."""
    return 0.0 if x == 0 else x


def sig(x: float | int | None, figures: int = 3) -> str:
    """7e12 -> '7.00 × 10¹²'; 1024 -> '1,024'; 0.15625 -> '0.156'. Plain digits from 0.001 up
    to a million, a power of ten outside that."""
    if x is None:
        return "n/a"
    x = _clean(float(x))
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    exponent = math.floor(math.log10(abs(x)))
    mantissa = round(x / 10**exponent, figures - 1)
    if abs(mantissa) >= 10:  # 9.995 rounds up to the next power
        mantissa, exponent = mantissa / 10, exponent + 1
    if -3 <= exponent < 6:
        decimals = max(figures - 1 - exponent, 0)
        return f"{round(x, decimals):,.{decimals}f}"
    return f"{mantissa:.{figures - 1}f} × 10{str(exponent).translate(_SUPERSCRIPT)}"


def short(x: float | int | None, figures: int = 3) -> str:
    """As sig, without trailing zeros: 0.9 -> '0.9', 7e12 -> '7 × 10¹²', 1.25 -> '1.25'."""
    text = sig(x, figures)
    number, times, power = text.partition(" × ")
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    return number + times + power


def amount(x: float | int | None) -> str:
    """A count in short scale: 5e9 -> '5.0 B', 70e9 -> '70.0 B', 405e9 -> '405 B', 512 -> '512'."""
    if x is None:
        return "n/a"
    for scale, name in _SCALES:
        if abs(x) >= scale:
            value = x / scale
            return f"{value:.1f} {name}" if abs(value) < 100 else f"{value:,.0f} {name}"
    return f"{x:,.0f}" if float(x).is_integer() else sig(x)


def gb(n: float | int | None, decimals: int = 1) -> str:
    """Bytes in GB (10^9): 156_900_000_000 -> '156.9 GB'."""
    return "n/a" if n is None else f"{_clean(round(n / GB, decimals)):,.{decimals}f} GB"


def tflops(flop_per_sec: float | None) -> str:
    """FLOP/s in TFLOP/s with three significant figures: 1.03e11 -> '0.103 TFLOP/s'."""
    return "n/a" if flop_per_sec is None else f"{sig(flop_per_sec / 1e12)} TFLOP/s"


def percent(fraction: float | None, decimals: int = 1, signed: bool = False) -> str:
    """0.123 -> '12.3%'; a value that rounds to zero is '0.0%', never '-0.0%'."""
    if fraction is None:
        return "n/a"
    value = _clean(round(100 * fraction, decimals))
    return f"{value:+.{decimals}f}%" if signed and value != 0 else f"{value:.{decimals}f}%"


def money(x: float | None, currency: str) -> str:
    """A cost with its currency code: 'USD 2,150,000', 'EUR 12.50'."""
    if x is None:
        return "n/a"
    return f"{currency} {x:,.0f}" if abs(x) >= 100 else f"{currency} {x:,.2f}"


def duration(seconds: float | None) -> str:
    """Seconds in the unit that reads them, three significant figures: 0.0168 -> '16.8 ms',
    1.196 -> '1.20 s', 8e-06 -> '8.00 µs'."""
    if seconds is None:
        return "n/a"
    scale, unit = next(((s, u) for s, u in ((1, "s"), (1e-3, "ms")) if abs(seconds) >= s), (1e-6, "µs"))
    return f"{sig(seconds / scale)} {unit}"


def setting(name: str, value: object) -> str:
    """A request default as "Defaults used" shows it: bytes with their unit (overhead_bytes
    1073741824 -> '1.07 GB'), seconds in the unit that reads (8e-06 -> '8 µs'), a float to
    three figures (0.9, not 0.900); anything else as it is."""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int | float):
        if name.endswith("bytes"):
            return f"{short(value / GB)} GB"
        if name.endswith("_s"):
            for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
                if abs(value) >= scale or unit == "µs":
                    return f"{short(value / scale)} {unit}"
        return short(value) if isinstance(value, float) else str(value)
    return str(value)


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds, three significant figures, no unit (a table's column names it):
    0.0168 -> '16.8'."""
    return "n/a" if seconds is None else sig(seconds * 1e3)


def per(x: float | None, scale: float) -> str:
    """x over a unit's scale (bytes/s over 1e9 for GB/s), three significant figures, no unit."""
    return "n/a" if x is None else sig(x / scale)


_SI = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
_IEC = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(n: int | float, *, binary: bool) -> str:
    """A byte count with three significant figures: '2.42 GB' (10^9), or '2.25 GiB' (2^30)."""
    base, names = (1024, _IEC) if binary else (1000, _SI)
    value = float(n)
    i = 0
    while abs(value) >= base and i < len(names) - 1:
        value /= base
        i += 1
    if i == 0:
        return f"{int(n)} B"
    return f"{value:.3g} {names[i]}" if value < 100 else f"{value:.0f} {names[i]}"


FILTERS = {"sig": sig, "amount": amount, "gb": gb, "tflops": tflops, "percent": percent, "money": money,
           "duration": duration}


def _scaled(x: float | None, units: tuple[tuple[float, str], ...]) -> str:
    """x in the largest unit it reaches (the last: the smallest), three significant figures."""
    if x is None:
        return "n/a"
    scale, unit = next(((s, u) for s, u in units if abs(x) >= s), units[-1])
    return f"{sig(x / scale)} {unit}"


def kwh(x: float | None) -> str:
    """Energy given in kWh, in MWh from 1,000 (as model cards write it): 81_100.8 -> '81.1 MWh'."""
    return _scaled(x, ((1e3, "MWh"), (1, "kWh"), (1e-3, "Wh")))


def co2e(kg: float | None) -> str:
    """CO2-equivalent given in kg: 31_223.8 -> '31.2 t', 2.96 -> '2.96 kg', 0.096 -> '96.0 g'."""
    return _scaled(kg, ((1e3, "t"), (1, "kg"), (1e-3, "g")))


def joules(x: float | None) -> str:
    """Energy given in J: 3.53e6 -> '3.53 MJ', 0.841 -> '0.841 J'."""
    return _scaled(x, ((1e9, "GJ"), (1e6, "MJ"), (1e3, "kJ"), (1, "J")))


FILTERS.update(kwh=kwh, co2e=co2e, joules=joules)
