"""Whether a run measured the program or its parser (issue 53): per run, the LM replies that could not be parsed,
the requests sent again, the answers given after a failure (``fallback``) and the questions that failed outright,
each as a share of the LM calls or of the questions.  Read from each predictions row's counts
(:class:`hqa.lm.calls.LMRequestCounter`) and ``fallback`` (:func:`hqa.answering.presentation.fallback_of`); rows
written before issue 53 have no counts and are said to lack them."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hqa.reports.markdown import table

__all__ = ["reliability_markdown", "reliability_stats", "RELIABILITY_METRICS"]

#: the run-level numbers logged as MLflow metrics (``<prefix>_<name>``) and listed by ``hqa runs``
RELIABILITY_METRICS = ("parse_failure_rate", "retry_rate", "fallback_rate", "error_rate")


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None


def reliability_stats(rows: list[dict]) -> dict[str, Any]:
    """Counts and shares over ``rows``: ``parse_failures`` and ``retries`` per LM call, ``cached_lm_calls`` of the
    calls, questions with a parse failure, ``fallbacks`` (by kind and by failed step) and ``errors`` per
    question; ``counted`` is how many rows hold the counts (0 for rows written before they were recorded)."""
    counted = [r for r in rows if "parse_failures" in r]
    calls = sum(float(r.get("lm_calls") or 0) for r in counted)
    parse = sum(float(r.get("parse_failures") or 0) for r in counted)
    retries = sum(float(r.get("retries") or 0) for r in counted)
    cached = sum(float(r.get("cached_lm_calls") or 0) for r in counted)
    fallbacks = [r["fallback"] for r in rows if isinstance(r.get("fallback"), dict)]
    errors = sum(1 for r in rows if r.get("error"))
    n = len(rows)
    return {
        "n": n, "counted": len(counted), "lm_calls": int(calls), "cached_lm_calls": int(cached),
        "parse_failures": int(parse), "parse_failure_rate": _share(parse, calls),
        "questions_with_parse_failure": sum(1 for r in counted if r.get("parse_failures")),
        "retries": int(retries), "retry_rate": _share(retries, calls),
        "fallbacks": len(fallbacks), "fallback_rate": _share(len(fallbacks), n),
        "fallback_kinds": dict(Counter(str(f.get("kind")) for f in fallbacks)),
        "fallback_steps": dict(Counter(str(f.get("step")) for f in fallbacks).most_common(5)),
        "errors": errors, "error_rate": _share(errors, n),
    }


def reliability_markdown(summary: dict[str, Any]) -> list[str]:
    """The report's "Reliability" section (empty when the summary has none)."""
    rel = summary.get("reliability")
    if not rel:
        return []
    lines = ["## Reliability", ""]
    if not rel["counted"]:
        lines += ["These rows were written before hqa counted parse failures and retries per question; "
                  f"{rel['fallbacks']} fallbacks and {rel['errors']} errors are all that can be said.", ""]
        return lines

    def pct(v: float | None) -> str:
        return "—" if v is None else f"{100 * v:.1f}%"

    lines += table(["", "count", "share"],
                   [["LM calls", rel["lm_calls"], ""],
                    ["served by DSPy's cache", rel["cached_lm_calls"], pct(_share(rel["cached_lm_calls"],
                                                                                 rel["lm_calls"])) + " of calls"],
                    ["replies that could not be parsed", rel["parse_failures"], pct(rel["parse_failure_rate"])
                     + " of calls"],
                    ["questions with an unparsable reply", rel["questions_with_parse_failure"],
                     pct(_share(rel["questions_with_parse_failure"], rel["counted"])) + " of questions"],
                    ["requests sent again", rel["retries"], pct(rel["retry_rate"]) + " of calls"],
                    ["answers given after a failure (fallback)", rel["fallbacks"], pct(rel["fallback_rate"])
                     + " of questions"],
                    ["questions that failed (error)", rel["errors"], pct(rel["error_rate"]) + " of questions"]])
    if rel["fallbacks"]:
        kinds = ", ".join(f"{k} {v}" for k, v in rel["fallback_kinds"].items())
        steps = ", ".join(f"{k} {v}" for k, v in rel["fallback_steps"].items())
        lines += [f"Fallbacks by where the answer came from: {kinds}; by what failed first: {steps}.", ""]
    if rel["counted"] < rel["n"]:
        lines += [f"{rel['n'] - rel['counted']} of {rel['n']} rows were written before the counts were recorded.", ""]
    return lines
