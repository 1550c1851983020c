"""Helpers every program shares: the LM call that survives an unparsable reply, the LM-request counter and the
human-demo declaration type."""

from __future__ import annotations

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


class _Installable(BaseCallback):
    def installed(self) -> list:
        """The callbacks in effect here, and this one (for ``dspy.context(callbacks=...)``, which is thread-local)."""
        return [*(dspy.settings.get("callbacks") or []), self]


class CallbackGroup(_Installable):
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


class LMRequestCounter(_Installable):
    """Counts the LM requests actually issued (an adapter's retry after a parse failure included) where
    :meth:`installed` is: the one LM-request counter (``lm_calls`` of a predictions row, DETLLM's ``lm_requests``).
    Install it with ``dspy.context(callbacks=counter.installed())``, which is thread-local: concurrent questions
    sharing an LM (``hqa evaluate``'s threads) do not see each other's requests."""

    def __init__(self):
        self.n = 0

    def on_lm_start(self, call_id, instance, inputs):
        self.n += 1


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


class DemoRecorder(_Installable):
    """Per predictor (by name), the ids of the demos its prompts really held while installed (the adapter's
    ``format`` call gets them: compiled in, chosen per question by a wrapper, or built per step by the agent), in
    first-use order.  Install it for one question with ``dspy.context(callbacks=recorder.installed())``."""

    def __init__(self, program: Any = None):
        import threading

        self._names = name_predictors(program) if program is not None else {}
        self._lock = threading.Lock()
        self._calls: dict[str, str] = {}  # call id of a running predictor -> its name
        self.used: dict[str, list[str]] = {}

    def name_of(self, instance: Any) -> str | None:
        """The name of a predictor ``instance`` (None for a module that is no predictor)."""
        if not isinstance(instance, dspy.Predict):
            return None
        return self._names.get(id(instance)) or predictor_name(instance)

    def on_module_start(self, call_id, instance, inputs):
        name = self.name_of(instance)
        if name is not None:
            with self._lock:
                self._calls[call_id] = name

    def on_module_end(self, call_id, outputs, exception=None):
        with self._lock:
            self._calls.pop(call_id, None)

    def on_adapter_format_start(self, call_id, instance, inputs):
        from dspy.utils.callback import ACTIVE_CALL_ID

        demos = list(inputs.get("demos") or [])
        if not demos:  # a zero-shot prompt: the predictor is listed only once a prompt of it holds demos
            return
        with self._lock:
            name = self._calls.get(ACTIVE_CALL_ID.get())  # the predictor call formatting this prompt
            if name is None:
                return
            ids = self.used.setdefault(name, [])
            for demo in demos:
                key = demo_id(demo)
                if key not in ids:
                    ids.append(key)
            self.demo_seen(name, demos)

    def demo_seen(self, name: str, demos: list) -> None:
        """Called (under the lock) with the demos of each prompt of predictor ``name``; a subclass keeps more."""
