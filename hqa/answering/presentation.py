"""How an answer or an abstention is shown: the one answer shape of every program (``hqa ask --json``, ``hqa serve``,
``hqa batch`` and predictions rows, :func:`prediction_fields`) and the text ``hqa ask`` prints for an abstention
(:func:`abstention_lines`) with the ranked candidates (:func:`candidate_lines`).  The policy that decides to answer
or abstain is :mod:`hqa.answering.selective`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ANSWER_KEYS", "abstention_lines", "candidate_lines", "prediction_fields"]

#: the keys every program's answer has in ``hqa ask --json``, ``hqa serve``, ``hqa batch`` and predictions rows
ANSWER_KEYS = ("answer", "abstained", "reason", "confidence", "candidates")


def _candidates(pred: Any, trace: dict) -> list[dict[str, Any]]:
    """The ranked candidates a prediction or its trace names (each a dict with at least ``text``), best first."""
    given = getattr(pred, "candidates", None)
    if given:
        return [c if isinstance(c, dict) else {"text": str(c)} for c in given]
    support = trace.get("candidate_support")
    if support:
        return [dict(c) for c in support if isinstance(c, dict)]
    for key in ("candidates", "merge_candidates"):  # the simple program's, HumanIQ's final response generation's
        if trace.get(key):
            return [{"text": str(c)} for c in trace[key]]
    return []


def prediction_fields(pred: Any) -> dict[str, Any]:
    """The answer of any program in one shape (:data:`ANSWER_KEYS`): ``answer`` (None when there is none),
    ``abstained`` (True when the program abstained or its answer is empty), ``reason`` (why not, else None),
    ``confidence`` (the selective answerer's, None where the program has none) and ``candidates`` (the ranked
    candidates the program chose among, as far as it records them)."""
    trace = getattr(pred, "trace", None)
    trace = trace if isinstance(trace, dict) else {}
    selective = trace.get("selective") if isinstance(trace.get("selective"), dict) else {}
    confidence = getattr(pred, "confidence", None)
    confidence = selective.get("confidence") if confidence is None else confidence
    raw = getattr(pred, "answer", None)
    answer = None if raw is None else str(raw)  # as the program wrote it (the rows score this text)
    abstained = getattr(pred, "abstained", None) is True or not (answer or "").strip()
    reason = None
    if abstained:
        answer = None
        reason = getattr(pred, "reason", None) or selective.get("reason") or "the program gave no answer"
    return {"answer": answer, "abstained": abstained, "reason": reason,
            "confidence": None if confidence is None else float(confidence), "candidates": _candidates(pred, trace)}


def abstention_lines(pred: Any, world: str) -> list[str] | None:
    """What ``hqa ask`` prints for an abstention, one line per item: "No answer found in <world>" with the reason,
    then the best candidates with their evidence; None when the prediction answers."""
    fields = prediction_fields(pred)
    if not fields["abstained"]:
        return None
    return [f"No answer found in {world} ({fields['reason']}).", *candidate_lines(fields["candidates"])]


def candidate_lines(candidates: Sequence[dict[str, Any]], limit: int = 5) -> list[str]:
    """The ranked candidates as text lines (``hqa ask``'s abstention and trace): text, source, score, support."""
    if not candidates:
        return []
    lines = ["Best candidates:" if len(candidates) > 1 else "Best candidate:"]
    for c in list(candidates)[:limit]:
        where = ", ".join(x for x in (str(c.get("source") or ""), "" if c.get("score") is None else
                                      f"score {float(c['score']):.3g}") if x)
        support = " ".join(str(c.get("support") or "").split())[:160]
        lines.append(f"  {c.get('text')}" + (f" [{where}]" if where else "") + (f" — {support}" if support else ""))
    return lines
