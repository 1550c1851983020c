"""Evaluation reports: the seed papers' analyses computed from a run's ``predictions.jsonl``.

Definitions (all over the rows of one run; "correct" = answer-in-prediction recall against the gold answers, the
metric HumanIQ reports, unless said otherwise):

* answer metrics — mean EM, token F1, recall, Hits@1 (HumanIQ Tables 1–3 style);
* per source (``trace.answers`` text / kg / parametric): *prevalence* = share of questions where the source gave a
  non-empty answer; *precision* = correct among those; *recall* = correct over all questions (HumanIQ Table 5);
* agreement buckets over the non-empty source answers, two answers agreeing when their normalised forms are equal
  or their token F1 is ≥ 0.8: ``all agree`` (≥2 answers, all agree), ``two agree`` (3 answers, exactly one pair
  agrees), ``conflict`` (≥2 answers, none agree), ``single source``, ``no source``; with count and final-answer
  accuracy per bucket (HumanIQ Figure 4);
* retrieval per hop H1-R, H2-R (DIVKNOWQA Table 2), for rows with a gold decomposition (Bamboogle) and a DETLLM
  trace: hop i is retrieved when a gold answer of sub-question i occurs (normalised, whole tokens) in the evidence
  kept at hop i;
* entity linking accuracy (DIVKNOWQA Table 5), for rows with gold question entities: a linked QID in the trace
  (``trace.entities``, entity tool calls, DETLLM hops' linked entities) is a gold question entity;
* SPARQL execution: success = queries without error / queries issued; non-empty = queries with rows / issued;
* cost per question: LM calls, prompt / completion tokens (cached replies report none), tool calls, seconds —
  next to HumanIQ's reported 5.0 tool calls and 575 generated tokens per question (GPT-4, the paper's numbers);
* SS-CoT: chains sampled, syntactically valid, errors by type, masks filled by KG / text / LM.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

from hqa.config import write_atomic
from hqa.errors import DataError
from hqa.evaluate import read_rows
from hqa.metrics import answer_recall, normalize_answer, token_f1

HUMANIQ_REFERENCE = {"tool_calls": 5.0, "completion_tokens": 575.0}
SOURCES = ("text", "kg", "parametric")
BUCKETS = ("all agree", "two agree", "conflict", "single source", "no source")


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _present(answer: Any) -> bool:
    return answer is not None and normalize_answer(str(answer)) not in ("", "none", "unknown")


def agree(a: str, b: str) -> bool:
    na, nb = normalize_answer(a), normalize_answer(b)
    return na == nb or token_f1(a, [b]) >= 0.8


def bucket(answers: list[str]) -> str:
    if not answers:
        return "no source"
    if len(answers) == 1:
        return "single source"
    pairs = [(i, j) for i in range(len(answers)) for j in range(i + 1, len(answers))]
    agreeing = sum(agree(answers[i], answers[j]) for i, j in pairs)
    if agreeing == len(pairs):
        return "all agree"
    if agreeing == 0:
        return "conflict"
    return "two agree"


def source_analysis(rows: list[dict]) -> dict[str, Any]:
    with_sources = [r for r in rows if any(_present((r.get("trace") or {}).get("answers", {}).get(s)) for s in SOURCES)]
    per_source = {}
    n = len(rows)
    for s in SOURCES:
        given = [r for r in rows if _present((r.get("trace") or {}).get("answers", {}).get(s))]
        correct = [r for r in given if answer_recall(str(r["trace"]["answers"][s]), r["gold"]) >= 1.0]
        per_source[s] = {"answered": len(given), "correct": len(correct),
                         "prevalence": round(len(given) / n, 4) if n else None,
                         "precision": round(len(correct) / len(given), 4) if given else None,
                         "recall": round(len(correct) / n, 4) if n else None}
    buckets: dict[str, list[dict]] = {b: [] for b in BUCKETS}
    for r in rows:
        answers = [str(r["trace"]["answers"][s]) for s in SOURCES
                   if _present((r.get("trace") or {}).get("answers", {}).get(s))]
        buckets[bucket(answers)].append(r)
    return {"questions_with_source_answers": len(with_sources), "per_source": per_source,
            "agreement": {b: {"count": len(rs), "accuracy": _mean([r["scores"]["recall"] for r in rs])}
                          for b, rs in buckets.items()}}


def hop_retrieval(rows: list[dict]) -> dict[str, Any] | None:
    """H1-R, H2-R, … over rows with a gold decomposition and per-hop kept evidence."""
    hits: dict[int, list[float]] = {}
    for r in rows:
        decomposition = r.get("decomposition") or []
        hops = (r.get("trace") or {}).get("hops") or []
        if not decomposition or not hops:
            continue
        for i, gold in enumerate(decomposition):
            if i >= len(hops):
                hits.setdefault(i + 1, []).append(0.0)
                continue
            text = " ".join(str(e.get("text", "")) for e in hops[i].get("kept", []) or [])
            ok = any(answer_recall(text, [a]) >= 1.0 for a in gold.get("answers", []) if a)
            hits.setdefault(i + 1, []).append(1.0 if ok else 0.0)
    if not hits:
        return None
    return {f"H{h}-R": {"n": len(v), "value": _mean(v)} for h, v in sorted(hits.items())}


def _linked_ids(trace: dict) -> set[str]:
    ids = {str(e.get("id")) for e in trace.get("entities", []) or [] if isinstance(e, dict)}
    for call in trace.get("tool_calls", []) or []:
        ids |= {str(e.get("id")) for e in call.get("entities", []) or [] if isinstance(e, dict)}
    for hop in trace.get("hops", []) or []:
        ids |= {str(e.get("id")) for e in hop.get("linked_entities", []) or [] if isinstance(e, dict)}
    for fill in trace.get("fills", []) or []:
        ids |= {str(x) for x in fill.get("entities", []) or []}
    return {i for i in ids if i.startswith("Q")}


def entity_linking(rows: list[dict]) -> dict[str, Any] | None:
    scored = [r for r in rows if r.get("gold_entities")]
    if not scored:
        return None
    linked = [r for r in scored if _linked_ids(r.get("trace") or {})]
    correct = [r for r in scored if _linked_ids(r.get("trace") or {}) & set(r["gold_entities"])]
    return {"n": len(scored), "with_links": len(linked), "accuracy": round(len(correct) / len(scored), 4)}


def sparql_stats(rows: list[dict]) -> dict[str, Any] | None:
    queries = [q for r in rows for q in (r.get("trace") or {}).get("sparql", []) or [] if isinstance(q, dict)]
    if not queries:
        return None
    ok = [q for q in queries if not q.get("error")]
    nonempty = [q for q in ok if q.get("rows") or q.get("boolean") is not None]
    return {"issued": len(queries), "success_rate": round(len(ok) / len(queries), 4),
            "non_empty_rate": round(len(nonempty) / len(queries), 4)}


def sscot_stats(rows: list[dict]) -> dict[str, Any] | None:
    traced = [r["trace"] for r in rows if (r.get("trace") or {}).get("program") == "sscot"]
    if not traced:
        return None
    chains = [c for t in traced for c in t.get("chains", []) or []]
    errors = Counter(e for c in chains for e in c.get("errors", []) or [])
    fills = Counter(f.get("via") for t in traced for f in t.get("fills", []) or [])
    return {"questions": len(traced), "chains_sampled": len(chains),
            "chains_valid": sum(1 for c in chains if not c.get("errors")), "errors": dict(errors),
            "filled_by": {k: fills.get(k, 0) for k in ("kg", "text", "lm")},
            "fallback_to_recall": sum(1 for t in traced if t.get("fallback"))}


def summarize_rows(rows: list[dict]) -> dict[str, Any]:
    if not rows:
        raise DataError("no evaluation rows to report on")
    metrics = {k: _mean([r["scores"][k] for r in rows]) for k in ("em", "f1", "recall", "hits1")}
    cost = {k: _mean([float(r.get(k) or 0) for r in rows])
            for k in ("lm_calls", "prompt_tokens", "completion_tokens", "tool_calls", "seconds")}
    return {
        "n": len(rows),
        "errors": sum(1 for r in rows if r.get("error")),
        "metrics": metrics,
        "cost": cost,
        "humaniq_reference_gpt4": HUMANIQ_REFERENCE,
        "sources": source_analysis(rows),
        "hop_retrieval": hop_retrieval(rows),
        "entity_linking": entity_linking(rows),
        "sparql": sparql_stats(rows),
        "sscot": sscot_stats(rows),
    }


def _md(summary: dict[str, Any], title: str) -> str:
    m, c = summary["metrics"], summary["cost"]
    lines = [f"# {title}", "", f"{summary['n']} questions, {summary['errors']} errors.", "",
             "| EM | F1 | recall | Hits@1 |", "|---|---|---|---|",
             f"| {m['em']} | {m['f1']} | {m['recall']} | {m['hits1']} |", "",
             "## Cost per question", "", "| | this run | HumanIQ (GPT-4, paper) |", "|---|---|---|",
             f"| LM calls | {c['lm_calls']} | |", f"| prompt tokens | {c['prompt_tokens']} | |",
             f"| completion tokens | {c['completion_tokens']} | {HUMANIQ_REFERENCE['completion_tokens']} |",
             f"| tool calls | {c['tool_calls']} | {HUMANIQ_REFERENCE['tool_calls']} |",
             f"| seconds | {c['seconds']} | |", ""]
    src = summary["sources"]
    if src["questions_with_source_answers"]:
        lines += ["## Per source (HumanIQ Table 5)", "", "| source | answered | prevalence | precision | recall |",
                  "|---|---|---|---|---|"]
        for s, v in src["per_source"].items():
            lines.append(f"| {s} | {v['answered']} | {v['prevalence']} | {v['precision']} | {v['recall']} |")
        lines += ["", "## Agreement of source answers (HumanIQ Figure 4)", "", "| bucket | count | accuracy |",
                  "|---|---|---|"]
        lines += [f"| {b} | {v['count']} | {v['accuracy']} |" for b, v in src["agreement"].items()]
        lines.append("")
    for key, heading in (("hop_retrieval", "Retrieval per hop (DIVKNOWQA Table 2)"),
                         ("entity_linking", "Entity linking (DIVKNOWQA Table 5)"),
                         ("sparql", "SPARQL execution"), ("sscot", "Semi-structured chains")):
        if summary.get(key):
            lines += [f"## {heading}", "", "```json", json.dumps(summary[key], indent=2), "```", ""]
    return "\n".join(lines)


def _plots(summary: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    names = ["em", "f1", "recall", "hits1"]
    ax.bar(names, [summary["metrics"][k] or 0 for k in names], color="#4C72B0")
    ax.set_ylim(0, 1)
    ax.set_title(f"answer metrics (n={summary['n']})")
    fig.tight_layout()
    fig.savefig(out / "metrics.png", dpi=100)
    plt.close(fig)
    paths.append(out / "metrics.png")
    agreement = summary["sources"]["agreement"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(list(agreement), [v["count"] for v in agreement.values()], color="#55A868")
    for i, v in enumerate(agreement.values()):
        if v["accuracy"] is not None:
            ax.text(i, v["count"], f"acc {v['accuracy']:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("questions")
    ax.set_title("agreement of text / KG / parametric answers")
    fig.tight_layout()
    fig.savefig(out / "agreement.png", dpi=100)
    plt.close(fig)
    paths.append(out / "agreement.png")
    return paths


def write_report(run_dir: Path, title: str | None = None) -> dict[str, Any]:
    """Compute the summary of ``run_dir/predictions.jsonl`` and write summary.json, summary.md and plots."""
    run_dir = Path(run_dir)
    rows = read_rows(run_dir / "predictions.jsonl")
    summary = summarize_rows(rows)
    write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    write_atomic(run_dir / "summary.md", _md(summary, title or run_dir.name) + "\n")
    _plots(summary, run_dir)
    return summary


# -- paired comparison -------------------------------------------------------------------------------------------
def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test p-value (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_bootstrap(diffs: list[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    if not diffs:
        return (math.nan, math.nan)
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    return (round(means[int(0.025 * n_boot)], 4), round(means[min(n_boot - 1, int(0.975 * n_boot))], 4))


def _rows_of(path: Path) -> dict[str, dict]:
    path = Path(path)
    file = path / "predictions.jsonl" if path.is_dir() else path
    if not file.exists():
        raise DataError(f"no predictions.jsonl at {path}")
    return {r["id"]: r for r in read_rows(file)}


def compare_runs(a: Path, b: Path, metric: str = "recall", seed: int = 0) -> dict[str, Any]:
    ra, rb = _rows_of(a), _rows_of(b)
    shared = sorted(set(ra) & set(rb), key=str)
    if not shared:
        raise DataError(f"runs {a} and {b} share no question ids")
    if metric not in ("em", "f1", "recall", "hits1"):
        raise DataError(f"unknown metric {metric!r}")
    sa = [float(ra[i]["scores"][metric]) for i in shared]
    sb = [float(rb[i]["scores"][metric]) for i in shared]
    diffs = [y - x for x, y in zip(sa, sb)]
    wins = sum(1 for d in diffs if d > 0)
    losses = sum(1 for d in diffs if d < 0)
    return {"metric": metric, "n": len(shared), "a": str(a), "b": str(b), "mean_a": _mean(sa), "mean_b": _mean(sb),
            "diff": _mean(diffs), "ci95": paired_bootstrap(diffs, seed=seed), "b_better": wins, "a_better": losses,
            "ties": len(diffs) - wins - losses, "sign_test_p": round(sign_test(wins, losses), 6)}


def compare_markdown(result: dict[str, Any]) -> str:
    r = result
    return "\n".join([
        f"Paired comparison on {r['n']} shared questions, metric `{r['metric']}`", "",
        "| run | mean |", "|---|---|", f"| A {r['a']} | {r['mean_a']} |", f"| B {r['b']} | {r['mean_b']} |", "",
        f"B − A = {r['diff']} (95% paired bootstrap CI {r['ci95'][0]} … {r['ci95'][1]}); "
        f"B better on {r['b_better']}, A better on {r['a_better']}, ties {r['ties']}; "
        f"exact sign test p = {r['sign_test_p']}"])
