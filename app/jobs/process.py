"""One child interpreter running one job (`python -m app.bench.child`): its pipes, the
threads draining them, how to stop it and every process it started (app/jobs/sweep.py), and
how its protocol lines are read. The protocol itself is written down in app/bench/child.py."""

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Any

from app.jobs import sweep
from app.jobs.job import Job

STDERR_TAIL_BYTES = 8192
# A longer line is not one of ours; the cap keeps a runaway child from filling memory.
MAX_LINE_BYTES = 16 << 20
CHILD_STATUSES = ("failed", "oom")
# Seconds between looks at whether the child and its processes have gone, while waiting for them.
SWEEP_POLL_S = 0.05


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
        "done": lambda m: True,  # a box of a job on several boxes ended its part without rank 0's result
    }
    if kind not in valid or not valid[kind](message):
        raise ValueError("not a progress, result, error or done message")
    return message


class Child:
    """One child interpreter running one job: its pipes, the threads draining them, how to stop it."""

    def __init__(self, argv: list[str], env: dict[str, str], job: Job, pass_fds: list[int] = ()) -> None:
        # Every process the child starts inherits the token, whatever group it moves to.
        self.token = sweep.new_token()
        env = {**env, sweep.TOKEN_VAR: self.token}
        self._lost = False  # reaped by someone else: its pid, and so its group's id, may be reused
        # A new session: a Ctrl-C meant for the server's terminal does not reach the child; its
        # group is the job's ranks too.
        # pass_fds: its device locks (app/jobs/devicelock.py), held for as long as it lives.
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True,
                                     pass_fds=tuple(pass_fds))
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

    def keepalive(self) -> None:
        """Tell the child its parent is alive (app/bench/child.py): a newline on its stdin."""
        with contextlib.suppress(OSError):  # it has exited, or closed stdin: its exit says the rest
            self.proc.stdin.write(b"\n")
            self.proc.stdin.flush()

    def stderr_tail(self) -> str:
        return bytes(self._tail).decode("utf-8", "replace")

    def exited(self) -> bool:
        """Whether the child has exited, without reaping it: unreaped, its pid and so its process
        group's id stay the job's, and the group can still be signalled safely."""
        if self.proc.returncode is not None or self._lost:
            return True
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            self._lost = True
            return True

    def _group(self) -> int | None:
        return None if self.proc.returncode is not None or self._lost else self.proc.pid

    def _signal(self, sig: signal.Signals) -> None:
        # The whole process group and every process holding the job's token (app/jobs/sweep.py), so
        # every rank the probe started goes too, even one whose parent has died.
        sweep.signal_all(sig, group=self._group(), token=self.token)

    def _wait_all(self, grace_s: float) -> bool:
        """Wait until the child has exited and none of its processes runs, at most grace_s seconds;
        whether they have all gone."""
        deadline = time.monotonic() + grace_s
        while not (self.exited() and not sweep.members(group=self._group(), token=self.token)):
            if time.monotonic() >= deadline:
                return False
            time.sleep(SWEEP_POLL_S)
        return True

    def stop(self, grace_s: float) -> None:
        """SIGTERM to the child and every process it started, then SIGKILL to any left after
        grace_s; returns once the child is reaped (a rank stuck in the kernel may outlive that)."""
        self._signal(signal.SIGTERM)
        if not self._wait_all(grace_s):
            self._signal(signal.SIGKILL)
            self._wait_all(grace_s)
        self._reap()

    def _reap(self) -> None:
        self.proc.wait()  # one reaped elsewhere (SIGCHLD ignored) gets returncode 0 from Popen

    def close(self, grace_s: float) -> None:
        """Reap the child (stopping it when it outlives grace_s), ending first any process it
        left running (a rank of a child that crashed, or that reported and left it behind), and
        release its pipes."""
        deadline = time.monotonic() + grace_s
        while not self.exited() and time.monotonic() < deadline:
            time.sleep(SWEEP_POLL_S)
        if self.exited() and not sweep.members(group=self._group(), token=self.token):
            self._reap()
        else:
            self.stop(grace_s)
        # A grandchild may hold the pipes open; the readers are daemons, so do not wait long. A pipe
        # still being read stays open: closing it could give its fd number to another file under the reader.
        for thread in self._threads:
            thread.join(1.0)
        readers = zip((self.proc.stdout, self.proc.stderr), self._threads, strict=True)
        for pipe in [self.proc.stdin] + [pipe for pipe, thread in readers if not thread.is_alive()]:
            with contextlib.suppress(OSError):  # stdin's flush meets a closed pipe
                pipe.close()
