"""Candidate answers drawn from the kept evidence, and the constrained choice among them.

A small LM cannot compose an answer from evidence, but it can pick one.  :func:`evidence_candidates` lists the
strings the evidence offers as answers, in evidence order:

* ``sparql`` items — the object label of a one-hop row (``meta["o_label"]``), else every value of the row
  (``var=value`` with ``(Qid)`` suffixes dropped);
* ``triples`` items — the subject and object labels of the fact;
* ``text`` items — the passage title without a trailing "(…)" qualifier, then the title-case name spans and dates
  of the passage text.

ISO dates are shown as Wikidata's English labels show them ("13 July 1940"; a January 1st date as its year, the
way year-precision values are stored).  A candidate that already occurs in the question (whole words, case-folded)
is dropped — it names what is asked about, not the answer — unless the question offers a choice (" or "), and so
are duplicates (case-folded) and fragments (under 3 characters, or with escape sequences).  The expected answer
type of the question then filters the list when it leaves anything: "when / what year / which date" questions keep
dates and years, "how many / how much" questions keep numbers, "who" questions drop dates, numbers and
lowercase-only labels (generic concepts such as "actor" or "literary work").  At most ``max_candidates`` are kept.
:func:`choose` asks the LM for one of them with a ``Literal``-typed output field.
"""

from __future__ import annotations

import re
from typing import Any

import dspy

from hqa.retrievers.base import Evidence

_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")
_QID_SUFFIX = re.compile(r"\s*\((?:Q|P)\d+\)\s*$")
_ROW_PART = re.compile(r"(\w+)=(.*?)(?=, \w+=|$)")
_CONNECT = r"(?:of|the|and|de|del|la|le|von|van|da|du|for|in|on)"
_TOKEN = r"[A-Z](?:[\w'’&-]|\.(?=\w))*"  # a capitalised word; inner dots only ("F.C")
_NAME = re.compile(rf"\b{_TOKEN}(?:\s+(?:{_CONNECT}\s+)*{_TOKEN})*")
_DATE = re.compile(r"\b(?:\d{1,2} [A-Z][a-z]+ \d{3,4}|[A-Z][a-z]+ \d{1,2}, \d{3,4}|\d{4}-\d\d-\d\d|1\d{3}|20\d\d)\b")
_WORD = re.compile(r"[^\w\s]")
_SENTENCE_WORDS = {
    "the", "a", "an", "it", "he", "she", "they", "his", "her", "its", "their", "this", "that", "these", "in", "on",
    "at", "as", "after", "before", "during", "when", "while", "there", "who", "what", "which", "page", "summary",
    "is", "was", "yes", "no", "also", "born", "however", "following", "since", "from", "with", "for", "by",
}

_ISO = re.compile(r"^(-?\d{4})-(\d\d)-(\d\d)(?:T[\d:]+(?:Z|[+-]\d\d:\d\d)?)?$")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_IS_DATE = re.compile(r"^(?:\d{1,2} [A-Z][a-z]+ -?\d{3,4}|[A-Z][a-z]+ \d{1,2}, \d{3,4}|-?\d{3,4})$")
_IS_NUMBER = re.compile(r"^[+-]?\d[\d,]*(?:\.\d+)?$")
_WHEN = re.compile(r"^\s*(?:when\b|(?:in |on )?(?:what|which) (?:year|date|day|month|century)\b)|\byear\b", re.I)
_HOW_MANY = re.compile(r"\bhow (?:many|much)\b|\bnumber of\b", re.I)
_WHO = re.compile(r"^\s*(?:who|whom|whose)\b", re.I)

__all__ = ["evidence_candidates", "resolve_answer_mode", "choose", "SourceMerge", "answer_type", "show_value"]


def show_value(value: str) -> str:
    """An ISO date as Wikidata's English label shows it ("1940-07-13" → "13 July 1940"; "1969-01-01" → "1969");
    anything else unchanged."""
    m = _ISO.match(value.strip())
    if not m or not 1 <= int(m.group(2)) <= 12:
        return value
    year, month, day = m.group(1), int(m.group(2)), int(m.group(3))
    if month == 1 and day == 1:
        return year
    return f"{day} {_MONTHS[month - 1]} {year}"


def answer_type(question: str) -> str:
    """``date``, ``number``, ``who`` or ``any`` — the kind of answer the question asks for."""
    if _HOW_MANY.search(question or ""):
        return "number"
    if _WHEN.search(question or ""):
        return "date"
    if _WHO.search(question or ""):
        return "who"
    return "any"


def _fits(cand: str, kind: str) -> bool:
    if kind == "date":
        return bool(_IS_DATE.match(cand))
    if kind == "number":
        return bool(_IS_NUMBER.match(cand))
    if kind == "who":
        return not (_IS_DATE.match(cand) or _IS_NUMBER.match(cand) or cand == cand.lower())
    return True


def _fold(text: str) -> str:
    return " ".join(_WORD.sub(" ", (text or "").lower()).split())


def _evidence_items(evidence: list[Any]) -> list[Evidence]:
    return [e if isinstance(e, Evidence) else Evidence(**e) for e in evidence]


def _raw_candidates(ev: Evidence) -> list[str]:
    meta = ev.meta or {}
    if ev.source == "sparql":
        if meta.get("o_label"):
            return [str(meta["o_label"])]
        return [_QID_SUFFIX.sub("", value).strip() for _var, value in _ROW_PART.findall(ev.text or "")]
    if ev.source == "triples":
        return [str(meta[key]) for key in ("o_label", "s_label") if meta.get(key)]
    if ev.source == "text":
        out = []
        if meta.get("title"):
            out.append(_QUALIFIER.sub("", str(meta["title"])))
        text = ev.text or ""
        dates = [m.span() for m in _DATE.finditer(text)]
        for m in _NAME.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in dates):
                continue  # the month of a date
            span = re.sub(r"['’]s?$", "", m.group(0).rstrip("."))  # "Orwell's" → "Orwell"
            if _fold(span) not in _SENTENCE_WORDS:
                out.append(span)
        out.extend(m.group(0) for m in _DATE.finditer(text))
        return out
    return []


def evidence_candidates(question: str, evidence: list[Any], max_candidates: int = 8) -> list[str]:
    """Candidate answers in evidence order (see the module docstring)."""
    q = f" {_fold(question)} "
    choice = " or " in q
    seen: set[str] = set()
    pool: list[str] = []
    for ev in _evidence_items(evidence):
        for cand in _raw_candidates(ev):
            cand = show_value(" ".join(cand.split()))
            key = _fold(cand)
            if (not key or len(cand) > 80 or key in seen or re.fullmatch(r"[QP]\d+", cand) or "\\" in cand
                    or (len(cand) < 3 and not cand.isdigit())):
                continue
            if not choice and f" {key} " in q:
                continue
            seen.add(key)
            pool.append(cand)
    kind = answer_type(question)
    typed = [c for c in pool if _fits(c, kind)]
    return (typed or pool)[:max_candidates]


def resolve_answer_mode(mode: str | None, settings) -> str:
    """``grounded`` or ``free``: an explicit mode wins, else ``programs.answer_mode``; ``auto`` is grounded for the
    embedded LM only."""
    mode = mode or getattr(getattr(settings, "programs", None), "answer_mode", "auto") or "auto"
    if mode == "auto":
        return "grounded" if settings.lm.provider == "local" else "free"
    return mode


def choose(predictor, trace: dict, candidates: list[str], **inputs: Any) -> str | None:
    """Ask ``predictor`` for one of ``candidates``: its signature with ``answer`` typed ``Literal[*candidates]``
    (its demos are kept; a ``candidates`` input, as in :class:`GroundedAnswer`, gets the list).

    None when the reply cannot be parsed as one of them (the caller keeps its fallback answer).
    """
    from typing import Literal

    import dspy

    from hqa.programs.common import safe_predict

    signature = predictor.signature.with_updated_fields("answer", type_=Literal[tuple(candidates)])  # type: ignore[valid-type]
    step = dspy.Predict(signature)
    step.demos = list(getattr(predictor, "demos", []) or [])
    step.lm = getattr(predictor, "lm", None)
    if "candidates" in signature.input_fields:
        inputs["candidates"] = candidates
    out = safe_predict(step, trace, **inputs)
    if out is None:
        return None
    answer = str(out.answer)
    return answer if answer in candidates else None


class SourceMerge(dspy.Module):
    """HumanIQ's ending, shared by the agent, the static pipeline and late fusion: the LM's own (parametric) answer
    to the question, then one merge of the text, KG and parametric answers into the final one.

    In grounded mode the merge picks one of the distinct source answers (a ``Literal`` choice); in free mode it
    writes free text; without ``use_merge`` (or when the reply is unparsable) the first source that answered wins,
    text before KG before memory.  Records ``trace["answers"]["parametric"]`` (and ``merge_candidates``)."""

    def __init__(self):
        super().__init__()
        from hqa.signatures.basic import ClosedBookAnswer
        from hqa.signatures.hqa_agent import MergeAnswers

        self.parametric = dspy.Predict(ClosedBookAnswer)
        self.merge = dspy.Predict(MergeAnswers)

    def forward(self, question: str, text: str | None, kg: str | None, trace: dict, settings,
                use_merge: bool = True) -> str:
        from hqa.programs.common import clean_answer, none_if_empty, safe_predict

        param = safe_predict(self.parametric, trace, question=question)
        internal = none_if_empty(param.answer) if param is not None else None
        trace["answers"]["parametric"] = internal
        fallback = text or kg or internal or ""
        if not use_merge:
            return fallback
        inputs = dict(question=question, wikipedia_answer=text or "None", wikidata_answer=kg or "None",
                      internal_knowledge=internal or "None")
        if resolve_answer_mode(None, settings) == "grounded":
            seen: set[str] = set()
            candidates = [a for a in (text, kg, internal) if a and not (_fold(a) in seen or seen.add(_fold(a)))]
            trace["merge_candidates"] = candidates
            if candidates:
                picked = choose(self.merge, trace, candidates, **inputs)
                return picked if picked is not None else fallback
        merged = safe_predict(self.merge, trace, **inputs)
        return clean_answer(merged.answer) if merged is not None else fallback
