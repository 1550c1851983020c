"""The routes of ``hqa serve``, one function each, over an explicit :class:`AppState` (the served program, the
options, the worker pool and the counters ``/healthz`` shows); :func:`add_routes` declares them on the app.  Both ask
routes run one admitted request through :func:`answer`.
"""

import asyncio
import contextvars
import json
import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, ClassVar

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from hqa.app import runtime_options
from hqa.errors import EndpointError, HQAError, question_too_long
from hqa.serve.guards import ServeOptions, apply_options, one_line

access_log = logging.getLogger("hqa.access")

_WD_ID = re.compile(r"[PQ]\d+")


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: the longest question taken (characters); :func:`ask_request_model` sets the served one
    max_question_chars: ClassVar[int] = ServeOptions.max_question_chars
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
        too_long = question_too_long(value, cls.max_question_chars)
        if too_long:
            raise ValueError(too_long)
        return value


def ask_request_model(max_question_chars: int) -> type[AskRequest]:
    """The request body of the ask routes with the server's question limit."""
    return type("AskRequest", (AskRequest,), {"max_question_chars": max_question_chars,
                                              "__module__": AskRequest.__module__})


class AskResponse(BaseModel):
    question: str
    # the one answer shape of every program (hqa.answering.presentation.prediction_fields)
    answer: str | None = Field(description="the answer; null when the program abstained or gave none")
    abstained: bool
    reason: str | None = Field(None, description="why there is no answer (null when there is one)")
    confidence: float | None = Field(None, description="the selective answerer's confidence, where known")
    candidates: list[dict[str, Any]] = Field(description="ranked candidates (text, source, score, support)")
    fallback: dict[str, Any] | None = Field(
        None, description="null unless the answer came after a failure: {kind (memory, candidate, sources, retry), "
                          "step (what failed), error}")
    seconds: float
    program: str
    kind: str
    version: str | None
    request_id: str
    trace: dict[str, Any]
    usage: dict[str, float] = Field(description="lm_calls, cached_lm_calls, retries, parse_failures, prompt_tokens, "
                                                "completion_tokens, tool_calls, seconds")
    demos: dict[str, list[dict[str, Any]]] = Field(
        description="per predictor (by name), the demonstrations its prompts held for this question, each with "
                    "its id (a human process's library id, a training example's id)")
    compiled_demos: dict[str, list[dict[str, Any]]] = Field(
        description="per predictor, the demonstrations the program holds as compiled")
    labels: dict[str, str] = Field(description="labels of the Wikidata ids in the SPARQL rows")


@dataclass
class AppState:
    """What the routes share: the served program, the options, the worker pool, its admission slots and the
    counters ``/healthz`` reports (``inflight`` / ``cancelling`` change in worker threads too: under ``lock``)."""

    opened: Any
    opts: ServeOptions
    programs: Callable[[], list[dict[str, Any]]] | None = None
    ready: bool = False
    error: str | None = None
    inflight: int = 0
    cancelling: int = 0
    served: int = 0
    failed: int = 0
    pool: ThreadPoolExecutor = field(init=False, repr=False)
    slots: threading.BoundedSemaphore = field(init=False, repr=False)
    lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        workers = max(1, self.opts.workers)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hqa-ask")
        self.slots = threading.BoundedSemaphore(workers + max(0, self.opts.queue))

    def admit(self) -> JSONResponse | None:
        """None when the request may run (a slot is then held), else the 503 to answer."""
        if self.error:
            return error(503, f"not ready: {self.error}")
        if not self.ready:
            return error(503, "still loading the LM, toolbox and indexes; retry when /healthz is ready")
        if not self.slots.acquire(blocking=False):
            return error(503, f"busy: {self.opts.workers} questions running and {self.opts.queue} waiting; "
                              "retry later")
        return None

    def count(self, key: str, delta: int) -> None:
        with self.lock:
            setattr(self, key, getattr(self, key) + delta)


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one error shape: ``{"error": "<one line>"}``."""
    return JSONResponse({"error": one_line(message, 500)}, status_code=status, headers=headers)


# -- the routes -------------------------------------------------------------------------------------------------

async def healthz(state: AppState):
    if state.error:
        return JSONResponse({"status": "failed", "error": state.error}, status_code=503)
    if not state.ready:
        return JSONResponse({"status": "loading"}, status_code=503)
    return {"status": "ready", "program": state.opened.label, "inflight": state.inflight,
            "cancelling": state.cancelling, "served": state.served, "failed": state.failed}


async def list_programs(state: AppState):
    from hqa.programs import PROGRAMS

    opened = state.opened
    served = opened.describe() if opened else None
    if served is not None:
        served["options"] = {name: [spec[0].__name__, *spec[1:]]
                             for name, spec in runtime_options(opened.program).items()}
    return {"served": served, "builtin": sorted(PROGRAMS),
            "compiled": state.programs() if state.programs else []}


async def ask(state: AppState, body: AskRequest, request: Request):
    refused = state.admit()
    if refused is not None:
        return refused
    status, payload = await answer(state, body, request)
    return JSONResponse(payload, status_code=status)


async def ask_stream(state: AppState, body: AskRequest, request: Request):
    refused = state.admit()
    if refused is not None:
        return refused
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def emit(event: dict[str, Any]) -> None:  # called from the worker thread
        loop.call_soon_threadsafe(events.put_nowait, _jsonable(event))

    task = asyncio.ensure_future(answer(state, body, request, emit))
    return StreamingResponse(_events(events, task), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


async def page():
    return HTMLResponse(resources.files("hqa.serve").joinpath("page.html").read_text(encoding="utf-8"))


def add_routes(app, state: AppState) -> None:
    """Declare the routes on ``app`` (paths, summaries, documented statuses), each calling its function above with
    ``state`` (each named as its function: the OpenAPI operation ids stay)."""
    Ask = ask_request_model(state.opts.max_question_chars)

    @app.get("/healthz", name="healthz", summary="200 once the LM, toolbox and indexes are loaded; 503 before")
    async def _healthz():
        return await healthz(state)

    @app.get("/v1/programs", name="list_programs", summary="the served program and those on disk")
    async def _list_programs():
        return await list_programs(state)

    # max_body_size on each route that reads a body: FastAPI counts the bytes it receives, whatever the framing, and
    # answers 413 past the cap; set per route (inside BodyGuard), so a keyless request still gets its 401 first
    @app.post("/v1/ask", name="ask", response_model=AskResponse, max_body_size=state.opts.max_body_bytes,
              summary="answer a question with its evidence trace, usage and the demos its prompts held",
              responses={401: {"description": "missing or wrong API key"}, 413: {"description": "body too large"},
                         422: {"description": "invalid input"}, 503: {"description": "loading, busy or LM down"},
                         504: {"description": "timed out"}})
    async def _ask(body: Ask, request: Request):
        return await ask(state, body, request)

    @app.post("/v1/ask/stream", name="ask_stream", max_body_size=state.opts.max_body_bytes,
              summary="the same answer as server-sent events: a step event per predictor call "
                      "as it happens, then one answer (or error) event",
              response_class=StreamingResponse)
    async def _ask_stream(body: Ask, request: Request):
        return await ask_stream(state, body, request)

    app.get("/", response_class=HTMLResponse, include_in_schema=False)(page)


# -- one admitted request ---------------------------------------------------------------------------------------

async def answer(state: AppState, body: AskRequest, request: Request,
                 emit: Callable[[dict[str, Any]], None] | None = None) -> tuple[int, dict[str, Any]]:
    """Run one admitted request: (200, the answer body) or (status, {"error": ...}).

    Its slot is released, and ``inflight`` counts it down, only when its work has really ended: a request that
    times out is cancelled (:mod:`hqa.io.cancel`: the work stops at its next LM token, prompt batch, tool or source
    call) and counted in ``cancelling`` until it has."""
    job = _Job(state)
    handed_off = False
    try:
        program, refusal = apply_options(state.opened.program, body.options)
        if refusal is not None:
            state.failed += 1
            return 422, {"error": refusal}
        future = asyncio.get_running_loop().run_in_executor(
            state.pool, contextvars.copy_context().run, job.work, state.opened.label, program, body.question, emit)
        handed_off = True
        try:
            # shielded: a timeout must not cancel a queued job's future, whose work() then would never run
            pred, recorder, seconds = await asyncio.wait_for(asyncio.shield(future), timeout=state.opts.timeout)
        except asyncio.TimeoutError:
            job.time_out()
            _log_when_ended(future, request, "timed out")
            state.failed += 1
            return 504, {"error": f"no answer within {state.opts.timeout:g}s (its work is cancelled)"}
        except asyncio.CancelledError:  # the client of a streamed answer went away: its work is cancelled too
            job.time_out()
            _log_when_ended(future, request, "client gone")
            state.failed += 1
            raise
        except Exception as exc:  # noqa: BLE001 - the server stays up whatever one question does
            state.failed += 1
            return _failure(state, exc, request)
        state.served += 1
        return 200, _answer_body(state, body, request, program, pred, recorder, seconds)
    finally:
        if not handed_off:  # refused before its work was queued
            job.finished()


class _Job:
    """One request's work in a worker thread, and the bookkeeping of its end (whichever side ends it last)."""

    def __init__(self, state: AppState):
        self.state = state
        self.done = False
        self.timed_out = False
        self.stop = threading.Event()
        state.count("inflight", 1)

    def finished(self) -> None:  # once per request
        state = self.state
        with state.lock:
            self.done = True
            state.inflight -= 1
            if self.timed_out:
                state.cancelling -= 1
        state.slots.release()

    def time_out(self) -> None:
        """The request timed out: its work (if still running) is counted in ``cancelling`` and told to stop."""
        state = self.state
        with state.lock:
            if not self.done:
                self.timed_out = True
                state.cancelling += 1
        self.stop.set()

    def work(self, label: str, program: Any, question: str, emit: Callable[[dict[str, Any]], None] | None):
        """(prediction, its step recorder, seconds) of ``program`` on ``question``, under the request's cancel flag."""
        from hqa.io.cancel import Cancelled, cancelled_by
        from hqa.lm.calls import asking
        from hqa.serve.steps import StepRecorder

        try:
            with cancelled_by(self.stop):
                if self.stop.is_set():  # timed out while waiting for a worker: nothing to do
                    raise Cancelled("cancelled before it started")
                recorder = StepRecorder(program, emit)
                if emit is not None:
                    emit({"status": "started", "program": label})
                started = time.monotonic()
                with asking(program, recorder, recorder.calls):
                    pred = program(question=question)
                return pred, recorder, time.monotonic() - started
        finally:
            self.finished()


def _log_when_ended(future: asyncio.Future, request: Request, why: str) -> None:
    """One access-log line when the cancelled work of a request answered without it (``why``) really ends; its
    exception is taken here, so asyncio prints no "Future exception was never retrieved" traceback."""
    from hqa.io.cancel import Cancelled

    request_id = request.state.request_id

    def ended(done: asyncio.Future) -> None:
        error = None if done.cancelled() else done.exception()
        if done.cancelled() or isinstance(error, Cancelled):
            outcome = "stopped"
        elif error is not None:
            outcome = one_line(f"failed ({type(error).__name__}): {error}", 300)
        else:
            outcome = "finished, its answer dropped"
        access_log.info(json.dumps({"event": "cancelled_work_ended", "request_id": request_id, "why": why,
                                    "outcome": outcome}))

    future.add_done_callback(ended)


def _failure(state: AppState, exc: Exception, request: Request) -> tuple[int, dict[str, Any]]:
    """The status and error body of a request whose work raised ``exc``."""
    from hqa.io.cancel import Cancelled

    if isinstance(exc, Cancelled):  # pragma: no cover - only a timed-out job is cancelled, and that answered 504
        return 504, {"error": f"no answer within {state.opts.timeout:g}s"}
    if isinstance(exc, EndpointError):
        return 503, {"error": one_line(f"a knowledge source or the LM is unavailable: {exc}", 500)}
    if isinstance(exc, HQAError):
        return 422, {"error": one_line(str(exc), 500)}
    if _is_lm_failure(exc):
        return 503, {"error": one_line(f"the LM failed ({type(exc).__name__}): {one_line(exc)}", 500)}
    access_log.exception("request %s failed", request.state.request_id, exc_info=exc)
    return 500, {"error": one_line(f"internal error ({type(exc).__name__}): {one_line(exc)}", 500)}


def _answer_body(state: AppState, body: AskRequest, request: Request, program: Any, pred: Any, recorder: Any,
                 seconds: float) -> dict[str, Any]:
    """The ``/v1/ask`` answer (:class:`AskResponse`)."""
    from hqa.answering.presentation import prediction_fields
    from hqa.serve.steps import compiled_demos

    opened = state.opened
    trace = _jsonable(getattr(pred, "trace", None) or {})
    if getattr(pred, "selected_demos", None) and "demos" not in trace:
        trace["demos"] = _jsonable(list(pred.selected_demos))
    return {"question": body.question, **prediction_fields(pred, recorder.calls.failures), "seconds": round(seconds, 3),
            "program": opened.label, "kind": opened.kind, "version": opened.version,
            "request_id": request.state.request_id, "trace": trace,
            "usage": usage_of(pred, trace, recorder, seconds), "demos": _jsonable(recorder.demos),
            "compiled_demos": _jsonable(compiled_demos(program)),
            "labels": sparql_labels(program, trace)}


async def _events(events: asyncio.Queue, task: asyncio.Future):
    """The server-sent events of one streamed answer: each step as it comes, then the answer (or error).  A client
    that goes away ends this generator early: the answer's task is then cancelled, and with it the work."""
    getter: asyncio.Future | None = None
    try:
        while True:
            getter = asyncio.ensure_future(events.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                yield _sse("step", getter.result())
                continue
            break
        while not events.empty():
            yield _sse("step", events.get_nowait())
        status, payload = task.result()
        yield _sse("answer" if status == 200 else "error", {**payload, "status": status})
    finally:
        if getter is not None:
            getter.cancel()
        if not task.done():
            task.cancel()


def _sse(event: str, data: Any) -> str:
    """One server-sent event (``event:`` + one ``data:`` line of JSON)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def _is_lm_failure(exc: BaseException) -> bool:
    """An error from the LM or its server (connection refused, server gone, timeouts) rather than a bug."""
    from dspy.utils.exceptions import LMError

    if isinstance(exc, LMError):
        return True
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


def usage_of(pred: Any, trace: dict[str, Any], recorder: Any, seconds: float) -> dict[str, float]:
    """The cost of one answer in the units hqa's reports use (:data:`hqa.reports.retrieval.COST_KEYS`)."""
    from hqa.jobs.evaluate import usage_tokens

    prompt, completion, _cached = usage_tokens(pred) if hasattr(pred, "get_lm_usage") else (0, 0, 0)
    return {**recorder.calls.counts(), "prompt_tokens": prompt, "completion_tokens": completion,
            "tool_calls": len(trace.get("tool_calls") or []), "seconds": round(seconds, 3)}


def sparql_labels(program: Any, trace: dict[str, Any]) -> dict[str, str]:
    """Labels of the Wikidata ids in the trace's SPARQL rows and evidence provenance, from the program's toolbox
    (what the KG and the entity store name them); {} when the program has no toolbox or the labels cannot be read."""
    from hqa.app import _base
    from hqa.data import wikidata as W

    values = [v for q in trace.get("sparql") or [] if isinstance(q, dict)
              for row in q.get("rows") or [] if isinstance(row, dict) for v in row.values()]
    values += [(ev.get("meta") or {}).get(key) for ev in trace.get("evidence") or [] if isinstance(ev, dict)
               for key in ("s", "id")]  # the evidence provenance shows ids too
    ids = sorted({lid for v in values if isinstance(v, str)
                  and (lid := W.local_id(v.strip("<>")) or (v if _WD_ID.fullmatch(v) else None))})
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
        access_log.warning(json.dumps({"event": "labels_failed", "error": one_line(exc)}))
        return {}


__all__ = ["AppState", "AskRequest", "AskResponse", "add_routes", "answer", "ask", "ask_request_model",
           "ask_stream", "error", "healthz", "list_programs", "page", "sparql_labels", "usage_of"]
