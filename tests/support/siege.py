"""Connections that cost a server without asking anything of it: idle ones and dripping bodies."""

import socket
import threading
import time
from urllib.parse import urlsplit


class Siege:
    """`idle` connections that send nothing, each opened again as the server drops it, and `slow`
    ones sending a body a byte a second, until stopped."""

    def __init__(self, url: str, idle: int, slow: int) -> None:
        self.url, self.stop = url, threading.Event()
        self.open = 0
        self.threads = [threading.Thread(target=self._idle, daemon=True) for _ in range(idle)]
        self.threads += [threading.Thread(target=self._slow, daemon=True) for _ in range(slow)]
        for thread in self.threads:
            thread.start()

    def _connect(self) -> socket.socket:
        parts = urlsplit(self.url)
        return socket.create_connection((parts.hostname, parts.port), timeout=60)

    def _idle(self) -> None:
        while not self.stop.is_set():
            try:
                with self._connect() as sock:
                    self.open += 1
                    try:
                        sock.recv(1)  # until the server drops it
                    finally:
                        self.open -= 1
            except OSError:
                time.sleep(0.05)

    def _slow(self) -> None:
        head = (b"POST /api/v1/flops/matmul HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n")
        while not self.stop.is_set():
            try:
                with self._connect() as sock:
                    sock.sendall(head)
                    while not self.stop.is_set():
                        sock.sendall(b" ")
                        time.sleep(1)
            except OSError:
                time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(15)
