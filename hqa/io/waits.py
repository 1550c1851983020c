"""How long an HTTP client waits before its next try, the one policy of the live sources (:mod:`hqa.retrievers.http`)
and the data downloads (:mod:`hqa.data.store`): the server's ``Retry-After`` when it sent one (seconds or an HTTP
date, parsed by urllib3), at most ``backoff_cap``; else tenacity's full-jitter exponential backoff, uniform in
``[0, min(backoff_cap, backoff_base * 2**attempt)]``.  A ``Retry-After`` beyond ``retry_after_cap`` is not waited
for at all: :func:`too_long` names it, and the caller gives up on that source."""

from __future__ import annotations

import tenacity
from urllib3.exceptions import InvalidHeader
from urllib3.util.retry import Retry


def retry_after_seconds(header: str | None) -> float | None:
    """A ``Retry-After`` header (seconds or an HTTP date) as seconds; None when absent or unreadable."""
    try:
        return Retry().parse_retry_after(header) if header is not None else None
    except InvalidHeader:
        return None


def too_long(header: str | None, cap: float) -> float | None:
    """The seconds a ``Retry-After`` asks for when they exceed ``cap`` (``http.retry_after_cap``), else None."""
    wait = retry_after_seconds(header)
    return wait if wait is not None and wait > cap else None


class Backoff:
    """The wait before try ``attempt + 2`` (:meth:`seconds`); ``base`` and ``cap`` are ``http.backoff_base`` and
    ``http.backoff_cap``."""

    def __init__(self, base: float, cap: float) -> None:
        self.cap = cap
        self._jitter = tenacity.wait_random_exponential(multiplier=base, max=cap)

    def seconds(self, attempt: int, retry_after: str | None = None) -> float:
        wait = retry_after_seconds(retry_after)
        if wait is not None:
            return min(wait, self.cap)
        state = tenacity.RetryCallState(None, None, (), {})
        state.attempt_number = attempt + 1
        return self._jitter(state)


__all__ = ["Backoff", "retry_after_seconds", "too_long"]
