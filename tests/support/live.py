"""A real Tally process on loopback, for the tests that need the process itself: its
start command, its start-up checks, its logs, its signals."""

import contextlib
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support import ROOT, procs
from tests.support.waiting import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Live:
    url: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()


@contextmanager
def serve(argv: list[str], env: dict[str, str], log_path: Path, wait_s: float = 60) -> Iterator[Live]:
    """Run `argv` with os.environ plus `env` (TALLY_PORT set to a free port unless given)
    until /healthz answers; SIGTERM it at the end. stdout and stderr go to `log_path`."""
    env = {**os.environ, "TALLY_HOST": "127.0.0.1", "TALLY_PORT": str(free_port()), **env}
    url = f"http://127.0.0.1:{env['TALLY_PORT']}"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    live = Live(url, process, log_path)

    def healthy() -> bool:
        assert process.poll() is None, f"exited {process.returncode}:\n{live.log()}"
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, timeout=wait_s, what=f"an answer from {url}/healthz", every=0.1, context=live.log)
        yield live
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def compute_workers(live: Live) -> list[int]:
    """The server's compute workers (app/api/compute.py): the children of its fork server."""
    return [w for s in procs.children(live.process.pid, b"forkserver") for w in procs.children(s)]


def gauge(live: Live, name: str) -> float:
    """A metric's value on /metrics (-1 where it is not there)."""
    text = httpx.get(f"{live.url}/metrics", timeout=30).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else -1


@contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    """The processes held stopped (SIGSTOP) for the block, continued after it."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
