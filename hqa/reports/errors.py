"""HumanIQ Table 9: the error categories of the wrong final answers, where a trace lets them be told automatically
(:func:`error_categories`); category (1) and the manual reading behind the paper's counts cannot be."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from hqa.reports.markdown import table
from hqa.reports.retrieval import evidence_text
from hqa.reports.sources import SOURCES, source_answer
from hqa.schemas.trace import Trace, trace_of
from hqa.scoring.metrics import answer_recall
from hqa.scoring.stats import row_correct, scored_rows

__all__ = ["ERROR_CATEGORIES", "error_categories", "error_category", "errors_markdown"]

# The paper's categories, in the order hqa tests them; (1) cannot be told from a trace (the rows do not say the
# answer sits in a table) and is never assigned.
ERROR_CATEGORIES = (
    "(1) lack of support for tables",
    "(2) SPARQL query generation",
    "(3) entity selection",
    "(4) iteration limit error",
    "(5) final response generation step",
    "(6) search: incorrect document picked",
    "(7) answer not found in document",
    "not classified automatically",
)
_TEXT_TOOL_RE = re.compile(r"search|wikipedia|read|page|passage", re.I)


def _retrieved_text(t: Trace) -> list[str]:
    """Text the program retrieved from Wikipedia: text-tool outputs, observations of text-tool steps, passages."""
    out = [str(c.output) for c in t.tool_calls if _TEXT_TOOL_RE.search(c.tool) and c.output]
    out += [str(s.get("observation") or "") for s in t.steps
            if isinstance(s, dict) and _TEXT_TOOL_RE.search(str(s.get("tool") or s.get("action") or ""))]
    out += evidence_text(t.passages)
    return [x for x in out if x.strip()]


def error_category(row: dict) -> str | None:
    """The Table 9 category of a row whose final answer is wrong (None when it is right), first match in order:
    (5) some source answer is correct but the final one is not; (4) the agent's loop ended without Finish and
    without another stop reason; (3) the program linked entities and none is a gold question entity; (2) SPARQL
    queries were issued and none returned rows; (6) text was retrieved and no gold answer occurs in any of it;
    (7) a gold answer occurs in the retrieved text but the text answer misses it.  Anything else is left
    unclassified (the paper's categories are a manual reading of the solution processes)."""
    if row_correct(row, source_answer(row, "final")):
        return None
    t = trace_of(row)
    merged = t.merged is not False  # a single pipeline's output (imported late fusion) is no merge
    if merged and any(row_correct(row, a) for s in SOURCES if (a := source_answer(row, s))):
        return ERROR_CATEGORIES[4]
    if t.finished is False and not t.stopped and t.steps:
        return ERROR_CATEGORIES[3]
    linked = t.linked_ids()
    if linked and row.get("gold_entities") and not linked & set(row["gold_entities"]):
        return ERROR_CATEGORIES[2]
    if t.sparql and not any(q.non_empty for q in t.sparql):
        return ERROR_CATEGORIES[1]
    texts = _retrieved_text(t)
    if texts:
        golds = [g for g in row.get("gold") or [] if str(g).strip()]
        found = any(answer_recall(x, golds) >= 1.0 for x in texts)
        return ERROR_CATEGORIES[6] if found else ERROR_CATEGORIES[5]
    return ERROR_CATEGORIES[7]


def error_categories(rows: list[dict]) -> dict[str, Any]:
    """Counts of :func:`error_category` over the scored rows whose final answer is wrong."""
    cats = [c for r in scored_rows(rows) if (c := error_category(r))]
    counts = Counter(cats)
    return {"wrong": len(cats), "counts": {c: counts.get(c, 0) for c in ERROR_CATEGORIES}}


def errors_markdown(summary: dict[str, Any]) -> list[str]:
    """The report's section of :func:`error_categories` (only when some final answer is wrong)."""
    lines: list[str] = []
    ec = summary.get("error_categories") or {}
    if ec.get("wrong"):
        lines += ["## Error categories of the wrong final answers (HumanIQ Table 9)", "",
                  "Assigned automatically from the trace, first match in the order (5), (4), (3), (2), (6)/(7); "
                  "(1) cannot be told from a trace and is never assigned "
                  "(see hqa.reports.errors.error_category).", ""]
        lines += table(["category", "questions"], [[c, v] for c, v in ec["counts"].items()])
    return lines
