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

A child also carries the device leases its job holds (DEVICES_VAR: ",<db>/box:gpu0,<db>/box:gpu1,",
each scoped by its job database's identity), so a
dispatcher about to start a job can see whether any process of another job still runs on those
devices (`on_devices`): a child whose dispatcher was paused past the stale bound, say, which
stops itself for want of keep-alives (app/bench/child.py), or holds its device lock
(app/jobs/devicelock.py) past the wait, and is then ended (`kill_on_devices`).
"""

import contextlib
import os
import secrets
import signal
from pathlib import Path

TOKEN_VAR = "TALLY_JOB_TOKEN"
DEVICES_VAR = "TALLY_DEVICES"
PROC = Path("/proc")


def devices_value(keys: list[str]) -> str:
    """DEVICES_VAR's value for a child holding the leases `keys` ("box:gpu0", "box:cpu", "box:*")."""
    return "," + ",".join(keys) + ","


def _overlap(ours: list[str], theirs: list[str]) -> bool:
    """Whether two jobs' leases share a device: a unit in common on one host, or "*" (any device
    of its host, app/jobs/leases.py) on a host of the other's."""
    for mine in ours:
        host, _, unit = mine.rpartition(":")
        for other in theirs:
            other_host, _, other_unit = other.rpartition(":")
            if host == other_host and (unit == other_unit or "*" in (unit, other_unit)):
                return True
    return False


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


def on_devices(keys: list[str], *, token: str | None = None) -> list[int]:
    """Running processes of any job but `token`'s whose leases share a device with `keys`."""
    if not PROC.is_dir():
        return []
    prefix, own = f"{DEVICES_VAR}=".encode(), None if token is None else f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in os.scandir(PROC):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:  # another user's process refuses (PermissionError): it is none of Tally's
            environ = (PROC / entry.name / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        held = next((item[len(prefix):] for item in environ if item.startswith(prefix)), None)
        if held is None or (own is not None and own in environ):
            continue
        seen = _stat(entry.name)
        if seen is None or seen[0] in (b"Z", b"X"):
            continue
        if _overlap(keys, [k for k in held.decode(errors="replace").split(",") if k]):
            found.append(int(entry.name))
    return found


def kill_on_devices(marks: list[str]) -> list[int]:
    """SIGKILL every process of another job on the devices `marks` names; those it found."""
    found = on_devices(marks)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
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
