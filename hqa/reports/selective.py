"""Selective answering over evaluation rows: the risk-coverage curve (:func:`risk_coverage`) and, at the shipped
threshold, coverage, precision of the answered questions and accuracy (:func:`selective_summary`), with the report's
section (:func:`selective_markdown`).  An abstention is never a correct answer for accuracy.  The policy that
answers or abstains is :mod:`hqa.answering.selective`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["risk_coverage", "selective_markdown", "selective_summary"]


def _row_parts(row: dict) -> tuple[float | None, bool, bool]:
    """(confidence, abstained, correct) of a predictions row; correct is answer-in-prediction recall."""
    trace = row.get("trace") or {}
    sel = trace.get("selective") or {}
    conf = sel.get("confidence")
    abstained = bool(sel.get("abstained")) or not str(row.get("answer") or "").strip()
    correct = bool((row.get("scores") or {}).get("recall", 0.0)) and not abstained
    return (None if conf is None else float(conf)), abstained, correct


def risk_coverage(rows: Sequence[dict]) -> list[dict[str, float]]:
    """The risk-coverage curve: questions answered in order of falling confidence (ties together), and at each
    threshold the coverage (share answered), precision (share of those right) and risk (1 − precision).  A
    question without a candidate (no confidence) is never answered."""
    parts = [_row_for_curve(r) for r in rows]
    n = len(parts)
    scored = sorted((p for p in parts if p[0] is not None), key=lambda p: -p[0])
    out, answered, right, i = [], 0, 0, 0
    while i < len(scored):
        threshold = scored[i][0]
        while i < len(scored) and scored[i][0] == threshold:
            answered += 1
            right += scored[i][1]
            i += 1
        precision = right / answered
        out.append({"threshold": threshold, "coverage": answered / n, "precision": precision,
                    "risk": 1 - precision})
    return out


def _row_for_curve(row: dict) -> tuple[float | None, bool]:
    """(confidence, the best candidate is right) of a row; no confidence when it could never be answered (no
    candidate, or a best candidate of the wrong type)."""
    sel = (row.get("trace") or {}).get("selective") or {}
    conf = sel.get("confidence")
    if conf is None or sel.get("type_fit", 0) < 0:
        return None, False
    from hqa.scoring.metrics import answer_recall

    return float(conf), bool(answer_recall(str(sel.get("best") or ""), row.get("gold") or []))


def selective_summary(rows: Sequence[dict]) -> dict[str, Any] | None:
    """Coverage, precision of the answered questions and accuracy (abstentions count as wrong) of ``rows``, with
    the risk-coverage curve; None when no row was answered selectively (no ``selective`` trace)."""
    rows = list(rows)
    if not rows or not any((r.get("trace") or {}).get("selective") for r in rows):
        return None
    parts = [_row_parts(r) for r in rows]
    answered = [p for p in parts if not p[1]]
    right = sum(p[2] for p in answered)
    return {"n": len(rows), "answered": len(answered), "abstained": len(rows) - len(answered),
            "coverage": len(answered) / len(rows), "precision": right / len(answered) if answered else 0.0,
            "accuracy": right / len(rows), "curve": risk_coverage(rows)}


def selective_markdown(summary: dict[str, Any] | None,
                       points: Sequence[float] = (0.1, 0.25, 0.5, 0.75, 1.0)) -> list[str]:
    """Report lines for a :func:`selective_summary`: precision / coverage at the chosen threshold, and the
    risk-coverage curve at a few coverages (the last threshold whose coverage does not exceed each)."""
    s = summary
    if not s:
        return []
    lines = ["## Selective answering", "",
             f"At the calibrated threshold: answered {s['answered']} of {s['n']} (coverage {s['coverage']:.3f}), "
             f"precision of the answered {s['precision']:.3f}, accuracy {s['accuracy']:.3f} (an abstention is "
             "not a correct answer).", "", "Risk-coverage curve:", "",
             "| coverage ≤ | threshold | coverage | precision | risk |", "|---|---|---|---|---|"]
    for target in points:
        best = [p for p in s["curve"] if p["coverage"] <= target + 1e-9]
        if best:
            p = best[-1]
            lines.append(f"| {target:.2f} | {p['threshold']:.3f} | {p['coverage']:.3f} | {p['precision']:.3f} | "
                         f"{p['risk']:.3f} |")
    return lines + [""]
