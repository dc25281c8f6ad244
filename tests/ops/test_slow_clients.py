"""Slow and idle clients cannot deny service: a real `tally serve` on loopback, with short limits.
A connection that sends nothing, or a body a byte at a time, holds no request's place (app/api/
limits.py counts requests once their bodies are in) and is dropped at its deadline; the open
connections are capped (app/cli/protocol.py); a header block too large gets 431 however it arrives."""

import socket
import sys
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.live import compute_workers, gauge, serve, stopped
from tests.support.siege import Siege
from tests.support.waiting import wait_for

LIMIT = 6
CONNECTIONS = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slow")
    env = {"TALLY_DATABASE_PATH": str(tmp / "tally.db"), "TALLY_EMBEDDED_WORKER": "false",
           "TALLY_HEADER_TIMEOUT_S": "1", "TALLY_BODY_TIMEOUT_S": "1", "TALLY_LIMIT_CONCURRENCY": str(LIMIT),
           "TALLY_LIMIT_CONNECTIONS": str(CONNECTIONS), "TALLY_COMPUTE_WORKERS": "1"}
    with serve([sys.executable, "-m", "app"], env, tmp / "server.log") as live:
        wait_for(lambda: compute_workers(live), what="the compute worker to start", context=live.log)
        yield live


def connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10, source_address=(source, 0))


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends, and how long it took to close the connection (a reset, which
    a request sent to a connection already closed draws, is a close)."""
    started, received = time.monotonic(), b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
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


def test_idle_and_dripping_connections_take_no_request_place(server):
    """260 connections that send nothing and 60 that send a body a byte a second, far more than the
    6 requests answered at once: a normal client is answered every time."""
    siege = Siege(server.url, idle=260, slow=60)
    try:
        wait_for(lambda: siege.open >= 200, what="the idle connections to be open")
        with httpx.Client(timeout=30) as client:
            statuses = [client.post(f"{server.url}/api/v1/flops/matmul", json={"m": 8, "k": 8, "n": 8}).status_code
                        for _ in range(40)]
    finally:
        siege.close()
    assert statuses == [200] * 40


def test_whole_requests_beyond_the_limit_get_503_and_health_still_answers(server):
    """LIMIT heavy requests held in flight (their worker stopped), each from an address of its own:
    one more gets 503 with Retry-After; /healthz and /metrics are never refused."""
    held = []
    (worker,) = compute_workers(server)
    with stopped([worker]):
        for i in range(LIMIT):
            client = httpx.Client(transport=httpx.HTTPTransport(local_address=f"127.0.0.{i + 2}"), timeout=60)
            held.append(threading.Thread(target=client.post, args=(f"{server.url}/api/v1/fit",),
                                         kwargs={"json": {"model": "llama3-8b", "gpu": "rtx-4090"}}))
            held[-1].start()
        wait_for(lambda: gauge(server, "tally_compute_in_flight") == LIMIT, what="the fits to be in flight")
        refused = httpx.post(f"{server.url}/api/v1/flops/matmul", json={"m": 8, "k": 8, "n": 8}, timeout=30)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert refused.json()["detail"][0]["field"] == "server" and "TALLY_LIMIT_CONCURRENCY" in refused.text
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
    for thread in held:
        thread.join(60)
    assert httpx.post(f"{server.url}/api/v1/flops/matmul", json={"m": 8, "k": 8, "n": 8}, timeout=30).status_code == 200


def test_connections_beyond_the_cap_are_closed_as_they_open(server):
    opened = [connect(server.url) for _ in range(CONNECTIONS)]
    try:
        with connect(server.url) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            received, _ = read_until_closed(sock)
        assert received == b""  # closed unanswered
    finally:
        for sock in opened:
            sock.close()


@pytest.mark.parametrize("kilobytes", [20, 60, 100])
def test_a_header_block_too_large_gets_431_even_in_one_piece(server, kilobytes):
    with connect(server.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (kilobytes * 1000)
                     + b"\r\nConnection: close\r\n\r\n")
        received, _ = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 431") and b"TALLY_MAX_HEADER_BYTES" in received, received[:200]
