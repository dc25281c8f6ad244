"""Slow clients are dropped: a real `tally serve` on loopback, with short limits."""

import socket
import sys
import time
from urllib.parse import urlsplit

import pytest

from tests.support.live import serve


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slow")
    env = {"TALLY_DATABASE_PATH": str(tmp / "tally.db"), "TALLY_EMBEDDED_WORKER": "false",
           "TALLY_HEADER_TIMEOUT_S": "1", "TALLY_BODY_TIMEOUT_S": "1", "TALLY_LIMIT_CONCURRENCY": "6"}
    with serve([sys.executable, "-m", "app"], env, tmp / "server.log") as live:
        yield live


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    return sock


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends, and how long it took to close the connection."""
    started, received = time.monotonic(), b""
    while chunk := sock.recv(65536):
        received += chunk
    return received, time.monotonic() - started


def test_an_incomplete_header_block_is_dropped(server):
    with connect(server.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never the blank line
        received, waited = read_until_closed(sock)
    assert waited < 5 and received == b""


def test_a_stalled_body_gets_408_and_is_dropped(server):
    with connect(server.url) as sock:
        sock.sendall(b"POST /api/v1/flops/matmul HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"m\": 1,")
        received, waited = read_until_closed(sock)
    assert waited < 5
    assert received.startswith(b"HTTP/1.1 408") and b"TALLY_BODY_TIMEOUT_S" in received


def test_connections_beyond_the_limit_get_503(server):
    idle = [connect(server.url) for _ in range(6)]
    try:
        with connect(server.url) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            received, _ = read_until_closed(sock)
        assert received.startswith(b"HTTP/1.1 503"), received[:200]
    finally:
        for sock in idle:
            sock.close()
