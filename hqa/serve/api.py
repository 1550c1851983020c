"""The HTTP API over one opened program.

``POST /v1/ask`` answers a question with its evidence trace; ``GET /healthz`` is 200 only once the LM, the toolbox
and its indexes are loaded (503 while warming up or after a failed warm-up); ``GET /v1/programs`` describes the
served program and the compiled programs on disk; ``/docs`` and ``/openapi.json`` are FastAPI's; ``/`` is the web
page.

Requests run in a bounded thread pool (``workers`` at a time, ``queue`` more waiting; beyond that 503 "busy");
each has a timeout (504).  A failing LM answers 503 with the reason and the server stays up.  Bad input gets a 4xx
with a one-line ``{"error": ...}``.  Every request is logged as one JSON line on the ``hqa.access`` logger.
With an API key, every ``/v1/`` route needs ``Authorization: Bearer <key>``.

Safety before work: a guard in front of the app (:class:`BodyGuard`) checks the API key and the declared framing
before a byte of the body is read — 401 for a keyless request whatever its body, 413 for a declared size past
``max_body_bytes``, 400 for a request declaring both Content-Length and Transfer-Encoding — and FastAPI's
``max_body_size`` counts the bytes actually received (chunked, lying or absent Content-Length alike) and answers 413
at the cap, so an oversized request costs no more than the cap in memory, with or without an API key.  A timed-out
request's work is cancelled (:mod:`hqa.io.cancel`) and counted in ``/healthz`` until it has stopped.

Every answer carries ``usage`` (LM calls, prompt / completion tokens, tool calls, seconds), ``demos`` (the
demonstrations each predictor's prompt really held, recorded by :class:`hqa.serve.steps.StepRecorder`, a DSPy
callback) and ``compiled_demos`` (those the program holds, shown when a question needed no LM call).
``POST /v1/ask/stream`` answers the same request as server-sent events: one ``step`` event per predictor call as
it happens (what it was given, what it decided; a ``started`` one first), then one ``answer`` event with the body
``/v1/ask`` returns (or one ``error`` event).
"""


import asyncio
import contextvars
import hmac
import ipaddress
import json
import logging
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

from hqa.errors import MAX_QUESTION_CHARS, ConfigError, EndpointError, HQAError, question_too_long
from hqa.app import runtime_options, with_options

access_log = logging.getLogger("hqa.access")

_WD_ID = re.compile(r"[PQ]\d+")
#: the largest request body read (bytes); a 1000-character question with options fits many times over, even as
#: JSON ``\\uXXXX`` escapes (a value chosen here, not taken from a paper)
MAX_BODY_BYTES = 64 * 1024
#: seconds a client has to send its request headers, and then each piece of its body; past that the connection is
#: closed (headers: :mod:`hqa.serve.server`) or answered 408 (body: :class:`BodyGuard`) — a value chosen here
READ_TIMEOUT = 10.0


@dataclass
class ServeOptions:
    workers: int = 2  # questions answered at once
    queue: int = 16  # more requests allowed to wait for a worker; beyond that 503
    timeout: float = 300.0  # seconds per request before 504
    api_key: str | None = None
    max_question_chars: int = MAX_QUESTION_CHARS
    max_body_bytes: int = MAX_BODY_BYTES
    read_timeout: float | None = READ_TIMEOUT  # seconds for a request's headers, and for each piece of its body


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


def key_matches(header: str, api_key: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <api_key>`` (constant-time comparison)."""
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key.encode())


async def _refuse(send, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           (b"connection", b"close")] + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BodyGuard:
    """ASGI middleware in front of every ``/v1/`` route: the API key and the declared framing, before any body byte.

    A request without the key is answered 401 from its headers alone (its body, of any size and shape, is never
    read nor parsed); a declared ``Content-Length`` past ``max_body_bytes`` is answered 413 from its headers; one
    that declares both ``Content-Length`` and ``Transfer-Encoding`` is refused 400 (the framing a smuggling or guard
    bypass relies on: RFC 9112 section 6.3 lets a server reject it and requires the connection closed after).  Every
    refusal closes the connection instead of draining the rest.  The bytes actually received are counted by
    FastAPI's own ``max_body_size`` on each ``/v1/`` POST route (Starlette's ``RequestBodyLimitMiddleware``),
    whatever the framing: a chunked body is refused 413 as soon as it passes the cap.  While the body is still
    arriving, each piece must come within ``read_timeout`` seconds (408 otherwise), so a trickled body cannot hold a
    connection open indefinitely.
    """

    def __init__(self, app, api_key: str | None, max_body_bytes: int, prefix: str = "/v1/",
                 read_timeout: float | None = None):
        self.app, self.api_key, self.cap, self.prefix = app, api_key, max_body_bytes, prefix
        self.read_timeout = read_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.api_key and not key_matches(headers.get("authorization", ""), self.api_key):
            return await _refuse(send, 401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                 {"www-authenticate": "Bearer"})
        length = headers.get("content-length")
        if length is not None and "transfer-encoding" in headers:
            return await _refuse(send, 400, "a request may not declare both Content-Length and Transfer-Encoding")
        if length is not None:
            if not length.strip().isdigit():
                return await _refuse(send, 400, f"Content-Length {length[:40]!r} is not a byte count")
            if int(length) > self.cap:
                return await _refuse(send, 413, f"request body is larger than {self.cap} bytes")
        if self.read_timeout is None:
            return await self.app(scope, receive, send)
        body_done = False

        async def timed_receive():
            nonlocal body_done
            if body_done:  # later calls wait for a disconnect (a streamed answer): no bound on those
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout)
            except asyncio.TimeoutError:
                from starlette.exceptions import HTTPException

                raise HTTPException(408, f"request body not received within {self.read_timeout:g}s",
                                    headers={"connection": "close"}) from None
            if message["type"] != "http.request" or not message.get("more_body"):
                body_done = True
            return message

        return await self.app(scope, timed_receive, send)


def create_app(opened=None, *, options: ServeOptions | None = None, warmup: Callable[[], Any] | None = None,
               programs: Callable[[], list[dict[str, Any]]] | None = None):
    """The FastAPI app serving ``opened`` (an :class:`hqa.app.OpenedProgram`).

    ``warmup`` (optional) runs in a background thread at startup; ``/healthz`` and ``/v1/ask`` answer 503 until it
    has finished.  ``programs`` lists compiled programs on disk for ``/v1/programs``.
    """
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
    from pydantic import BaseModel, ConfigDict, Field, field_validator
    from starlette.exceptions import HTTPException as StarletteHTTPException

    opts = options or ServeOptions()
    state: dict[str, Any] = {"ready": warmup is None and opened is not None, "error": None, "inflight": 0,
                             "cancelling": 0, "served": 0, "failed": 0}
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
            too_long = question_too_long(value, opts.max_question_chars)
            if too_long:
                raise ValueError(too_long)
            return value

    class AskResponse(BaseModel):
        question: str
        # the one answer shape of every program (hqa.answering.presentation.prediction_fields)
        answer: str | None = Field(description="the answer; null when the program abstained or gave none")
        abstained: bool
        reason: str | None = Field(None, description="why there is no answer (null when there is one)")
        confidence: float | None = Field(None, description="the selective answerer's confidence, where known")
        candidates: list[dict[str, Any]] = Field(description="ranked candidates (text, source, score, support)")
        seconds: float
        program: str
        kind: str
        version: str | None
        request_id: str
        trace: dict[str, Any]
        usage: dict[str, float] = Field(description="lm_calls, prompt_tokens, completion_tokens, tool_calls, seconds")
        demos: dict[str, list[dict[str, Any]]] = Field(
            description="per predictor (by name), the demonstrations its prompts held for this question, each with "
                        "its id (a human process's library id, a training example's id)")
        compiled_demos: dict[str, list[dict[str, Any]]] = Field(
            description="per predictor, the demonstrations the program holds as compiled")
        labels: dict[str, str] = Field(description="labels of the Wikidata ids in the SPARQL rows")

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
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 413:  # the body limit: close rather than drain what the client still sends
            headers["connection"] = "close"
            return error(413, f"request body is larger than {opts.max_body_bytes} bytes", headers)
        return error(exc.status_code, str(exc.detail), headers or None)

    app.add_middleware(BodyGuard, api_key=opts.api_key, max_body_bytes=opts.max_body_bytes,
                       read_timeout=opts.read_timeout)

    @app.middleware("http")  # added after the guard, so it runs first and logs the guard's 401 / 413 too
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

    @app.get("/healthz", summary="200 once the LM, toolbox and indexes are loaded; 503 before")
    async def healthz():
        if state["error"]:
            return JSONResponse({"status": "failed", "error": state["error"]}, status_code=503)
        if not state["ready"]:
            return JSONResponse({"status": "loading"}, status_code=503)
        return {"status": "ready", "program": opened.label, "inflight": state["inflight"],
                "cancelling": state["cancelling"], "served": state["served"], "failed": state["failed"]}

    @app.get("/v1/programs", summary="the served program and those on disk")
    async def list_programs():
        from hqa.programs import PROGRAMS

        served = opened.describe() if opened else None
        if served is not None:
            served["options"] = {name: [spec[0].__name__, *spec[1:]]
                                 for name, spec in runtime_options(opened.program).items()}
        return {"served": served, "builtin": sorted(PROGRAMS),
                "compiled": programs() if programs else []}

    def admit() -> JSONResponse | None:
        """None when the request may run (a slot is then held), else the 503 to answer."""
        if state["error"]:
            return error(503, f"not ready: {state['error']}")
        if not state["ready"]:
            return error(503, "still loading the LM, toolbox and indexes; retry when /healthz is ready")
        if not slots.acquire(blocking=False):
            return error(503, f"busy: {opts.workers} questions running and {opts.queue} waiting; retry later")
        return None

    counters = threading.Lock()  # inflight / cancelling change in worker threads too

    def count(key: str, delta: int) -> None:
        with counters:
            state[key] += delta

    async def answer(body: AskRequest, request: Request,
                     emit: Callable[[dict[str, Any]], None] | None = None) -> tuple[int, dict[str, Any]]:
        """Run one admitted request: (200, the answer body) or (status, {"error": ...}).

        Its slot is released, and ``inflight`` counts it down, only when its work has really ended: a request that
        times out is cancelled (:mod:`hqa.io.cancel`: the work stops at its next LM token, prompt batch, tool or source
        call) and counted in ``cancelling`` until it has."""
        from hqa.io.cancel import Cancelled, cancelled_by

        count("inflight", 1)
        job = {"done": False, "timed_out": False}
        stop = threading.Event()

        def finished() -> None:  # once per request, from whichever side ends it last
            with counters:
                job["done"] = True
                state["inflight"] -= 1
                if job["timed_out"]:
                    state["cancelling"] -= 1
            slots.release()

        handed_off = False
        try:
            try:
                program = with_options(opened.program, body.options)
            except HQAError as exc:
                state["failed"] += 1
                return 422, {"error": _one_line(f"options: {exc}", 500)}

            from hqa.serve.steps import StepRecorder, compiled_demos

            def work():
                import dspy

                try:
                    with cancelled_by(stop):
                        if stop.is_set():  # timed out while waiting for a worker: nothing to do
                            raise Cancelled("cancelled before it started")
                        recorder = StepRecorder(program, emit)
                        if emit is not None:
                            emit({"status": "started", "program": opened.label})
                        callbacks = list(dspy.settings.get("callbacks", []) or []) + [recorder]
                        started = time.monotonic()
                        with dspy.context(callbacks=callbacks, track_usage=True):
                            pred = program(question=body.question)
                        return pred, recorder, time.monotonic() - started
                finally:
                    finished()

            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(pool, contextvars.copy_context().run, work)
            handed_off = True
            try:
                # shielded: a timeout must not cancel a queued job's future, whose work() then would never run
                pred, recorder, seconds = await asyncio.wait_for(asyncio.shield(future), timeout=opts.timeout)
            except asyncio.TimeoutError:
                with counters:
                    if not job["done"]:
                        job["timed_out"] = True
                        state["cancelling"] += 1
                stop.set()
                state["failed"] += 1
                return 504, {"error": f"no answer within {opts.timeout:g}s (its work is cancelled)"}
            except Cancelled:  # pragma: no cover - only a timed-out job is cancelled, and that returned above
                state["failed"] += 1
                return 504, {"error": f"no answer within {opts.timeout:g}s"}
            except EndpointError as exc:
                state["failed"] += 1
                return 503, {"error": _one_line(f"a knowledge source or the LM is unavailable: {exc}", 500)}
            except HQAError as exc:
                state["failed"] += 1
                return 422, {"error": _one_line(str(exc), 500)}
            except Exception as exc:  # noqa: BLE001 - the server stays up whatever one question does
                state["failed"] += 1
                if _is_lm_failure(exc):
                    return 503, {"error": _one_line(f"the LM failed ({type(exc).__name__}): {_one_line(exc)}", 500)}
                access_log.exception("request %s failed", request.state.request_id)
                return 500, {"error": _one_line(f"internal error ({type(exc).__name__}): {_one_line(exc)}", 500)}
            state["served"] += 1
            trace = _jsonable(getattr(pred, "trace", None) or {})
            if getattr(pred, "selected_demos", None) and "demos" not in trace:
                trace["demos"] = _jsonable(list(pred.selected_demos))
            from hqa.answering.presentation import prediction_fields

            return 200, {"question": body.question, **prediction_fields(pred), "seconds": round(seconds, 3),
                         "program": opened.label, "kind": opened.kind, "version": opened.version,
                         "request_id": request.state.request_id, "trace": trace,
                         "usage": usage_of(pred, trace, recorder, seconds), "demos": _jsonable(recorder.demos),
                         "compiled_demos": _jsonable(compiled_demos(program)),
                         "labels": sparql_labels(program, trace)}
        finally:
            if not handed_off:  # refused before its work was queued
                finished()

    # max_body_size on each route that reads a body: FastAPI counts the bytes it receives, whatever the framing, and
    # answers 413 past the cap; set per route (inside BodyGuard), so a keyless request still gets its 401 first
    @app.post("/v1/ask", response_model=AskResponse, max_body_size=opts.max_body_bytes,
              summary="answer a question with its evidence trace, usage and the demos its prompts held",
              responses={401: {"description": "missing or wrong API key"}, 413: {"description": "body too large"},
                         422: {"description": "invalid input"}, 503: {"description": "loading, busy or LM down"},
                         504: {"description": "timed out"}})
    async def ask(body: AskRequest, request: Request):
        refused = admit()
        if refused is not None:
            return refused
        status, payload = await answer(body, request)
        return JSONResponse(payload, status_code=status)

    @app.post("/v1/ask/stream", max_body_size=opts.max_body_bytes, summary="the same answer as server-sent events: a step event per predictor call "
                                        "as it happens, then one answer (or error) event",
              response_class=StreamingResponse)
    async def ask_stream(body: AskRequest, request: Request):
        refused = admit()
        if refused is not None:
            return refused
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(event: dict[str, Any]) -> None:  # called from the worker thread
            loop.call_soon_threadsafe(events.put_nowait, _jsonable(event))

        task = asyncio.ensure_future(answer(body, request, emit))

        async def stream():
            while True:
                getter = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield _sse("step", getter.result())
                    continue
                getter.cancel()
                break
            while not events.empty():
                yield _sse("step", events.get_nowait())
            status, payload = task.result()
            yield _sse("answer" if status == 200 else "error", {**payload, "status": status})

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return HTMLResponse(resources.files("hqa.serve").joinpath("page.html").read_text(encoding="utf-8"))

    return app


def _sse(event: str, data: Any) -> str:
    """One server-sent event (``event:`` + one ``data:`` line of JSON)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def usage_of(pred: Any, trace: dict[str, Any], recorder: Any, seconds: float) -> dict[str, float]:
    """The cost of one answer in the units hqa's reports use (:data:`hqa.reports.retrieval.COST_KEYS`)."""
    from hqa.jobs.evaluate import _usage_tokens

    prompt, completion = _usage_tokens(pred) if hasattr(pred, "get_lm_usage") else (0, 0)
    return {"lm_calls": recorder.lm_calls, "prompt_tokens": prompt, "completion_tokens": completion,
            "tool_calls": len(trace.get("tool_calls") or []), "seconds": round(seconds, 3)}


def sparql_labels(program: Any, trace: dict[str, Any]) -> dict[str, str]:
    """Labels of the Wikidata ids in the trace's SPARQL rows and evidence provenance, from the program's toolbox
    (what the KG and the entity store name them); {} when the program has no toolbox or the labels cannot be read."""
    from hqa.data import wikidata as W

    values = [v for q in trace.get("sparql") or [] if isinstance(q, dict)
              for row in q.get("rows") or [] if isinstance(row, dict) for v in row.values()]
    values += [(ev.get("meta") or {}).get(key) for ev in trace.get("evidence") or [] if isinstance(ev, dict)
               for key in ("s", "id")]  # the evidence provenance shows ids too
    ids = sorted({lid for v in values if isinstance(v, str)
                  and (lid := W.local_id(v.strip("<>")) or (v if _WD_ID.fullmatch(v) else None))})
    from hqa.app import _base

    tb = getattr(_base(program), "toolbox", None)
    if not ids or tb is None:  # no ids, or a program without a toolbox to name them
        return {}
    try:
        labels = dict(tb.sparql.labels(ids))
        missing = [i for i in ids if i not in labels]
        if missing:
            labels.update(tb.linker.labels(missing))
        return {k: str(v) for k, v in labels.items() if v}
    except Exception as exc:  # noqa: BLE001 - labels are a convenience; the answer stands without them
        access_log.warning(json.dumps({"event": "labels_failed", "error": _one_line(exc)}))
        return {}


def _version() -> str:
    from hqa import __version__

    return __version__


__all__ = ["BodyGuard", "ServeOptions", "create_app", "check_bind", "is_loopback", "MAX_BODY_BYTES",
           "MAX_QUESTION_CHARS"]
