"""Byte and time units. GB is 10^9 bytes, GiB is 2^30 bytes; both are reported."""

GB = 10**9
GIB = 2**30
SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86_400

_SI = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
_IEC = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

# The largest byte count a tensor or buffer can have: storage sizes are int64 in
# PyTorch and CUDA, and JSON consumers lose integer precision beyond this anyway.
MAX_BYTES = 2**63 - 1


def human_bytes(n: int | float, *, binary: bool) -> str:
    """Format a byte count with three significant figures: '2.42 GB' or '2.25 GiB'."""
    base, names = (1024, _IEC) if binary else (1000, _SI)
    value = float(n)
    i = 0
    while abs(value) >= base and i < len(names) - 1:
        value /= base
        i += 1
    if i == 0:
        return f"{int(n)} B"
    return f"{value:.3g} {names[i]}" if value < 100 else f"{value:.0f} {names[i]}"
