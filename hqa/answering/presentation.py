"""How an answer or an abstention is shown: the one answer shape of every program (``hqa ask --json``, ``hqa serve``,
``hqa batch`` and predictions rows, :func:`prediction_fields`) and the text ``hqa ask`` prints for an abstention
(:func:`abstention_lines`) with the ranked candidates (:func:`candidate_lines`).  The policy that decides to answer
or abstain is :mod:`hqa.answering.selective`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ANSWER_KEYS", "FALLBACK_KINDS", "abstention_lines", "candidate_lines", "fallback_line", "fallback_of",
           "prediction_fields"]

#: the keys every program's answer has in ``hqa ask --json``, ``hqa serve``, ``hqa batch`` and predictions rows
ANSWER_KEYS = ("answer", "abstained", "reason", "confidence", "candidates", "fallback")

#: where an answer given after a failure came from (``fallback.kind``, :func:`fallback_of`)
FALLBACK_KINDS = {
    "memory": "the LM's memory answer",
    "candidate": "a ranked candidate from the evidence",
    "sources": "what the other steps and sources found",
    "retry": "an LM reply that came only when asked again",
}


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


def _failures(trace: dict, failures: Sequence[dict] | None) -> tuple[list[dict], list[dict], list[dict]]:
    """(parse failures, sources that could not answer, LM retries) of one question: the trace's ``errors`` and
    ``source_errors`` (nested pipelines' too), the retries its recorder saw (:class:`hqa.lm.calls.LMRequestCounter`
    ``failures``); each ``{"step", "error"}``."""
    from hqa.schemas.trace import failed_sources

    parsed, sources = [], []
    traces = [trace, *[t for t in (trace.get("pipelines") or {}).values() if isinstance(t, dict)]]
    for t in traces:
        parsed += [{"step": str(e.get("predictor") or "?"), "error": str(e.get("error") or "unparsable LM reply")}
                   for e in t.get("errors") or [] if isinstance(e, dict)]
        sources += [{"step": f"source:{name}", "error": " ".join(str(err).split())[:300]}
                    for name, err in failed_sources(t).items()]
    said = {}  # the recorder's words for a predictor's parse failure, more telling than the trace's
    for f in failures or []:
        if f.get("kind") == "parse" and f.get("error"):
            said.setdefault(str(f.get("predictor")), str(f["error"]))
    parsed = [{**p, "error": said.get(p["step"], p["error"])} for p in parsed]
    retries = [{"step": str(f.get("predictor") or "?"), "error": str(f.get("error") or "")}
               for f in failures or [] if f.get("kind") == "retry"]
    return parsed, sources, retries


def fallback_of(answer: str | None, trace: dict, failures: Sequence[dict] | None = None) -> dict[str, Any] | None:
    """Whether an answer came after a failure, in one value (issue 53): None when nothing failed (or there is no
    answer: an abstention says why in ``reason``), else ``{"kind", "step", "error"}`` — ``step`` the first thing
    that failed (a predictor whose reply could not be parsed, ``source:<name>`` for a source that could not answer,
    a predictor whose LM request had to be sent again), ``kind`` where the answer came from instead
    (:data:`FALLBACK_KINDS`): the LM's memory answer, a ranked candidate, the other steps and sources, or — when
    only a retry happened — the retried reply."""
    if not (answer or "").strip():
        return None
    parsed, sources, retries = _failures(trace, failures)
    if trace.get("fallback") == "recall" and not parsed:  # SS-CoT: no sampled chain was valid (Su et al. 2023, §3)
        parsed = [{"step": "parse", "error": "no valid reasoning chain among the samples"}]
    first = (parsed or sources or retries or [None])[0]
    if first is None:
        return None
    if not parsed and not sources:
        kind = "retry"
    else:
        answers = trace.get("answers") if isinstance(trace.get("answers"), dict) else {}
        candidates = [str(c) for c in trace.get("candidates") or trace.get("merge_candidates") or []]
        same = " ".join(str(answer).split()).casefold()
        if answers.get("parametric") and " ".join(str(answers["parametric"]).split()).casefold() == same \
                and trace.get("program") not in ("closedbook", "cot"):
            kind = "memory"
        elif any(" ".join(c.split()).casefold() == same for c in candidates):
            kind = "candidate"
        else:
            kind = "sources"
    return {"kind": kind, "step": first["step"], "error": first["error"][:300]}


def fallback_line(fallback: dict[str, Any] | None) -> str | None:
    """The one line ``hqa ask`` prints under an answer that came after a failure; None when none did."""
    if not fallback:
        return None
    step = str(fallback.get("step") or "?")
    what = (f"source {step.removeprefix('source:')} could not answer" if step.startswith("source:") else
            f"{step}'s LM request was sent again" if fallback.get("kind") == "retry" else
            f"{step}'s reply could not be parsed")
    source = FALLBACK_KINDS.get(str(fallback.get("kind")), str(fallback.get("kind")))
    return f"fallback ({fallback.get('kind')}): {what}; the answer is {source} ({fallback.get('error')})"


def prediction_fields(pred: Any, failures: Sequence[dict] | None = None) -> dict[str, Any]:
    """The answer of any program in one shape (:data:`ANSWER_KEYS`): ``answer`` (None when there is none; never a
    non-string value), ``abstained`` (True when the program abstained or its answer is empty), ``reason`` (why not,
    else None; it names an unparsable reply or a source that could not answer when one did), ``confidence`` (the
    selective answerer's, None where the program has none), ``candidates`` (the ranked candidates the program
    chose among, as far as it records them) and ``fallback`` (:func:`fallback_of`; ``failures``: the question's
    recorded parse failures and retries, :attr:`hqa.lm.calls.LMRequestCounter.failures`)."""
    trace = getattr(pred, "trace", None)
    trace = trace if isinstance(trace, dict) else {}
    selective = trace.get("selective") if isinstance(trace.get("selective"), dict) else {}
    confidence = getattr(pred, "confidence", None)
    confidence = selective.get("confidence") if confidence is None else confidence
    raw = getattr(pred, "answer", None)
    # as the program wrote it (the rows score this text); a value that is no text is no answer
    answer = raw if isinstance(raw, str) else None
    abstained = getattr(pred, "abstained", None) is True or not (answer or "").strip()
    reason = None
    if abstained:
        answer = None
        reason = getattr(pred, "reason", None) or selective.get("reason")
        if not reason:
            parsed, sources, _retries = _failures(trace, failures)
            reason = (f"the program gave no answer: {parsed[0]['step']}'s reply could not be parsed" if parsed else
                      f"the program gave no answer: {sources[0]['step'].removeprefix('source:')} could not answer"
                      if sources else "the program gave no answer")
            if raw is not None and not isinstance(raw, str):
                reason = f"the program's answer was a {type(raw).__name__}, not text"
    return {"answer": answer, "abstained": abstained, "reason": reason,
            "confidence": None if confidence is None else float(confidence), "candidates": _candidates(pred, trace),
            "fallback": fallback_of(answer, trace, failures)}


def abstention_lines(pred: Any, world: str, failures: Sequence[dict] | None = None) -> list[str] | None:
    """What ``hqa ask`` prints for an abstention, one line per item: "No answer found in <world>" with the reason,
    then the best candidates with their evidence; None when the prediction answers.  ``world``: where the evidence
    was looked for (:meth:`hqa.toolbox.Toolbox.evidence_from`)."""
    fields = prediction_fields(pred, failures)
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
