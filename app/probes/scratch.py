"""The server's scratch disk: where the data_loader and checkpoint probes write their files (a
fresh tempfile.TemporaryDirectory under tempfile.gettempdir(), i.e. TMPDIR or /tmp), and the
check admission makes that the file fits there. A job never names a path. Torch-free."""

import shutil
import tempfile

from app.accounting.errors import InvalidInput
from app.numbers import human_bytes

SPARE_BYTES = 256 * 2**20
"""Left free on the scratch disk beyond the job's file, so a probe never fills it for the host."""


def directory() -> str:
    return tempfile.gettempdir()


def free_bytes() -> int:
    return shutil.disk_usage(directory()).free


def check(need_bytes: int, field: str, free: int | None = None) -> None:
    """InvalidInput naming `field` when a file of need_bytes (plus SPARE_BYTES) does not fit in
    `free` bytes (default: what the scratch directory has free now)."""
    free = free_bytes() if free is None else free
    if need_bytes + SPARE_BYTES > free:
        raise InvalidInput(field, f"the job writes a file of about {human_bytes(need_bytes, binary=True)} to "
                                  f"{directory()}, which has {human_bytes(free, binary=True)} free (keeping "
                                  f"{human_bytes(SPARE_BYTES, binary=True)} spare)")
