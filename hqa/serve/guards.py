"""What ``hqa serve`` checks before a request's work: where it may bind (:func:`check_bind`), the API key and the
body's framing, size and pace (:class:`BodyGuard`), and the program options a request may set
(:func:`apply_options`)."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from hqa.app import with_options
from hqa.errors import MAX_QUESTION_CHARS, ConfigError, HQAError

#: the largest request body read (bytes); a 1000-character question with options fits many times over, even as
#: JSON ``\\uXXXX`` escapes (a value chosen here, not taken from a paper)
MAX_BODY_BYTES = 64 * 1024
#: seconds a client has to send its request headers, and then each piece of its body; past that the connection is
#: closed (headers: :mod:`hqa.serve.server`) or answered 408 (body: :class:`BodyGuard`) — a value chosen here
READ_TIMEOUT = 10.0
#: seconds a client has to send its whole request body, however it paces the pieces (a value chosen here: a 64 KiB
#: body takes milliseconds on any working link); past it the answer is 408
BODY_TIMEOUT = 30.0


@dataclass
class ServeOptions:
    workers: int = 2  # questions answered at once
    queue: int = 16  # more requests allowed to wait for a worker; beyond that 503
    timeout: float = 300.0  # seconds per request before 504
    api_key: str | None = None
    max_question_chars: int = MAX_QUESTION_CHARS
    max_body_bytes: int = MAX_BODY_BYTES
    read_timeout: float | None = READ_TIMEOUT  # seconds for a request's headers, and for each piece of its body
    body_timeout: float | None = BODY_TIMEOUT  # seconds for a request's whole body


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Binding beyond the loopback interface is refused without an API key."""
    if not is_loopback(host) and not api_key:
        raise ConfigError(f"binding to {host} exposes the server beyond this machine: set an API key in "
                          "$HQA_API_KEY (clients then send 'Authorization: Bearer <key>') or bind to 127.0.0.1")


def key_matches(header: str, api_key: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <api_key>`` (constant-time comparison)."""
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key.encode())


def one_line(text: Any, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), at most ``limit`` characters: how an error is answered."""
    text = " ".join(str(text).split())
    return text[:limit]


def apply_options(program: Any, options: dict[str, Any] | None) -> tuple[Any, str | None]:
    """The per-request option check: (the program with the request's options, None), or (None, the 422 message)
    for options the served program does not take or values out of their range."""
    try:
        return with_options(program, options), None
    except HQAError as exc:
        return None, one_line(f"options: {exc}", 500)


async def _refuse(send, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           (b"connection", b"close")] + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BodyGuard:
    """ASGI middleware in front of every ``/v1/`` route: the API key and the declared framing, before any body byte.

    401 without the key (the body is never read); 413 for a declared ``Content-Length`` past ``max_body_bytes``; 400
    for both ``Content-Length`` and ``Transfer-Encoding`` (the framing a smuggling or guard bypass relies on: RFC 9112
    section 6.3 lets a server reject it and requires the connection closed after); 408 when a piece of the body takes
    longer than ``read_timeout``, or the whole body longer than ``body_timeout`` (a body trickled in small pieces).
    Every refusal closes the connection.  The bytes actually received are counted by
    FastAPI's ``max_body_size`` on each ``/v1/`` POST route, whatever the framing.
    """

    def __init__(self, app, api_key: str | None, max_body_bytes: int, prefix: str = "/v1/",
                 read_timeout: float | None = None, body_timeout: float | None = None):
        self.app, self.api_key, self.cap, self.prefix = app, api_key, max_body_bytes, prefix
        self.read_timeout, self.body_timeout = read_timeout, body_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refusal = self._refusal(headers)
        if refusal is not None:
            return await _refuse(send, *refusal)
        if self.read_timeout is None and self.body_timeout is None:
            return await self.app(scope, receive, send)
        return await self.app(scope, self._timed(receive), send)

    def _refusal(self, headers: dict[str, str]) -> tuple[int, str] | tuple[int, str, dict[str, str]] | None:
        """What to answer from the headers alone (status, message[, headers]), or None to let the request in."""
        if self.api_key and not key_matches(headers.get("authorization", ""), self.api_key):
            return 401, "missing or wrong API key: send 'Authorization: Bearer <key>'", {"www-authenticate": "Bearer"}
        length = headers.get("content-length")
        if length is not None and "transfer-encoding" in headers:
            return 400, "a request may not declare both Content-Length and Transfer-Encoding"
        if length is not None:
            if not length.strip().isdigit():
                return 400, f"Content-Length {length[:40]!r} is not a byte count"
            if int(length) > self.cap:
                return 413, f"request body is larger than {self.cap} bytes"
        return None

    def _timed(self, receive):
        """``receive`` with each body piece bounded by ``read_timeout`` and the whole body by ``body_timeout``,
        counted from the first read (408 past either)."""
        body_done = False
        deadline: float | None = None

        async def timed_receive():
            nonlocal body_done, deadline
            if body_done:  # later calls wait for a disconnect (a streamed answer): no bound on those
                return await receive()
            loop = asyncio.get_running_loop()
            if deadline is None and self.body_timeout is not None:
                deadline = loop.time() + self.body_timeout
            left = None if deadline is None else max(0.0, deadline - loop.time())
            wait = left if self.read_timeout is None or (left is not None and left < self.read_timeout) \
                else self.read_timeout
            try:
                message = await asyncio.wait_for(receive(), wait)
            except asyncio.TimeoutError:
                from starlette.exceptions import HTTPException

                whole = wait == left  # the body's own deadline, not one piece's
                raise HTTPException(408, f"request body not received within {self.body_timeout:g}s" if whole else
                                    f"a piece of the request body not received within {self.read_timeout:g}s",
                                    headers={"connection": "close"}) from None
            if message["type"] != "http.request" or not message.get("more_body"):
                body_done = True
            return message

        return timed_receive


__all__ = ["BODY_TIMEOUT", "BodyGuard", "MAX_BODY_BYTES", "READ_TIMEOUT", "ServeOptions", "apply_options", "check_bind",
           "is_loopback", "key_matches", "one_line"]
