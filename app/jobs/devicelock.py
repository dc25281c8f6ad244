"""One job's child per device on this machine, enforced by the kernel: a file lock per device.

A lease in the database says which job may use a device; a lock here says which process does.
They differ when a dispatcher stalls: paused past the stale bound, it loses its lease to another
dispatcher while its child may still run, or it may come back and start a child for a claim it
has lost. So a dispatcher takes its job's device locks before it starts the child, the child
inherits them (Popen's pass_fds) and the dispatcher lets its own copies go: the locks then live
exactly as long as the child, and no second child can start on a device while the first runs,
whatever any dispatcher's timing. (A child whose dispatcher falls silent also stops itself,
app/bench/child.py, so the wait is short.)

flock(2) on files in the temporary directory, named by the job database's identity (two
databases on one box are two Tallys, and not each other's business), the host and the unit. A
lease "box:*" (a job on the box's default device) excludes, and is excluded by, every other lease
of its box, as in app/jobs/leases.py: a box's "*" takes the box's file exclusively, a unit takes it
shared and its own file exclusively.
"""

import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
from pathlib import Path

from app.jobs import sweep

LOCK_DIR = Path(tempfile.gettempdir()) / "tally-devices"
POLL_S = 0.05


def _name(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def _wants(identity: str, keys: list[str]) -> list[tuple[Path, int]]:
    """(lock file, flock mode) for every lock the leases `keys` need, in one fixed order."""
    wants: dict[Path, int] = {}
    for key in keys:
        host, _, unit = key.rpartition(":")
        box = LOCK_DIR / f"{_name(identity, host)}.box"
        if unit == "*":
            wants[box] = fcntl.LOCK_EX
        else:
            wants.setdefault(box, fcntl.LOCK_SH)
            wants[LOCK_DIR / f"{_name(identity, host, unit)}.unit"] = fcntl.LOCK_EX
    return sorted(wants.items())


def _try(wants: list[tuple[Path, int]]) -> list[int] | None:
    """All the locks at once, or none (those taken let go): their descriptors."""
    taken: list[int] = []
    for path, mode in wants:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            release(taken)
            return None
        taken.append(fd)
    return taken


def acquire(identity: str, keys: list[str], *, timeout_s: float) -> list[int] | None:
    """Lock the devices of the leases `keys` ("box:gpu0", "box:cpu", "box:*"), waiting up to
    timeout_s while another job's process holds one: the descriptors (to pass to the child), or
    None when they stayed held."""
    LOCK_DIR.mkdir(mode=0o1777, exist_ok=True)
    wants = _wants(identity, keys)
    deadline = time.monotonic() + timeout_s
    while (fds := _try(wants)) is None:
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)
    return fds


def take(identity: str, keys: list[str], *, wait_s: float, grace_s: float) -> tuple[list[int] | None, list[int]]:
    """acquire(), waiting wait_s for another job's process to let go (it stops itself when its
    dispatcher falls silent); then SIGKILL to any still holding the devices, and grace_s more.
    (The descriptors or None, the processes ended.)"""
    if (fds := acquire(identity, keys, timeout_s=wait_s)) is not None:
        return fds, []
    ended = sweep.kill_on_devices([mark(identity, key) for key in keys])
    return acquire(identity, keys, timeout_s=grace_s), ended


def mark(identity: str, key: str) -> str:
    """A lease as a child's DEVICES_VAR names it (app/jobs/sweep.py): scoped by its database."""
    return f"{identity}/{key}"


def release(fds: list[int]) -> None:
    """Close this process's descriptors: a lock is let go once no process holds one of its own."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
