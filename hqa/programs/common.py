"""Helpers every program shares: the trace skeleton, answer clean-up and the human-demo declaration type."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from hqa.trace import new_trace  # noqa: F401 - re-exported: the programs import the trace skeleton from here

_PREFIX = re.compile(r"^\s*(?:(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:\-]?\s+|(?:the\s+)?(?:final\s+)?answer\s*[:\-]\s*)", re.I)


def clean_answer(text: Any) -> str:
    """Strip an ``Answer:`` prefix, quotes and trailing punctuation from an LM answer."""
    if text is None:
        return ""
    if isinstance(text, (list, tuple)):
        text = " | ".join(str(t) for t in text)
    text = str(text)
    for _ in range(5):  # small models repeat the prefix ("The answer is: The answer is: ...")
        stripped = _PREFIX.sub("", text, count=1).strip()
        if stripped == text.strip():
            break
        text = stripped
    text = text.strip().strip('"').strip("'").strip()
    return text.rstrip(".").strip()


def safe_predict(predictor, trace: dict[str, Any], **inputs: Any):
    """Call a predictor; if the LM's reply cannot be parsed into the signature's fields, record the failure in
    ``trace["errors"]`` and return None instead of raising, so one malformed reply does not lose the question."""
    from dspy.utils.exceptions import AdapterParseError

    try:
        return predictor(**inputs)
    except AdapterParseError as exc:
        trace.setdefault("errors", []).append(
            {"predictor": type(predictor.signature).__name__ if hasattr(predictor, "signature") else "?",
             "error": "unparsable LM reply", "reply": str(getattr(exc, "lm_response", ""))[:300]}
        )
        return None


@dataclass(frozen=True)
class HumanDemoSpec:
    """How one predictor of a program gets human demonstrations (a program's ``human_demo_builders()`` maps predictor
    names to these): ``variant`` — which human library (``full`` solution processes, their ``wikipedia`` /
    ``wikidata`` halves, or ``merge`` for the human merge examples, which are demos as they are); ``build`` — one
    human solution process → that predictor's demo, or None when the trace has nothing for it; ``pool`` — draw
    ``pool × k`` traces and keep the first ``k`` demos (for predictors only some traces can serve); ``library`` — a
    program's own demo source (e.g. SS-CoT's Bamboogle decompositions) used instead of the human library."""

    variant: str
    build: Callable[[Any], Any] | None = None
    pool: int = 1
    library: Callable[[], list] | None = None


def none_if_empty(text: Any) -> str | None:
    """A source's answer, cleaned, or None when it gave none (:func:`hqa.metrics.is_empty_answer`)."""
    from hqa.metrics import is_empty_answer

    text = clean_answer(text)
    text = text.strip("[]").strip().strip('"').strip("'").strip()
    return None if is_empty_answer(text) else text

