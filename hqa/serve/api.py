"""The HTTP API over one opened program.

``POST /v1/ask`` answers a question with its evidence trace; ``GET /healthz`` is 200 only once the LM, the toolbox
and its indexes are loaded (503 while warming up or after a failed warm-up); ``GET /v1/programs`` describes the
served program and the compiled programs on disk; ``/docs`` and ``/openapi.json`` are FastAPI's; ``/`` is the web
page.

Requests run in a bounded thread pool (``workers`` at a time, ``queue`` more waiting; beyond that 503 "busy");
each has a timeout (504).  A failing LM answers 503 with the reason and the server stays up.  Bad input gets a 4xx
with a one-line ``{"error": ...}``.  Every request is logged as one JSON line on the ``hqa.access`` logger.
With an API key, every ``/v1/`` route needs ``Authorization: Bearer <key>``.
"""


import asyncio
import contextvars
import hmac
import ipaddress
import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

from hqa.errors import ConfigError, EndpointError, HQAError
from hqa.app import runtime_options, with_options

access_log = logging.getLogger("hqa.access")

MAX_QUESTION_CHARS = 1000


@dataclass
class ServeOptions:
    workers: int = 2  # questions answered at once
    queue: int = 16  # more requests allowed to wait for a worker; beyond that 503
    timeout: float = 300.0  # seconds per request before 504
    api_key: str | None = None
    max_question_chars: int = MAX_QUESTION_CHARS


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


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text[:limit]


def _is_lm_failure(exc: BaseException) -> bool:
    """An error from the LM or its server (connection refused, server gone, timeouts) rather than a bug."""
    try:
        from dspy.utils.exceptions import LMError

        if isinstance(exc, LMError):
            return True
    except ImportError:  # pragma: no cover
        pass
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        mod = type(exc).__module__ or ""
        name = type(exc).__name__
        if mod.startswith(("litellm", "openai", "httpx", "httpcore")) or name in (
                "APIConnectionError", "ServiceUnavailableError", "InternalServerError", "Timeout"):
            return True
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def create_app(opened=None, *, options: ServeOptions | None = None, warmup: Callable[[], Any] | None = None,
               programs: Callable[[], list[dict[str, Any]]] | None = None):
    """The FastAPI app serving ``opened`` (an :class:`hqa.app.OpenedProgram`).

    ``warmup`` (optional) runs in a background thread at startup; ``/healthz`` and ``/v1/ask`` answer 503 until it
    has finished.  ``programs`` lists compiled programs on disk for ``/v1/programs``.
    """
    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse
    from pydantic import BaseModel, ConfigDict, Field, field_validator
    from starlette.exceptions import HTTPException as StarletteHTTPException

    opts = options or ServeOptions()
    state: dict[str, Any] = {"ready": warmup is None and opened is not None, "error": None, "inflight": 0,
                             "served": 0, "failed": 0}
    pool = ThreadPoolExecutor(max_workers=max(1, opts.workers), thread_name_prefix="hqa-ask")
    slots = threading.BoundedSemaphore(max(1, opts.workers) + max(0, opts.queue))

    class AskRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        question: str = Field(..., description="the question, 1 to max_question_chars characters",
                              examples=["Who is the author of Animal Farm?"])
        options: dict[str, Any] | None = Field(
            None, description="per-request program options (GET /v1/programs lists the served program's), "
                              "e.g. {\"k\": 3}", examples=[{}])

        @field_validator("question")
        @classmethod
        def _check(cls, value: str) -> str:
            # a lone surrogate (\\ud800 in JSON) becomes U+FFFD instead of failing deep inside the program
            value = value.encode("utf-8", "surrogatepass").decode("utf-8", "replace").strip()
            if not value:
                raise ValueError("question is empty")
            if len(value) > opts.max_question_chars:
                raise ValueError(f"question is {len(value)} characters long; the limit is {opts.max_question_chars}")
            return value

    class AskResponse(BaseModel):
        question: str
        answer: str | None  # None: the program abstained (hqa.selective), with the fields below
        abstained: bool | None = None
        reason: str | None = None
        confidence: float | None = None
        candidates: list[dict[str, Any]] | None = None
        seconds: float
        program: str
        kind: str
        version: str | None
        request_id: str
        trace: dict[str, Any]

    def lifespan_factory():
        import contextlib

        @contextlib.asynccontextmanager
        async def lifespan(_app):
            if warmup is not None:
                def run_warmup():
                    try:
                        warmup()
                        state["ready"] = True
                    except Exception as exc:  # noqa: BLE001 - reported on /healthz, the server stays up
                        state["error"] = f"warm-up failed: {type(exc).__name__}: {_one_line(exc)}"
                        access_log.error(json.dumps({"event": "warmup_failed", "error": state["error"]}))

                threading.Thread(target=run_warmup, name="hqa-warmup", daemon=True).start()
            yield
            pool.shutdown(wait=False, cancel_futures=True)

        return lifespan

    app = FastAPI(title="hqa", version=_version(), lifespan=lifespan_factory(),
                  description="Hybrid-source question answering (Wikipedia text + Wikidata KG + LM memory) with "
                              "compiled DSPy programs.")
    app.state.hqa = state

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": _one_line(message, 500)}, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        errs = exc.errors()
        first = errs[0] if errs else {}
        kind = first.get("type", "")
        if kind == "json_invalid":
            msg = f"request body is not valid UTF-8 JSON ({first.get('ctx', {}).get('error', 'decode error')})"
        elif kind == "model_attributes_type" or (kind == "dict_type" and tuple(first.get("loc", ())) == ("body",)):
            msg = "request body must be a JSON object like {\"question\": \"...\"}"
        else:
            where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
            msg = f"{where}: {first.get('msg', 'invalid')}".replace("Value error, ", "")
        return error(422, msg)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):  # Starlette's UnicodeDecodeError
            return error(400, "request body is not valid UTF-8 JSON")
        return error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.middleware("http")
    async def _access(request: Request, call_next):
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

    async def authorize(request: Request) -> None:
        if not opts.api_key:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), opts.api_key.encode()):
            from fastapi import HTTPException

            raise HTTPException(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                headers={"WWW-Authenticate": "Bearer"})

    @app.get("/healthz", summary="200 once the LM, toolbox and indexes are loaded; 503 before")
    async def healthz():
        if state["error"]:
            return JSONResponse({"status": "failed", "error": state["error"]}, status_code=503)
        if not state["ready"]:
            return JSONResponse({"status": "loading"}, status_code=503)
        return {"status": "ready", "program": opened.label, "inflight": state["inflight"],
                "served": state["served"], "failed": state["failed"]}

    @app.get("/v1/programs", dependencies=[Depends(authorize)], summary="the served program and those on disk")
    async def list_programs():
        from hqa.programs import PROGRAMS

        served = opened.describe() if opened else None
        if served is not None:
            served["options"] = {name: [spec[0].__name__, *spec[1:]]
                                 for name, spec in runtime_options(opened.program).items()}
        return {"served": served, "builtin": sorted(PROGRAMS),
                "compiled": programs() if programs else []}

    @app.post("/v1/ask", response_model=AskResponse, dependencies=[Depends(authorize)],
              summary="answer a question with its evidence trace",
              responses={422: {"description": "invalid input"}, 503: {"description": "loading, busy or LM down"},
                         504: {"description": "timed out"}})
    async def ask(body: AskRequest, request: Request):
        if state["error"]:
            return error(503, f"not ready: {state['error']}")
        if not state["ready"]:
            return error(503, "still loading the LM, toolbox and indexes; retry when /healthz is ready")
        if not slots.acquire(blocking=False):
            return error(503, f"busy: {opts.workers} questions running and {opts.queue} waiting; retry later")
        state["inflight"] += 1
        try:
            try:
                program = with_options(opened.program, body.options)
            except HQAError as exc:
                state["failed"] += 1
                return error(422, f"options: {exc}")

            def work():
                started = time.monotonic()
                pred = program(question=body.question)
                return pred, time.monotonic() - started

            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(pool, contextvars.copy_context().run, work)
            try:
                pred, seconds = await asyncio.wait_for(future, timeout=opts.timeout)
            except asyncio.TimeoutError:
                state["failed"] += 1
                return error(504, f"no answer within {opts.timeout:g}s")
            except EndpointError as exc:
                state["failed"] += 1
                return error(503, f"a knowledge source or the LM is unavailable: {exc}")
            except HQAError as exc:
                state["failed"] += 1
                return error(422, str(exc))
            except Exception as exc:  # noqa: BLE001 - the server stays up whatever one question does
                state["failed"] += 1
                if _is_lm_failure(exc):
                    return error(503, f"the LM failed ({type(exc).__name__}): {_one_line(exc)}")
                access_log.exception("request %s failed", request.state.request_id)
                return error(500, f"internal error ({type(exc).__name__}): {_one_line(exc)}")
            state["served"] += 1
            trace = _jsonable(getattr(pred, "trace", None) or {})
            if getattr(pred, "selected_demos", None) and "demos" not in trace:
                trace["demos"] = _jsonable(list(pred.selected_demos))
            from hqa.selective import prediction_fields

            return {"question": body.question, **prediction_fields(pred), "seconds": round(seconds, 3),
                    "program": opened.label, "kind": opened.kind, "version": opened.version,
                    "request_id": request.state.request_id, "trace": trace}
        finally:
            state["inflight"] -= 1
            slots.release()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return HTMLResponse(resources.files("hqa.serve").joinpath("page.html").read_text(encoding="utf-8"))

    return app


def _version() -> str:
    from hqa import __version__

    return __version__


__all__ = ["ServeOptions", "create_app", "check_bind", "is_loopback", "MAX_QUESTION_CHARS"]
