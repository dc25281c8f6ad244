"""One child interpreter running one job (`python -m app.bench.child`): its pipes, the
threads draining them, how to stop it, and how its protocol lines are read. The protocol
itself is written down in app/bench/child.py."""

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Any

from app.jobs.job import Job

STDERR_TAIL_BYTES = 8192
# A longer line is not one of ours; the cap keeps a runaway child from filling memory.
MAX_LINE_BYTES = 16 << 20
CHILD_STATUSES = ("failed", "oom")


def error(kind: str, message: str, **detail: Any) -> dict:
    # The shape app.bench.child uses for its own errors, so clients read one kind of error.
    return {"type": kind, "message": message, "detail": detail}


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def parse_message(line: bytes) -> dict:
    """One protocol line as a dict; ValueError saying why when it is not one."""
    if not line.endswith(b"\n"):
        raise ValueError("an unterminated line")
    try:
        message = json.loads(line, parse_constant=_no_constants)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise ValueError(f"not JSON ({exc})") from None
    kind = message.get("type") if isinstance(message, dict) else None
    valid = {
        "progress": lambda m: isinstance(m.get("done"), int) and isinstance(m.get("total"), int)
        and isinstance(m.get("message", ""), str),
        "result": lambda m: isinstance(m.get("result"), dict),
        "error": lambda m: m.get("status") in CHILD_STATUSES and isinstance(m.get("error"), dict),
    }
    if kind not in valid or not valid[kind](message):
        raise ValueError("not a progress, result or error message")
    return message


class Child:
    """One child interpreter running one job: its pipes, the threads draining them, how to stop it."""

    def __init__(self, argv: list[str], env: dict[str, str], job: Job) -> None:
        # A new session: a Ctrl-C meant for the server's terminal does not reach the child.
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        self.started = time.monotonic()
        self.lines: queue.Queue[bytes | None] = queue.Queue()  # None: end of stdout
        self._tail = bytearray()
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for thread in self._threads:
            thread.start()
        request = {"job_id": job.id, "probe": job.probe, "params": job.params}
        try:
            # stdin stays open while the job runs: its end-of-file tells the child we died.
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died at once; its exit status says why

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_stdout(self) -> None:
        for line in iter(lambda: self.proc.stdout.readline(MAX_LINE_BYTES), b""):
            self.lines.put(line)
        self.lines.put(None)

    def _read_stderr(self) -> None:
        fd = self.proc.stderr.fileno()
        while chunk := os.read(fd, 65536):
            self._tail += chunk
            del self._tail[:-STDERR_TAIL_BYTES]

    def stderr_tail(self) -> str:
        return bytes(self._tail).decode("utf-8", "replace")

    def _signal(self, sig: signal.Signals) -> None:
        # The whole process group, so anything the probe started goes too. Only while the child
        # is unreaped: after that its pid, and so the group id, may belong to someone else.
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stop(self, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after grace_s; returns once the child is reaped."""
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait()

    def close(self, grace_s: float) -> None:
        """Reap the child (stopping it when it outlives grace_s) and release its pipes."""
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.stop(grace_s)
        # A grandchild may hold the pipes open; the readers are daemons, so do not wait long. A pipe
        # still being read stays open: closing it could give its fd number to another file under the reader.
        for thread in self._threads:
            thread.join(1.0)
        readers = zip((self.proc.stdout, self.proc.stderr), self._threads, strict=True)
        for pipe in [self.proc.stdin] + [pipe for pipe, thread in readers if not thread.is_alive()]:
            with contextlib.suppress(OSError):  # stdin's flush meets a closed pipe
                pipe.close()
