"""HumanIQ's per-source analysis: Table 5 (re / prec / prev per source, per benchmark and Aggregated, next to the
published values :data:`HUMANIQ_TABLE5`) and the agreement of the source answers (Figure 4).  Each definition:
docs/evaluation.md, "Definitions" (per source, agreement buckets).
"""

from __future__ import annotations

from typing import Any

from hqa.reports.markdown import table
from hqa.schemas.trace import trace_of
from hqa.scoring.answers import answer_or_none
from hqa.scoring.metrics import answer_recall, normalize_answer, token_f1
from hqa.scoring.stats import BENCHMARKS, benchmark_of, mean, ratio, row_correct, scored_rows

__all__ = ["AGREE_F1", "BUCKETS", "HUMANIQ_TABLE5", "SOURCES", "agree", "bucket", "by_benchmark", "selected",
           "source_analysis", "source_answer", "source_table", "sources_markdown"]

SOURCES = ("text", "kg", "parametric")
BUCKETS = ("3 agree", "3 sources, 2 agree", "3 differ", "2 agree", "2 differ", "single source", "no source")
# HumanIQ Table 5 as published (percent), GPT-3.5 and GPT-4 rows: (re, prec, prev) for Mintaka, QALD, CompMix and
# Aggregated; "stru." is kg, "unstru." text, "param." parametric.  Reference values, not measured here.
_TABLE5_COLUMNS = ("mintaka", "qald", "compmix", "aggregated")
_TABLE5_PUBLISHED = {
    ("GPT-3.5", "kg"): (33.3, 87.8, 20.2, 32.4, 87.9, 27.0, 40.9, 87.3, 26.9, 35.5, 87.6, 24.7),
    ("GPT-3.5", "text"): (67.6, 87.3, 47.5, 58.5, 88.0, 48.0, 57.5, 87.3, 43.5, 61.2, 87.5, 46.3),
    ("GPT-3.5", "parametric"): (100.0, 79.8, 72.7, 97.7, 70.0, 67.2, 100.0, 74.6, 65.2, 99.3, 74.8, 68.3),
    ("GPT-4", "kg"): (52.5, 82.6, 36.3, 62.0, 95.6, 48.9, 65.2, 83.3, 44.5, 59.9, 87.1, 43.2),
    ("GPT-4", "text"): (81.8, 93.8, 71.2, 69.0, 85.7, 54.9, 71.5, 92.0, 60.1, 74.1, 90.5, 62.0),
    ("GPT-4", "parametric"): (100.0, 90.4, 84.3, 97.8, 79.0, 64.8, 100.0, 80.8, 65.8, 99.2, 83.4, 71.6),
}
#: model → source → benchmark (or "aggregated") → (re, prec, prev)
HUMANIQ_TABLE5: dict[str, dict[str, dict[str, tuple[float, ...]]]] = {}
for (model, source), values in _TABLE5_PUBLISHED.items():
    HUMANIQ_TABLE5.setdefault(model, {})[source] = {b: values[3 * i:3 * i + 3] for i, b in enumerate(_TABLE5_COLUMNS)}
del model, source, values
AGREE_F1 = 0.8


def source_answer(row: dict, source: str) -> str | None:
    """The non-empty answer of ``source`` (text / kg / parametric, or final) of a row, else None."""
    if source == "final":
        return answer_or_none(row.get("answer"))
    return answer_or_none(trace_of(row).answers.get(source))


def agree(a: str, b: str) -> bool:
    """Two answers agree when their normalised forms are equal or their token F1 is at least 0.8."""
    return normalize_answer(a) == normalize_answer(b) or token_f1(a, [b]) >= AGREE_F1


def selected(final: str | None, answer: str) -> bool:
    """The final answer is the source's answer: they agree, or the final answer states it (the source answer's
    normalised form occurs in it as whole tokens — a long final answer of HumanIQ's response generation)."""
    return bool(final) and (agree(final, answer) or answer_recall(final, [answer]) >= 1.0)


def bucket(answers: list[str]) -> str:
    """The agreement bucket of a question's non-empty source answers (HumanIQ Figure 4): three sources that all
    agree, agree in a pair only, or all differ, kept apart from two sources that agree or differ."""
    if not answers:
        return "no source"
    if len(answers) == 1:
        return "single source"
    pairs = [(i, j) for i in range(len(answers)) for j in range(i + 1, len(answers))]
    agreeing = sum(agree(answers[i], answers[j]) for i, j in pairs)
    if len(answers) == 2:
        return "2 agree" if agreeing else "2 differ"
    if agreeing == len(pairs):
        return "3 agree"
    return "3 differ" if agreeing == 0 else "3 sources, 2 agree"


def source_analysis(rows: list[dict]) -> dict[str, Any]:
    """HumanIQ Table 5 per source — re (responded), prec (precision when responding), prev (the source's answer is
    the final one) — plus recall (correct / all) and the agreement buckets (Figure 4).  Rows without gold
    (:func:`scored_rows`) are left out."""
    rows = scored_rows(rows)
    n = len(rows)
    per_source: dict[str, dict[str, Any]] = {}
    for s in (*SOURCES, "final"):
        given = [(r, a) for r in rows if (a := source_answer(r, s))]
        correct = sum(1 for r, a in given if row_correct(r, a))
        chosen = sum(1 for r, a in given if selected(source_answer(r, "final"), a))
        per_source[s] = {"answered": len(given), "correct": correct, "re": ratio(len(given), n),
                         "prec": ratio(correct, len(given)),
                         "prev": None if s == "final" else ratio(chosen, n), "recall": ratio(correct, n)}
    buckets: dict[str, list[dict]] = {b: [] for b in BUCKETS}
    for r in rows:
        buckets[bucket([a for s in SOURCES if (a := source_answer(r, s))])].append(r)
    multi = n - len(buckets["no source"]) - len(buckets["single source"])
    return {
        "sources_seen": [s for s in SOURCES if per_source[s]["answered"]],
        "questions_with_source_answers": n - len(buckets["no source"]),
        "questions_with_several_source_answers": multi,
        "per_source": per_source,
        "agreement": {b: {"count": len(rs), "share": ratio(len(rs), n),
                          "accuracy": ratio(sum(1 for r in rs if row_correct(r, r.get("answer"))), len(rs))}
                      for b, rs in buckets.items()},
    }


def by_benchmark(rows: list[dict]) -> dict[str, list[dict]]:
    """``rows`` grouped by benchmark (:func:`hqa.scoring.stats.benchmark_of` their dataset), in first-seen order."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(benchmark_of(r.get("dataset")), []).append(r)
    return out


def source_table(rows: list[dict]) -> dict[str, Any]:
    """HumanIQ Table 5: re / prec / prev per source (percent) for each benchmark in the rows and Aggregated, the
    unweighted mean of the benchmarks' values (how the paper's Aggregated column is formed: e.g. GPT-4 stru. re
    (52.5 + 62.0 + 65.2) / 3 = 59.9)."""
    by_bench = by_benchmark(scored_rows(rows))
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for b in sorted(by_bench, key=lambda x: (BENCHMARKS.index(x) if x in BENCHMARKS else 9, x)):
        per = source_analysis(by_bench[b])["per_source"]
        out[b] = {s: {k: None if per[s][k] is None else round(100 * per[s][k], 1) for k in ("re", "prec", "prev")}
                  for s in SOURCES}
        out[b]["n"] = len(by_bench[b])  # type: ignore[assignment]
    if out:
        out["aggregated"] = {s: {k: mean([v[s][k] for v in out.values() if v[s][k] is not None])
                                 for k in ("re", "prec", "prev")} for s in SOURCES}
        for v in out["aggregated"].values():
            for k in v:
                v[k] = None if v[k] is None else round(v[k], 1)
    return out


def sources_markdown(summary: dict[str, Any]) -> list[str]:
    """The report's sections of :func:`source_analysis` and :func:`source_table`: answers per source, Table 5 per
    benchmark with the published values, and the agreement buckets (each only when the run has what it needs)."""
    lines: list[str] = []
    src = summary["sources"]
    if src["sources_seen"]:
        lines += ["## Answers per source (HumanIQ Table 5)", "",
                  "correct = a gold answer occurs in the source's answer (normalised, whole tokens) or a gold QID "
                  "is named; re = answered / all (the source gave a response), prec = correct / answered, prev = "
                  "questions whose final answer is the source's answer (agrees with it or states it) / all, recall = "
                  "correct / "
                  "all.", ""]
        lines += table(["source", "answered", "correct", "re", "prec", "prev", "recall"],
                       [[s, v["answered"], v["correct"], v["re"], v["prec"], v["prev"], v["recall"]]
                        for s, v in src["per_source"].items() if s in src["sources_seen"] or s == "final"])
    t5 = summary.get("table5") or {}
    if src["sources_seen"] and t5:
        cols = list(t5)
        lines += ["## HumanIQ Table 5: per benchmark and Aggregated (percent)", "",
                  "Aggregated = unweighted mean of the benchmarks' values, as in the paper.  Published values follow "
                  "for comparison (they are GPT-3.5 / GPT-4 runs judged by hand; hqa's are automatic).", ""]
        header = ["source"] + [f"{b} {k}" for b in cols for k in ("re", "prec", "prev")]
        seen = [s for s in SOURCES if s in src["sources_seen"]]  # a source the program never asks is left out
        lines += table(header, [[s] + [t5[b][s][k] for b in cols for k in ("re", "prec", "prev")] for s in seen])
        pub = [[f"paper {model} {s}"] + [HUMANIQ_TABLE5[model][s].get(b, (None,) * 3)[i] for b in cols
                                         for i in range(3)]
               for model in HUMANIQ_TABLE5 for s in seen]
        if any(b in BENCHMARKS for b in cols):
            lines += table(header, pub)
    if src["questions_with_several_source_answers"]:
        lines += ["## Agreement of the source answers (HumanIQ Figure 4)", "",
                  f"Two answers agree when normalised-equal or token F1 ≥ {AGREE_F1}; accuracy = share of the bucket "
                  "whose final answer is correct.", ""]
        lines += table(["bucket", "questions", "share", "final accuracy"],
                       [[b, v["count"], v["share"], v["accuracy"]] for b, v in src["agreement"].items()])
    return lines
