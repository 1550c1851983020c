"""The uvicorn server ``hqa serve`` runs: uvicorn's own h11 protocol plus a header-read timeout.

uvicorn bounds the size of request headers and the idle time between requests, but not the time a client may take
to send its headers (slowloris).  :class:`HeaderTimeoutH11` closes a connection whose request line and headers are
not complete within ``header_timeout`` seconds of it opening (or of the last response on a kept-alive connection);
the body is then bounded by :class:`hqa.serve.guards.BodyGuard`.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol; a connection whose request headers are not complete in ``header_timeout`` s closes."""

    header_timeout: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm_header_timer()

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        if self._waiting_for_headers() and not self.transport.is_closing():
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.logger.info("closing a connection whose request headers took over %gs", self.header_timeout)
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if not self._waiting_for_headers():  # a request's headers are in: the app and the body bounds take over
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if getattr(self, "_header_timer", None) is None:
            self._arm_header_timer()  # the next request on this connection gets the same time for its headers

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)


def server_config(app: Any, *, header_timeout: float = 10.0, **kwargs: Any):
    """A ``uvicorn.Config`` for ``app`` using :class:`HeaderTimeoutH11` with ``header_timeout`` seconds."""
    import uvicorn

    protocol = type("HeaderTimeoutH11", (HeaderTimeoutH11,), {"header_timeout": float(header_timeout)})
    kwargs.setdefault("access_log", False)
    kwargs.setdefault("log_level", "warning")
    return uvicorn.Config(app, http=protocol, **kwargs)


def run(app: Any, sock: socket.socket, *, header_timeout: float = 10.0) -> None:
    """Serve ``app`` on the listening ``sock`` until interrupted."""
    import uvicorn

    uvicorn.Server(server_config(app, header_timeout=header_timeout)).run(sockets=[sock])


__all__ = ["HeaderTimeoutH11", "run", "server_config"]
