"""uvicorn's HTTP/1.1 protocol with a deadline for the request line and headers, and a cap on
the connections open at once.

uvicorn times a connection out only while it idles between requests (its keep-alive
timeout), and each byte received restarts that wait; a client that opens a connection and
sends its header block slowly, or never finishes it, holds the connection forever. Here
every request's header block must be complete within `header_timeout_s` of the connection
opening or of the previous response; otherwise the connection is closed. The body's own
deadline is the app's (app/api/errors.py BodyLimit), so it holds under any server.

Open connections are capped at `max_connections` (TALLY_LIMIT_CONNECTIONS): one beyond it is
closed as it opens, before it costs a parser or a timer. The requests answered at once are the
app's to limit (app/api/limits.py), counted once a request is whole, so connections that send
nothing take no request's place: uvicorn's own limit_concurrency, which counted them, is unset.
"""

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


def with_limits(header_timeout_s: float, max_connections: int) -> type[H11Protocol]:
    """An H11Protocol class closing connections whose headers take over `header_timeout_s`, and
    any beyond `max_connections` open at once."""

    class HeaderDeadlineProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _cycle_seen: Any = None

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:  # this one included
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not self._cycle_seen:  # a complete header block started a request
                self._cycle_seen = self.cycle
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers, on a kept-alive connection

    return HeaderDeadlineProtocol
