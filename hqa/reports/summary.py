"""A run's report: every analysis of the seed papers over a run's ``predictions.jsonl``, in ``summary.json`` and
``summary.md`` (``hqa report show``), and one report over several runs pooled.

The answer metrics (HumanIQ Tables 1–3 style; errored rows count as wrong) and the QALD measures (GERBIL's, HumanIQ
Table 2) are recomputed from each row's answer, so old rows have them too; rows an import could not match to gold
are left out of every score.  The analyses are :mod:`hqa.reports.sources`, :mod:`~hqa.reports.errors`,
:mod:`~hqa.reports.retrieval` and :mod:`~hqa.reports.selective`; their definitions: docs/evaluation.md.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from hqa.config import write_atomic
from hqa.errors import DataError
from hqa.reports.errors import error_categories, errors_markdown
from hqa.reports.markdown import fmt, summary_plots, table
from hqa.reports.reliability import reliability_markdown, reliability_stats
from hqa.reports.retrieval import (HUMANIQ_REFERENCE, cost_markdown, cost_stats, entity_linking, hop_retrieval,
                                   prefix_cache_stats, retrieval_markdown, sparql_stats, sscot_stats)
from hqa.reports.selective import selective_markdown, selective_summary
from hqa.reports.sources import SOURCES, by_benchmark, source_analysis, source_answer, source_table, sources_markdown
from hqa.schemas.run_folder import RunFolder, read_rows
from hqa.schemas.trace import trace_of
from hqa.scoring.metrics import macro_f1_qald
from hqa.scoring.stats import BENCHMARKS, METRIC_NAMES, mean, ratio, row_score, scored_rows

__all__ = ["pool_runs", "render_markdown", "summarize_rows", "write_report"]


def _qald(rows: list[dict]) -> dict[str, Any]:
    """GERBIL's macro measures over the rows' answers (:func:`hqa.scoring.metrics.macro_f1_qald`)."""
    return macro_f1_qald((r.get("answer"), r.get("gold") or [], r.get("gold_ids") or []) for r in rows)


def summarize_rows(rows: list[dict], title: str | None = None) -> dict[str, Any]:
    if not rows:
        raise DataError("no evaluation rows to report on")
    scored = scored_rows(rows)
    return {
        "title": title,
        "n": len(rows),
        "unmatched": len(rows) - len(scored),
        # Table 5's re needs no gold: over every row, matched or not
        "responses_all_rows": {s: ratio(sum(1 for r in rows if source_answer(r, s)), len(rows)) for s in SOURCES},
        "errors": sum(1 for r in rows if r.get("error")),
        "degraded": sum(1 for r in rows if r.get("degraded")),
        "reliability": reliability_stats(rows),  # parse failures, retries, fallbacks, errors (hqa.reports.reliability)
        "programs": dict(Counter(trace_of(r).program or "?" for r in rows)),
        "datasets": dict(Counter(str(r.get("dataset") or "?") for r in rows)),
        "metrics": {k: mean([row_score(r, k) for r in scored]) for k in METRIC_NAMES},
        "qald": _qald(scored),
        "per_benchmark": {b: {"n": len(rs), **{k: mean([row_score(r, k) for r in rs]) for k in METRIC_NAMES},
                              "f1_qald": _qald(rs)["f1_qald"]} for b, rs in by_benchmark(scored).items()},
        "table5": source_table(rows),
        "error_categories": error_categories(rows),
        "cost": cost_stats(rows),
        "prefix_cache": prefix_cache_stats(rows),
        # LM calls but no token usage: replies served from the DSPy cache (or an LM that reports no usage)
        "rows_without_token_usage": sum(1 for r in rows if (r.get("lm_calls") or 0) > 0
                                        and not (r.get("prompt_tokens") or r.get("completion_tokens"))),
        "humaniq_reference_gpt4": HUMANIQ_REFERENCE,
        "sources": source_analysis(rows),
        "hop_retrieval": hop_retrieval(rows),
        "entity_linking": entity_linking(rows),
        "sparql": sparql_stats(rows),
        "sscot": sscot_stats(rows),
        "selective": selective_summary(rows),  # hqa.reports.selective: coverage, precision, risk-coverage curve
    }


def render_markdown(summary: dict[str, Any], title: str | None = None) -> str:
    """``summary.md``: the run's head and answer metrics, then each analysis's own section in the report's order."""
    m = summary["metrics"]
    head = title or summary.get("title") or "evaluation"
    programs = ", ".join(f"{k} ({v})" for k, v in summary.get("programs", {}).items())
    datasets = ", ".join(f"{k} ({v})" for k, v in summary.get("datasets", {}).items())
    lines = [f"# {head}", "",
             f"{summary['n']} questions, {summary['errors']} errors"
             + (f", {summary['degraded']} answered with the KG endpoint down" if summary.get("degraded") else "")
             + f". Programs: {programs}. Datasets: {datasets}.", ""]
    if summary.get("unmatched"):
        lines += [f"{summary['unmatched']} of {summary['n']} questions have no gold answer to match (an imported run "
                  "on questions whose gold the import does not have): they are left out of every score below.", ""]
        resp = summary.get("responses_all_rows") or {}
        lines += ["Response rate (Table 5's re, no gold needed) over all questions: "
                  + ", ".join(f"{s} {fmt(v)}" for s, v in resp.items()) + ".", ""]
    lines += ["## Answer metrics", ""]
    q = summary.get("qald") or {}
    lines += table(["n scored", "errors", "EM", "token F1", "recall", "Hits@1", "Macro F1 QALD", "Macro F1"],
                   [[summary["n"] - summary.get("unmatched", 0), summary["errors"], m["em"], m["f1"], m["recall"],
                     m["hits1"], q.get("f1_qald"), q.get("f1")]])
    lines += ["Hits@1 = the first answer equals a gold answer after normalisation (automatic EM, HumanIQ §4.3 for "
              "CompMix and Mintaka); Macro F1 QALD = GERBIL's measure over answer sets (QALD); the paper's \"M\" "
              "columns are a manual judgement hqa cannot make.", ""]
    per_b = summary.get("per_benchmark") or {}
    if len(per_b) > 1 or any(b in BENCHMARKS for b in per_b):
        lines += ["## Per benchmark (HumanIQ Tables 1-3 metrics)", ""]
        lines += table(["benchmark", "n", "Hits@1", "Macro F1 QALD", "recall"],
                       [[b, v["n"], v["hits1"], v["f1_qald"], v["recall"]] for b, v in per_b.items()])
    lines += reliability_markdown(summary)
    lines += cost_markdown(summary)
    lines += sources_markdown(summary)
    lines += errors_markdown(summary)
    imp = summary.get("import")
    if imp:
        lines += ["## Imported from the authors' runs", ""] + [f"- {note}" for note in imp.get("notes", [])] + [""]
    lines += retrieval_markdown(summary)
    lines += selective_markdown(summary.get("selective"))
    return "\n".join(lines)


def write_report(run_dir: Path, title: str | None = None) -> dict[str, Any]:
    """Summarise ``run_dir/predictions.jsonl``; write summary.json, summary.md, metrics.png and agreement.png.

    Without ``title`` the title of an earlier summary.json in the folder is kept (else the folder name)."""
    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    if not folder.rows_path.exists():
        raise DataError(f"no {folder.rows_path.name} in {run_dir}")
    if title is None and folder.summary_json.exists():
        try:
            title = json.loads(folder.summary_json.read_text(encoding="utf-8")).get("title")
        except (OSError, ValueError, AttributeError):
            title = None
    summary = summarize_rows(folder.rows(), title=title or run_dir.name)
    if folder.import_info.exists():  # a run imported from the authors' outputs (hqa.data.authors_runs)
        try:
            summary["import"] = json.loads(folder.import_info.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DataError(f"{folder.import_info} is unreadable: {exc}") from None
    write_atomic(folder.summary_json, json.dumps(summary, indent=2, default=str) + "\n")
    write_atomic(folder.summary_md, render_markdown(summary) + "\n")
    summary_plots(summary, run_dir)
    return summary


def pool_runs(run_dirs: list[Path], out_dir: Path, title: str | None = None) -> dict[str, Any]:
    """One report over the rows of several run folders (e.g. one per benchmark, for HumanIQ Table 5's Aggregated
    column and Figure 1), written to ``out_dir``; a question id in two of the runs is refused."""
    rows: list[dict] = []
    seen: dict[Any, Path] = {}
    for d in run_dirs:
        file = RunFolder(d).rows_path
        if not file.exists():
            raise DataError(f"no {file.name} in {d}")
        for r in read_rows(file):
            if r.get("id") in seen:
                raise DataError(f"question {r.get('id')!r} is in both {seen[r.get('id')]} and {d}: pool runs of "
                                "different questions (e.g. one per benchmark)")
            seen[r.get("id")] = Path(d)
            rows.append(r)
    out_dir = Path(out_dir)
    pooled = RunFolder(out_dir)
    # a pooled folder (marked by pooled.json) is rebuilt from its runs each time; a run's own rows are never replaced
    if pooled.rows_path.exists() and not pooled.pooled.exists():
        raise DataError(f"{out_dir} holds a run's {pooled.rows_path.name}: pool into another --out folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(pooled.rows_path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows))
    write_atomic(pooled.pooled, json.dumps({"runs": [str(d) for d in run_dirs]}, indent=2) + "\n")
    return write_report(out_dir, title=title or f"{len(run_dirs)} runs pooled")
