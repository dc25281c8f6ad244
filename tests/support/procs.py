"""The process table, read from /proc: who is whose child, and what each runs."""

import os


def _stat(pid: int) -> list[str] | None:
    """stat(5)'s fields after the command name (state first, then ppid, pgrp, session ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def cmdline(pid: int) -> bytes:
    """Its argv, NUL-separated; b"" once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def children(pid: int, running: bytes = b"") -> list[int]:
    """The live (not zombie) children of `pid` whose command line contains `running`."""
    found = []
    for child in pids():
        fields = _stat(child)
        if fields and fields[0] != "Z" and int(fields[1]) == pid and running in cmdline(child):
            found.append(child)
    return found
