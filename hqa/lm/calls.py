"""Helpers every program shares: the LM call that survives an unparsable reply, a step run beside, the recorders of
one question (:func:`recording`: LM requests, demos; :func:`asking`: the context a job's or a served question runs in)
and the predictor names they report by."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from concurrent.futures import Future
from typing import Any, Callable

import dspy
from dspy.utils.callback import BaseCallback

from hqa.schemas.trace import PredictError


def safe_predict(predictor, **inputs: Any) -> tuple[Any, PredictError | None]:
    """Call a predictor: ``(prediction, None)``, or ``(None, the failure)`` when the LM's reply cannot be parsed into
    the signature's fields, so one malformed reply does not lose the question (the program adds the failure to its
    trace's ``errors``)."""
    from dspy.utils.exceptions import AdapterParseError

    try:
        return predictor(**inputs), None
    except AdapterParseError as exc:
        return None, PredictError(predictor=predictor_name(predictor), reply=str(getattr(exc, "lm_response", ""))[:300],
                                  message=str(exc))


def beside(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
    """Start ``fn(*args, **kwargs)`` in a thread of its own, in a copy of the caller's context, and return its
    :class:`~concurrent.futures.Future`: the step runs while the caller goes on with work that does not need its
    result (a closed-book LM call while the retrieval hop runs).  DSPy's settings of this context (LM, adapter,
    callbacks, usage tracking, the trace an optimizer collects) and hqa's context (the question's trace, its
    cancellation, SPARQL deadlines) travel with it; an exception — also a budget's stop — is raised by
    ``result()``."""
    future: Future = Future()
    context = contextvars.copy_context()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(context.run(fn, *args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, name="hqa-beside", daemon=True).start()
    return future


class CallbackGroup(BaseCallback):
    """Several callbacks installed as one.  On every call DSPy wraps (a module, an adapter's ``format``/``parse``, an
    LM request) it picks each installed callback's handler through a chain of ``isinstance`` checks, one of them
    against a runtime-checkable Protocol (``dspy.CodeInterpreter``), which costs more than hqa's recorders do; a
    group pays for that once and hands each hook to its members in order.  As in DSPy's own loop, a member that
    raises is logged and the others still run (issue 38: the per-question recorders of ``hqa evaluate``)."""

    def __init__(self, *members: BaseCallback):
        self.members = members


def _forwarder(hook: str):
    def forward(self, *args, **kwargs):
        for member in self.members:
            try:
                getattr(member, hook)(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - DSPy's rule for a failing callback: a warning, not a failure
                logging.getLogger("dspy.utils.callback").warning(f"Error when calling callback {member}: {exc}")

    forward.__name__ = hook
    return forward


for _hook in [name for name in vars(BaseCallback) if name.startswith("on_")]:
    setattr(CallbackGroup, _hook, _forwarder(_hook))


# -- the recorders of one question -----------------------------------------------------------------------------------
#: the recorders of the code running in this context (:func:`recording`); a copied context — a step
#: :func:`beside`, a thread hqa starts with ``contextvars.copy_context`` — records into the same ones
_RECORDERS: contextvars.ContextVar[tuple[BaseCallback, ...]] = contextvars.ContextVar("hqa_recorders", default=())
_ATTACHING = threading.Lock()


class _Router(CallbackGroup):
    """The one callback on an LM and on each predictor of a recorded program: hands their events to the recorders of
    the context making the call (:data:`_RECORDERS`), none when nothing records there."""

    def __init__(self):  # noqa: D107 - no members of its own: they are the context's
        pass

    @property
    def members(self) -> tuple[BaseCallback, ...]:
        return _RECORDERS.get()


def _attach(obj: Any) -> None:
    """Put a :class:`_Router` on ``obj`` (an LM or a predictor) unless it has one: DSPy calls an instance's own
    callbacks (``obj.callbacks``) besides the settings' ones."""
    if obj is None or any(isinstance(c, _Router) for c in getattr(obj, "callbacks", None) or []):
        return
    with _ATTACHING:
        callbacks = list(getattr(obj, "callbacks", None) or [])
        if not any(isinstance(c, _Router) for c in callbacks):
            obj.callbacks = [*callbacks, _Router()]


def keep_recording(program: Any) -> None:
    """Route the events of ``program``'s predictors (and their own LMs) to the recorders of this context.  DSPy
    drops a module's callbacks when it is copied (``Module.__getstate__``), so a wrapper that answers with a
    per-question copy calls this on the copy (:class:`hqa.artifacts.dpp_program.DPPProgram`); a no-op where nothing
    records."""
    if not _RECORDERS.get():
        return
    named = getattr(answering_program(program), "named_predictors", None)
    for _, predictor in named() if callable(named) else ():
        _attach(predictor)
        _attach(getattr(predictor, "lm", None))


@contextlib.contextmanager
def recording(program: Any, *recorders: BaseCallback):
    """Record ``program``'s run inside into ``recorders`` (added to those already recording here): its predictor
    calls (``on_module_start``/``end``) and every LM request (``on_lm_start``/``end``) of the LM in effect.

    Why not ``dspy.context(callbacks=...)`` (issue 38): with any callback in DSPy's settings, every call DSPy wraps
    — each module, an adapter's ``__call__``/``format``/``parse``, each LM request — draws a fresh ``uuid4`` (a
    ``getrandom`` system call, during which CPython lets other threads take the interpreter lock), binds its
    arguments with ``inspect`` and dispatches to the callbacks, about 30 times for one DETLLM question.  Under 64
    concurrent questions each such release waits to take the lock back.  Here DSPy dispatches only at the LM and
    the predictors, where the recorders listen (docs/benchmarks.md, "LM-bound throughput").  The router stays on
    them afterwards and hands a call made where nothing records to nobody."""
    _attach(dspy.settings.lm)
    token = _RECORDERS.set((*_RECORDERS.get(), *recorders))
    try:
        keep_recording(program)
        yield
    finally:
        _RECORDERS.reset(token)


@contextlib.contextmanager
def asking(program: Any, *recorders: BaseCallback):
    """The context one question of a batch job or a served request runs in (``hqa evaluate``'s rows, ``hqa serve``'s
    answers): :func:`recording` into ``recorders``, DSPy's usage tracking on, and DSPy's LM history off.  The caller
    records the question's LM calls, tokens and demos itself, and the history's entries (each request's prompt and
    reply, kept until 10,000 of them) were the garbage collector's largest young objects in a long run
    (:mod:`hqa.jobs.heap`; docs/benchmarks.md, "LM-bound throughput")."""
    with dspy.context(track_usage=True, disable_history=True), recording(program, *recorders):
        yield


class LMRequestCounter(BaseCallback):
    """What the LM requests of one question came to while it records (:func:`recording`): the one LM-request counter
    (``lm_calls`` of a predictions row, DETLLM's ``lm_requests``) and the reliability counts of a row (issue 53).
    Concurrent questions sharing an LM (``hqa evaluate``'s threads) do not see each other's requests.

    * ``n``: LM requests issued (an adapter's JSON fallback after a parse failure included);
    * ``cached``: those answered from DSPy's LM cache (an LM on one of hqa's engines whose engine was not asked:
      :func:`note_attempt` never came; an LM on another engine is not counted here);
    * ``retries``: requests asked again — the chat adapter's JSON fallback (:func:`note_retry`) and DSPy's own
      retries of a failed request (an engine asked more than once for one request);
    * ``parse_failures``: replies that could not be parsed into the signature's fields (:func:`note_parse_failure`,
      from :mod:`hqa.lm.adapters`), each in ``failures`` with the predictor that made the request.
    """

    def __init__(self):
        self.n = 0
        self.cached = 0
        self.retries = 0
        self.parse_failures = 0
        self.failures: list[dict[str, str]] = []  # {"predictor", "error"} per parse failure, then per retry
        self._lock = threading.Lock()
        self._local = threading.local()  # per thread: the LM request in progress, the predictor calls open

    def _stack(self, name: str) -> list:
        stack = getattr(self._local, name, None)
        if stack is None:
            stack = []
            setattr(self._local, name, stack)
        return stack

    # predictor calls: which predictor a request or a failure belongs to (this thread's innermost open one)
    def on_module_start(self, call_id, instance, inputs):
        if isinstance(instance, dspy.Predict):
            self._stack("predictors").append(predictor_name(instance))

    def on_module_end(self, call_id, outputs, exception=None):
        stack = self._stack("predictors")
        if stack:
            stack.pop()

    def predictor(self) -> str:
        stack = self._stack("predictors")
        return stack[-1] if stack else "?"

    # LM requests
    def on_lm_start(self, call_id, instance, inputs):
        with self._lock:
            self.n += 1
        # [id, engine attempts]; None: the LM's engine is not one of hqa's, which say when they are asked
        counted = getattr(getattr(instance, "engine", None), "counts_attempts", False)
        self._stack("requests").append([call_id, 0 if counted else None])

    def on_lm_end(self, call_id, outputs, exception=None):
        stack = self._stack("requests")
        if not stack:
            return
        _, attempts = stack.pop()
        if attempts is None:
            return
        with self._lock:
            if attempts == 0 and exception is None:
                self.cached += 1
            if attempts > 1:
                self.retries += attempts - 1
                self.failures.append({"predictor": self.predictor(), "error": f"the LM request was sent {attempts} "
                                      "times (DSPy's retries of a failed request)", "kind": "retry"})

    def on_attempt(self) -> None:
        stack = self._stack("requests")
        if stack and stack[-1][1] is not None:
            stack[-1][1] += 1

    def on_parse_failure(self, error: str) -> None:
        with self._lock:
            self.parse_failures += 1
            self.failures.append({"predictor": self.predictor(), "error": error, "kind": "parse"})

    def on_retry(self, why: str) -> None:
        with self._lock:
            self.retries += 1
            self.failures.append({"predictor": self.predictor(), "error": why, "kind": "retry"})

    def counts(self) -> dict[str, int]:
        """The row fields: ``lm_calls``, ``cached_lm_calls``, ``retries``, ``parse_failures``."""
        return {"lm_calls": self.n, "cached_lm_calls": self.cached, "retries": self.retries,
                "parse_failures": self.parse_failures}


def _notify(hook: str, *args: Any) -> None:
    for recorder in _RECORDERS.get():
        fn = getattr(recorder, hook, None)
        if fn is not None:
            fn(*args)


def note_attempt() -> None:
    """An engine is sending one request to its model (called by hqa's engines, once per attempt): a request that
    never gets here was served by DSPy's cache, one that gets here twice was retried."""
    _notify("on_attempt")


def note_parse_failure(exc: BaseException) -> None:
    """A reply could not be parsed into its signature's fields (called by :mod:`hqa.lm.adapters`)."""
    _notify("on_parse_failure", parse_failure_text(exc))


def parse_failure_text(exc: BaseException) -> str:
    """One line for an AdapterParseError: what was wrong (DSPy's message up to the reply it quotes) and the fields
    the signature expected, without the reply itself."""
    text = str(exc).split("LM Response:", 1)[0]
    signature = getattr(exc, "signature", None)
    expected = list(getattr(signature, "output_fields", {}) or {})
    line = " ".join(text.split()).rstrip(". ")
    return (line + (f"; expected fields: {', '.join(expected)}" if expected else ""))[:300]


def note_retry(why: str) -> None:
    """The LM is asked again for the same step (the chat adapter's JSON fallback)."""
    _notify("on_retry", why)


# -- predictor names and the demos each predictor's prompt held ---------------------------------------------------
#: the attribute a predictor carries its name in (set by :func:`name_predictors`; a deep copy keeps it)
NAME_ATTR = "hqa_name"


def answering_program(program: Any) -> Any:
    """The program that answers: the one inside a wrapper keeping it as ``.program`` (a DPP wrapper), else itself."""
    inner = getattr(program, "program", None)
    # the class is asked, not the instance: DSPy warns whenever an instance's forward is looked up outside __call__
    return inner if inner is not None and callable(getattr(type(inner), "forward", None)) else program


def name_predictors(program: Any) -> dict[int, str]:
    """Give every predictor of ``program`` its name (its attribute path in the answering program, e.g. ``react``,
    ``sources.merge``; a wrapper's own ``program.`` prefix left out) unless it has one, and return ``{id: name}``.

    The name travels with the predictor through deep copies (a DPP wrapper's per-question copy, ``with_options``),
    so traces, the step stream and the demo records name the predictor that ran — never its signature's class
    name, which every loaded or instruction-edited signature shares (``StringSignature``)."""
    named = getattr(answering_program(program), "named_predictors", None)
    out: dict[int, str] = {}
    for name, predictor in named() if callable(named) else ():
        out[id(predictor)] = predictor.__dict__.setdefault(NAME_ATTR, name)
    return out


def predictor_name(predictor: Any) -> str:
    """The name :func:`name_predictors` gave ``predictor``, else its signature's class name."""
    name = getattr(predictor, "__dict__", {}).get(NAME_ATTR)
    if name:
        return name
    signature = getattr(predictor, "signature", None)
    return getattr(signature, "__name__", type(predictor).__name__)


def demo_id(demo: Any) -> str:
    """The id a demo is reported by: a human process's library id (``demo_id``, e.g. ``compmix:12``), a training
    example's id (a labeled or bootstrapped demo, :func:`hqa.optimize.compile.label_demo_ids`), else
    ``question:<its question>``."""
    get = demo.get if hasattr(demo, "get") else (lambda key, default=None: default)
    for key in ("demo_id", "id"):
        value = get(key)
        if value not in (None, ""):
            return str(value)
    return "question:" + " ".join(str(get("question") or "?").split())[:80]


class DemoRecorder(BaseCallback):
    """Per predictor (by name), the ids of the demos its prompts really held while it records (:func:`recording`),
    in first-use order: at each predictor call, the demos DSPy's ``Predict`` formats into that call's prompt (the
    call's ``demos`` argument, else the predictor's own: compiled in, chosen per question by a wrapper, or built per
    step by the agent)."""

    def __init__(self, program: Any = None):
        self._names = name_predictors(program) if program is not None else {}
        self._lock = threading.Lock()
        self.used: dict[str, list[str]] = {}

    def name_of(self, instance: Any) -> str | None:
        """The name of a predictor ``instance`` (None for a module that is no predictor)."""
        if not isinstance(instance, dspy.Predict):
            return None
        return self._names.get(id(instance)) or predictor_name(instance)

    def on_module_start(self, call_id, instance, inputs):
        name = self.name_of(instance)
        if name is None:
            return
        kwargs = inputs.get("kwargs") or {}
        # DSPy's Predict: a call's ``demos`` argument, else the predictor's (dspy/predict/predict.py, _forward_preprocess)
        demos = list((kwargs["demos"] if "demos" in kwargs else getattr(instance, "demos", None)) or [])
        if not demos:  # a zero-shot prompt: the predictor is listed only once a prompt of it holds demos
            return
        with self._lock:
            ids = self.used.setdefault(name, [])
            for demo in demos:
                key = demo_id(demo)
                if key not in ids:
                    ids.append(key)
            self.demo_seen(name, demos)

    def demo_seen(self, name: str, demos: list) -> None:
        """Called (under the lock) with the demos of each prompt of predictor ``name``; a subclass keeps more."""
