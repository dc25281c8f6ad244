"""Every process a job's child started (its ranks), found so that ending the job ends them all.

The child leads a process group of its own (Child starts it in a new session), and the ranks a
probe starts with torch.multiprocessing stay in it, so os.killpg on the child's pid reaches them.
Not all do: torch.distributed.run's agent starts each worker of a script entry point in a new
session (start_new_session=True in torch/distributed/elastic/.../subprocess_handler.py). The agent
kills those itself on SIGTERM, but not when it is SIGKILLed, crashes, or outlives the child. So
each child also carries a token in its environment (TOKEN_VAR), which every process it starts
inherits whatever group it moves to, and a job's processes are its group's and every process
whose /proc/<pid>/environ holds its token. (Linux; elsewhere the group alone. A rank that
clears its environment and leaves the group escapes: nothing Tally starts does.)

The group id is used only while the child is unreaped (running, or a zombie nobody has
waited for): until then its pid, and so its group's id, cannot be given to another process.
"""

import contextlib
import os
import secrets
import signal
from pathlib import Path

TOKEN_VAR = "TALLY_JOB_TOKEN"
PROC = Path("/proc")


def new_token() -> str:
    return secrets.token_hex(16)  # 128 random bits: no other process carries it by chance


def _stat(pid: str) -> tuple[bytes, int] | None:
    """(state, process group) from /proc/<pid>/stat; None once the process is gone."""
    try:
        stat = (PROC / pid / "stat").read_bytes()
    except OSError:
        return None
    # After the command name in parentheses (which may hold spaces): state, ppid, pgrp, ...
    fields = stat.rsplit(b")", 1)[1].split()
    return fields[0], int(fields[2])


def _carries(pid: str, needle: bytes) -> bool:
    try:  # another user's process refuses (PermissionError): it is none of the job's
        return needle in (PROC / pid / "environ").read_bytes().split(b"\0")
    except OSError:
        return False


def members(*, group: int | None, token: str) -> list[int]:
    """The job's processes still running (zombies are over): those in process group `group`
    (None: skip the group test) and those whose environment holds `token`."""
    if not PROC.is_dir():
        return []
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in os.scandir(PROC):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        seen = _stat(entry.name)
        if seen is None or seen[0] in (b"Z", b"X"):
            continue
        if (group is not None and seen[1] == group) or _carries(entry.name, needle):
            found.append(int(entry.name))
    return found


def signal_all(sig: signal.Signals, *, group: int | None, token: str) -> int:
    """Send `sig` to the job's group (when given: its leader is unreaped) and to every process
    carrying `token`; how many processes it reached outside the group's killpg."""
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
    sent = 0
    for pid in members(group=None, token=token):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            sent += 1
    return sent
