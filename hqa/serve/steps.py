"""What one request's program did, recorded as it happens for that request only (:func:`hqa.lm.calls.recording`).

:class:`StepRecorder` makes every predictor call a *step* (name, shortened inputs, outputs) handed to ``emit`` the
moment it finishes (``/v1/ask/stream``'s events: ``dspy.streamify``'s role, but from the bounded worker pool), counts
the LM requests, and records the demos each predictor's prompt really held (those of the predictor call: compiled
in, chosen per question by a DPP wrapper, or built per step by the agent)."""

from __future__ import annotations

from typing import Any, Callable

from hqa.lm.calls import DemoRecorder, LMRequestCounter, demo_id, name_predictors

SHOWN_CHARS = 400  # longest input / output value put in a step event (a value chosen here, not from a paper)
MAX_DEMOS_SHOWN = 16  # most distinct demos listed per predictor


def _short(value: Any, limit: int = SHOWN_CHARS) -> Any:
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _demo_summary(demo: Any) -> dict[str, Any]:
    """A demo as the page lists it: its id and source when it has them, its question and its output fields."""
    data = dict(demo.items()) if hasattr(demo, "items") else {"value": demo}
    inputs = set(demo.inputs().keys()) if hasattr(demo, "inputs") and getattr(demo, "_input_keys", None) else set()
    out: dict[str, Any] = {key: str(data[key]) for key in ("demo_id", "id", "source") if data.get(key)}
    if "question" in data:
        out["question"] = _short(data["question"], 200)
    shown = {k: _short(v, 200) for k, v in data.items()
             if k not in inputs and k not in ("demo_id", "id", "source", "question", "steps", "augmented")
             and not k.startswith("dspy_")}
    if shown:
        out["outputs"] = shown
    return out


def compiled_demos(program: Any) -> dict[str, list[dict[str, Any]]]:
    """The demos each predictor of ``program`` holds as compiled (what its prompts show when it is called), by the
    predictor's name (:func:`hqa.lm.calls.name_predictors`)."""
    named = getattr(program, "named_predictors", None)
    if not callable(named):
        return {}
    names = name_predictors(program)
    return {names.get(id(p), name): [{"id": demo_id(d), **_demo_summary(d)} for d in p.demos[:MAX_DEMOS_SHOWN]]
            for name, p in named() if p.demos}


class StepRecorder(DemoRecorder):
    """Steps, LM calls and demos of one request of ``program`` (see the module docstring); predictors are named
    by :func:`hqa.lm.calls.name_predictors` (a per-question copy keeps its original's name)."""

    def __init__(self, program: Any, emit: Callable[[dict[str, Any]], None] | None = None):
        super().__init__(program)
        self._emit = emit
        self._open: dict[str, tuple[str, dict[str, Any]]] = {}  # call id -> (predictor name, shown inputs)
        self.steps: list[dict[str, Any]] = []
        self.calls = LMRequestCounter()  # the request's LM calls, retries and parse failures (recorded beside this)
        self.demos: dict[str, list[dict[str, Any]]] = {}
        self._demo_keys: dict[str, set[str]] = {}

    # -- predictor calls ------------------------------------------------------------------------------------------
    def on_module_start(self, call_id, instance, inputs):
        name = self.name_of(instance)
        if name is None:
            return
        super().on_module_start(call_id, instance, inputs)
        shown = {k: _short(v) for k, v in (inputs.get("kwargs") or {}).items() if k not in ("demos", "config")}
        with self._lock:
            self._open[call_id] = (name, shown)
        if self._emit is not None:
            self._emit({"predictor": name, "status": "running", "step": len(self.steps) + len(self._open)})

    def on_module_end(self, call_id, outputs, exception=None):
        super().on_module_end(call_id, outputs, exception)
        with self._lock:
            opened = self._open.pop(call_id, None)
            if opened is None:
                return
            name, shown = opened
            step: dict[str, Any] = {"step": len(self.steps) + 1, "predictor": name, "inputs": shown}
            if exception is not None:
                step["error"] = _short(f"{type(exception).__name__}: {exception}", 300)
            elif hasattr(outputs, "items"):
                step["outputs"] = {k: _short(v) for k, v in outputs.items()}
            self.steps.append(step)
        if self._emit is not None:
            self._emit({**step, "status": "done"})

    @property
    def lm_calls(self) -> int:
        return self.calls.n

    def demo_seen(self, name: str, demos: list) -> None:
        keys = self._demo_keys.setdefault(name, set())
        listed = self.demos.setdefault(name, [])
        for demo in demos:
            summary = _demo_summary(demo)
            key = demo_id(demo)
            if key not in keys and len(listed) < MAX_DEMOS_SHOWN:
                keys.add(key)
                listed.append({"id": key, **summary})


__all__ = ["StepRecorder", "compiled_demos"]
