"""The HTTP API over one opened program (the routes and their answers: docs/serving.md).

This module builds the app (:func:`create_app`: FastAPI, its error handlers, the guard, the access log, the warm-up);
what is checked before a request's work — the API key, the body's framing and size — is in :mod:`hqa.serve.guards`,
the routes over an explicit :class:`~hqa.serve.routes.AppState` in :mod:`hqa.serve.routes`.  Bad input gets a 4xx
with a one-line ``{"error": ...}``; every request is logged as one JSON line on the ``hqa.access`` logger.
"""

import contextlib
import json
import threading
import time
import uuid
from typing import Any, Callable

from hqa.errors import MAX_QUESTION_CHARS
from hqa.version import __version__
from hqa.serve.guards import (MAX_BODY_BYTES, READ_TIMEOUT, BodyGuard, ServeOptions, check_bind, is_loopback,
                              one_line)
from hqa.serve.routes import AppState, access_log, add_routes, error


def create_app(opened=None, *, options: ServeOptions | None = None, warmup: Callable[[], Any] | None = None,
               programs: Callable[[], list[dict[str, Any]]] | None = None):
    """The FastAPI app serving ``opened`` (an :class:`hqa.app.OpenedProgram`); ``warmup`` runs in a background
    thread at startup (``/healthz`` and ``/v1/ask`` answer 503 until it has finished); ``programs`` lists compiled
    programs on disk for ``/v1/programs``.  The routes' shared state is ``app.state.hqa``."""
    from fastapi import FastAPI

    opts = options or ServeOptions()
    state = AppState(opened, opts, programs, ready=warmup is None and opened is not None)
    app = FastAPI(title="hqa", version=__version__, lifespan=_lifespan(state, warmup),
                  description="Hybrid-source question answering (Wikipedia text + Wikidata KG + LM memory) with "
                              "compiled DSPy programs.")
    app.state.hqa = state
    _add_error_handlers(app, opts)
    app.add_middleware(BodyGuard, api_key=opts.api_key, max_body_bytes=opts.max_body_bytes,
                       read_timeout=opts.read_timeout, body_timeout=opts.body_timeout)
    app.middleware("http")(_access)  # added after the guard, so it runs first and logs the guard's 401 / 413 too
    add_routes(app, state)
    return app


def _lifespan(state: AppState, warmup: Callable[[], Any] | None):
    """Start-up runs ``warmup`` in a background thread (``state.ready`` or ``state.error``); shut-down stops the
    worker pool.  From the end of warm-up (or from start-up without one) to shut-down, the collector runs with the
    policy ``hqa evaluate`` uses while questions run (:mod:`hqa.jobs.heap`): what the program loaded is frozen."""
    from hqa.jobs.heap import Hold

    def run_warmup(hold: Hold):
        try:
            warmup()
            hold.take()
            state.ready = True
        except Exception as exc:  # noqa: BLE001 - reported on /healthz, the server stays up
            state.error = f"warm-up failed: {type(exc).__name__}: {one_line(exc)}"
            access_log.error(json.dumps({"event": "warmup_failed", "error": state.error}))

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        hold = Hold()
        if warmup is not None:
            threading.Thread(target=run_warmup, args=(hold,), name="hqa-warmup", daemon=True).start()
        else:
            hold.take()
        try:
            yield
        finally:
            state.pool.shutdown(wait=False, cancel_futures=True)
            hold.give_back()

    return lifespan


def _add_error_handlers(app, opts: ServeOptions) -> None:
    """Invalid input and HTTP errors answered in the one error shape, ``{"error": "<one line>"}``."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc: RequestValidationError):
        return error(422, _validation_message(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc: StarletteHTTPException):
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):  # Starlette's UnicodeDecodeError
            return error(400, "request body is not valid UTF-8 JSON")
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 413:  # the body limit: close rather than drain what the client still sends
            headers["connection"] = "close"
            return error(413, f"request body is larger than {opts.max_body_bytes} bytes", headers)
        return error(exc.status_code, str(exc.detail), headers or None)


def _validation_message(errs: list[dict[str, Any]]) -> str:
    """The one-line 422 message of a request that failed validation (its first error)."""
    first = errs[0] if errs else {}
    kind = first.get("type", "")
    if kind == "json_invalid":
        return f"request body is not valid UTF-8 JSON ({first.get('ctx', {}).get('error', 'decode error')})"
    if kind == "model_attributes_type" or (kind == "dict_type" and tuple(first.get("loc", ())) == ("body",)):
        return "request body must be a JSON object like {\"question\": \"...\"}"
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    return f"{where}: {first.get('msg', 'invalid')}".replace("Value error, ", "")


async def _access(request, call_next):
    """One JSON line on the ``hqa.access`` logger per request; ``x-request-id`` (the client's, or a new one) on
    the response."""
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex[:16]
    request.state.request_id = request_id
    start = time.monotonic()
    status = 500
    try:
        response = await call_next(request)
        status = response.status_code
        response.headers["x-request-id"] = request_id
        return response
    finally:
        access_log.info(json.dumps({
            "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "request_id": request_id,
            "client": request.client.host if request.client else None, "method": request.method,
            "path": request.url.path, "status": status, "ms": round((time.monotonic() - start) * 1000, 1)}))


__all__ = ["BodyGuard", "ServeOptions", "create_app", "check_bind", "is_loopback", "MAX_BODY_BYTES",
           "MAX_QUESTION_CHARS", "READ_TIMEOUT"]
