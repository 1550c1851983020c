"""Helpers every program shares: the LM call that survives an unparsable reply, the LM-request counter and the
human-demo declaration type."""

from __future__ import annotations

from typing import Any

import dspy
from dspy.utils.callback import BaseCallback

from hqa.trace import PredictError


def safe_predict(predictor, **inputs: Any) -> tuple[Any, PredictError | None]:
    """Call a predictor: ``(prediction, None)``, or ``(None, the failure)`` when the LM's reply cannot be parsed into
    the signature's fields, so one malformed reply does not lose the question (the program adds the failure to its
    trace's ``errors``)."""
    from dspy.utils.exceptions import AdapterParseError

    try:
        return predictor(**inputs), None
    except AdapterParseError as exc:
        name = type(predictor.signature).__name__ if hasattr(predictor, "signature") else "?"
        return None, PredictError(predictor=name, reply=str(getattr(exc, "lm_response", ""))[:300],
                                  message=str(exc))


class LMRequestCounter(BaseCallback):
    """Counts the LM requests actually issued (an adapter's retry after a parse failure included) where
    :meth:`installed` is: the one LM-request counter (``lm_calls`` of a predictions row, DETLLM's ``lm_requests``).
    Install it with ``dspy.context(callbacks=counter.installed())``, which is thread-local: concurrent questions
    sharing an LM (``hqa evaluate``'s threads) do not see each other's requests."""

    def __init__(self):
        self.n = 0

    def installed(self) -> list:
        """The callbacks in effect here, and this counter."""
        return [*(dspy.settings.get("callbacks") or []), self]

    def on_lm_start(self, call_id, instance, inputs):
        self.n += 1
