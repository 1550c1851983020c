"""Cooperative cancellation of one question's work.

``hqa serve`` runs each question in a worker thread; Python cannot stop a thread from outside, so a request that
outlives its timeout is *cancelled*: :func:`cancelled_by` marks the work's context with an event that the server sets
at the timeout, and the places where the work spends its time check it and raise :class:`Cancelled` — the embedded
LM before each prompt batch and each generated token (:meth:`hqa.lm.kv_cache.PrefixLlama.eval`, which llama-cpp-python
calls for both), the HTTP layer before each
request and instead of sleeping between retries (:mod:`hqa.retrievers.http`), the toolbox before each tool call
(:mod:`hqa.programs.humaniq_tools`).  The worker is then free for the next request within one token, one prompt batch or
one source call, and ``/healthz`` counts it as running until it has really stopped.

Outside a cancellable context (the CLI, evaluations) every check is a no-op.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from typing import Iterator

from hqa.errors import HQAError

_EVENT: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("hqa_cancel", default=None)


class Cancelled(HQAError):
    """The work was cancelled (its request timed out); nothing of it is kept."""


def check() -> None:
    """Raise :class:`Cancelled` when the current work has been cancelled."""
    event = _EVENT.get()
    if event is not None and event.is_set():
        raise Cancelled("cancelled: the request's time ran out")


def sleep(seconds: float) -> None:
    """``time.sleep`` that ends early (raising :class:`Cancelled`) when the current work is cancelled."""
    event = _EVENT.get()
    if event is None:
        time.sleep(seconds)
    elif event.wait(max(0.0, seconds)):
        check()


@contextlib.contextmanager
def cancelled_by(event: threading.Event) -> Iterator[threading.Event]:
    """Run the block as work that ``event.set()`` cancels."""
    token = _EVENT.set(event)
    try:
        yield event
    finally:
        _EVENT.reset(token)


__all__ = ["Cancelled", "cancelled_by", "check", "sleep"]
