"""Evaluation reports: the seed papers' analyses computed from a run's ``predictions.jsonl``.

``write_report(run_dir)`` reads the rows :func:`hqa.jobs.evaluate.evaluate` wrote and writes ``summary.json``,
``summary.md``, ``metrics.png`` and ``agreement.png`` next to them; ``compare_runs(a, b)`` is the paired comparison
of two runs.  Definitions (``docs/evaluation.md`` has the long form):

* **correct** — an answer is correct when a normalised gold answer occurs in it as whole tokens (answer-in-prediction
  recall, :func:`hqa.scoring.metrics.answer_recall`, HumanIQ's metric) or when it names a gold QID (QALD-10's entity
  answers are QIDs only);
* **answer metrics** — mean EM, token F1, recall, Hits@1 over all rows; errored rows count as wrong (HumanIQ
  Tables 1–3 style); plus the QALD measures (GERBIL "Macro F1 QALD" and "Macro F1" over answer sets,
  :func:`hqa.scoring.metrics.macro_f1_qald`; HumanIQ Table 2), recomputed from each row's answer so old rows have them too.
  Rows an import could not match to gold (``trace.gold_matched`` false) are counted but left out of every score;
* **per source** (``trace.answers`` text / kg / parametric, plus final for reference), HumanIQ Table 5's columns:
  *re* = share of questions where the source gave a response (a non-empty answer; "None", "unknown", "n/a" … are
  empty); *prec* = correct among those; *prev* = share of questions whose final answer is the source's answer
  (agrees with it, as below, or contains it as whole tokens: a long final answer that states it); and *recall* =
  correct over all questions; per benchmark and Aggregated (the unweighted mean of the benchmarks' values, as the
  paper's Aggregated column is), next to the published GPT-3.5 / GPT-4 values (:data:`HUMANIQ_TABLE5`);
* **agreement** over the non-empty source answers of a question; two answers agree when their normalised forms are
  equal or their token F1 is ≥ 0.8.  Buckets (HumanIQ Figure 4, three-source agreement apart from two-source):
  ``3 agree``, ``3 sources, 2 agree`` (some but not all pairs agree), ``3 differ``, ``2 agree``, ``2 differ``,
  ``single source``, ``no source``; with count and final-answer accuracy (the correct rule) per bucket;
* **error categories** (HumanIQ Table 9) of the wrong final answers, where a trace lets them be told automatically
  (:func:`error_categories`; tables (1) and the manual reading behind the paper's counts cannot be);
* **retrieval per hop** H1-R, H2-R (DIVKNOWQA Table 2), over rows with a gold decomposition (Bamboogle) and a
  per-hop trace (DETLLM ``trace.hops``): hop i is retrieved when some gold answer of sub-question i occurs
  (normalised, whole tokens) in the text of the evidence kept at hop i; a hop the program never ran is a miss;
* **entity linking** (DIVKNOWQA Table 5), over rows with gold question entities (CompMix ``entities``, Mintaka
  ``questionEntity``, the ``wd:Q…`` constants of a QALD-10 query): correct when some QID the program linked
  (``trace.entities``, the ``entities`` of tool calls, DETLLM hops' ``linked_entities``) is a gold question
  entity; reported only when some trace of the run links anything;
* **SPARQL execution**: success = queries without error / queries issued; non-empty = queries with rows (or a
  boolean) / queries issued; queries refused because the endpoint was down are counted separately;
* **cost** per question: LM calls, prompt / completion tokens (a cached LM reply reports none), tool calls, wall
  seconds — next to HumanIQ's reported 5.0 tool calls and 575 generated tokens (the paper's GPT-4 numbers);
* **SS-CoT**: chains sampled, syntactically valid, errors by type, masks filled by KG / text / LM.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from hqa.scoring.answers import answer_or_none
from hqa.config import write_atomic
from hqa.errors import DataError
from hqa.schemas.run_folder import ROWS, CompareFolder, RunFolder, read_rows
from hqa.lm.prefix_cache import TOKENIZER, encoding, prefix_share
from hqa.answering.selective import selective_markdown, selective_summary
from hqa.schemas.trace import Trace
from hqa.scoring.metrics import answer_recall, macro_f1_qald, normalize_answer, qald_prf, token_f1

__all__ = [
    "BUCKETS", "ERROR_CATEGORIES", "HUMANIQ_REFERENCE", "HUMANIQ_TABLE5", "SOURCES", "agree", "benchmark_of",
    "bucket", "compare_markdown", "compare_runs", "cost_stats", "entity_linking", "error_categories",
    "hop_retrieval", "is_correct", "library_markdown", "library_stats", "paired_bootstrap", "pool_runs",
    "render_markdown", "scored_rows", "sign_test", "source_analysis", "source_table", "sparql_stats", "sscot_stats",
    "summarize_rows", "thought_divergence", "thought_markdown", "run_thoughts", "write_compare_outputs",
    "write_report",
]

# HumanIQ (GPT-4) per-question averages as reported in the paper — reference numbers, not measured here.
HUMANIQ_REFERENCE = {"tool_calls": 5.0, "completion_tokens": 575.0}
SOURCES = ("text", "kg", "parametric")
BUCKETS = ("3 agree", "3 sources, 2 agree", "3 differ", "2 agree", "2 differ", "single source", "no source")
METRIC_NAMES = ("em", "f1", "recall", "hits1", "qald_f1")
BENCHMARKS = ("mintaka", "qald", "compmix")
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
COST_KEYS = ("lm_calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "tool_calls", "seconds")
AGREE_F1 = 0.8
_QID_RE = re.compile(r"(?<![A-Za-z0-9])(Q[1-9]\d*)(?![0-9A-Za-z])")


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _trace(row: dict) -> Trace:
    return Trace.from_dict(row.get("trace"))


def _source_answer(row: dict, source: str) -> str | None:
    """The non-empty answer of ``source`` (text / kg / parametric, or final) of a row, else None."""
    if source == "final":
        return answer_or_none(row.get("answer"))
    return answer_or_none(_trace(row).answers.get(source))


def is_correct(answer: str | None, gold: list[str], gold_ids: list[str] = ()) -> bool:
    """Answer-in-prediction recall against the gold labels, or a gold QID named in the answer."""
    if not answer:
        return False
    if answer_recall(answer, list(gold or [])) >= 1.0:
        return True
    ids = {str(g).upper() for g in gold_ids or []}
    return bool(ids) and any(q in ids for q in _QID_RE.findall(answer))


def _row_correct(row: dict, answer: str | None) -> bool:
    return is_correct(answer, row.get("gold") or [], row.get("gold_ids") or [])


def scored_rows(rows: list[dict]) -> list[dict]:
    """The rows that can be scored: all but those an import could not match to a gold answer
    (``trace.gold_matched`` is false, :mod:`hqa.data.authors_runs`)."""
    return [r for r in rows if _trace(r).gold_matched is not False]


def benchmark_of(dataset: Any) -> str:
    """The HumanIQ benchmark a dataset name belongs to (``compmix/test``, ``humaniq-compmix`` → compmix; ``qald10``,
    ``qald9plus`` → qald; ``mintaka``), else the name itself."""
    name = str(dataset or "?").lower()
    return next((b for b in BENCHMARKS if name.startswith(b) or name.startswith(f"humaniq-{b}")), name)


def _score(row: dict, metric: str) -> float:
    """A row's stored score, or for ``qald_f1`` (absent from rows written before it existed) recomputed."""
    scores = row.get("scores") or {}
    if metric == "qald_f1" and metric not in scores:
        return qald_prf(row.get("answer"), row.get("gold") or [], row.get("gold_ids") or [])[2]
    return float(scores.get(metric, 0.0))


# -- answers and sources -----------------------------------------------------------------------------------------
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
        given = [(r, a) for r in rows if (a := _source_answer(r, s))]
        correct = sum(1 for r, a in given if _row_correct(r, a))
        chosen = sum(1 for r, a in given if selected(_source_answer(r, "final"), a))
        per_source[s] = {"answered": len(given), "correct": correct, "re": _ratio(len(given), n),
                         "prec": _ratio(correct, len(given)),
                         "prev": None if s == "final" else _ratio(chosen, n), "recall": _ratio(correct, n)}
    buckets: dict[str, list[dict]] = {b: [] for b in BUCKETS}
    for r in rows:
        buckets[bucket([a for s in SOURCES if (a := _source_answer(r, s))])].append(r)
    multi = n - len(buckets["no source"]) - len(buckets["single source"])
    return {
        "sources_seen": [s for s in SOURCES if per_source[s]["answered"]],
        "questions_with_source_answers": n - len(buckets["no source"]),
        "questions_with_several_source_answers": multi,
        "per_source": per_source,
        "agreement": {b: {"count": len(rs), "share": _ratio(len(rs), n),
                          "accuracy": _ratio(sum(1 for r in rs if _row_correct(r, r.get("answer"))), len(rs))}
                      for b, rs in buckets.items()},
    }


def source_table(rows: list[dict]) -> dict[str, Any]:
    """HumanIQ Table 5: re / prec / prev per source (percent) for each benchmark in the rows and Aggregated, the
    unweighted mean of the benchmarks' values (how the paper's Aggregated column is formed: e.g. GPT-4 stru. re
    (52.5 + 62.0 + 65.2) / 3 = 59.9)."""
    by_bench: dict[str, list[dict]] = {}
    for r in scored_rows(rows):
        by_bench.setdefault(benchmark_of(r.get("dataset")), []).append(r)
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for b in sorted(by_bench, key=lambda x: (BENCHMARKS.index(x) if x in BENCHMARKS else 9, x)):
        per = source_analysis(by_bench[b])["per_source"]
        out[b] = {s: {k: None if per[s][k] is None else round(100 * per[s][k], 1) for k in ("re", "prec", "prev")}
                  for s in SOURCES}
        out[b]["n"] = len(by_bench[b])  # type: ignore[assignment]
    if out:
        out["aggregated"] = {s: {k: _mean([v[s][k] for v in out.values() if v[s][k] is not None])
                                 for k in ("re", "prec", "prev")} for s in SOURCES}
        for v in out["aggregated"].values():
            for k in v:
                v[k] = None if v[k] is None else round(v[k], 1)
    return out


# -- error categories (HumanIQ Table 9) --------------------------------------------------------------------------
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
    out += _evidence_text(t.passages)
    return [x for x in out if x.strip()]


def error_category(row: dict) -> str | None:
    """The Table 9 category of a row whose final answer is wrong (None when it is right), first match in order:
    (5) some source answer is correct but the final one is not; (4) the agent's loop ended without Finish and
    without another stop reason; (3) the program linked entities and none is a gold question entity; (2) SPARQL
    queries were issued and none returned rows; (6) text was retrieved and no gold answer occurs in any of it;
    (7) a gold answer occurs in the retrieved text but the text answer misses it.  Anything else is left
    unclassified (the paper's categories are a manual reading of the solution processes)."""
    if _row_correct(row, _source_answer(row, "final")):
        return None
    t = _trace(row)
    merged = t.merged is not False  # a single pipeline's output (imported late fusion) is no merge
    if merged and any(_row_correct(row, a) for s in SOURCES if (a := _source_answer(row, s))):
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


# -- human library statistics (HumanIQ RQ8) ----------------------------------------------------------------------
# HumanIQ RQ8 as published: the workshop-made solution processes average 6.75 tool calls and 642 tokens.
HUMANIQ_LIBRARY_REFERENCE = {"tool_calls": 6.75, "tokens": 642.0}
# TOKENIZER (hqa.lm.prefix_cache): cl100k_base, GPT-4's tokenizer (tiktoken); HumanIQ does not name the one it counted with


_encoding = encoding  # tiktoken cl100k_base, offline (hqa.lm.prefix_cache.encoding)


def library_stats(datasets: tuple[str, ...] | list[str] = BENCHMARKS, path: Path | None = None) -> dict[str, Any]:
    """HumanIQ RQ8's statistics of a human library (``hqa.data.human.load_human_library``, the shipped one or the
    folder ``path``): per process, tool calls (Action steps) and tokens counted with :data:`TOKENIZER` — of the
    whole process as the prompt shows it (question, every Thought / Action / Action Input / Observation, final
    answers, assistant response) and of the part the human wrote (the same without the Observations, the tools'
    output).  Per benchmark and over all processes, next to the published 6.75 tool calls and 642 tokens."""
    from hqa.data.human import format_trajectory, load_human_library

    enc = _encoding()

    def written(d) -> str:
        parts = [f"Question: {d.question}"]
        for st in d.steps:
            parts += [f"Thought: {st.thought}"] + ([f"Action: {st.action}", f"Action Input: {st.action_input}"]
                                                   if st.action else [])
        return "\n".join(parts + closing(d))

    def closing(d) -> list[str]:
        return [f"Final Answer: Wikipedia_Answer: {d.wikipedia_answer}, Wikidata_Answer: {d.wikidata_answer}",
                f"Assistant Response: {d.response or ''}"]

    def whole(d) -> str:
        return "\n".join([f"Question: {d.question}", format_trajectory(d.steps), *closing(d)])

    per: dict[str, dict[str, Any]] = {}
    every: list[tuple[int, int, int]] = []
    for ds in datasets:
        demos = load_human_library([ds], path=path, strict=True)
        vals = [(len(d.actions), len(enc.encode(whole(d))), len(enc.encode(written(d)))) for d in demos]
        every += vals
        per[ds] = _library_row(vals)
    return {"tokenizer": TOKENIZER, "per_benchmark": per, "all": _library_row(every),
            "paper": HUMANIQ_LIBRARY_REFERENCE}


def _library_row(vals: list[tuple[int, int, int]]) -> dict[str, Any]:
    return {"processes": len(vals), "tool_calls": _mean([float(v[0]) for v in vals]),
            "tokens_whole": _mean([float(v[1]) for v in vals]), "tokens_written": _mean([float(v[2]) for v in vals])}


def library_markdown(stats: dict[str, Any]) -> str:
    ref = stats["paper"]
    rows = [[b, v["processes"], v["tool_calls"], v["tokens_whole"], v["tokens_written"]]
            for b, v in [*stats["per_benchmark"].items(), ("all", stats["all"])]]
    rows.append(["HumanIQ RQ8 (paper)", None, ref["tool_calls"], ref["tokens"], None])
    return "\n".join([f"# Human solution processes (HumanIQ RQ8), tokens counted with {stats['tokenizer']}", "",
                      *_table(["library", "processes", "tool calls", "tokens (whole process)",
                               "tokens (human-written, no observations)"], rows),
                      "The paper does not say which text its 642 tokens count nor with which tokenizer; both "
                      "readings are shown."])


# -- HumanIQ Table 8: thoughts vs human-written thoughts (JSD) ---------------------------------------------------
#: HumanIQ Table 8 as published: n → (GPT4-H, HQA-H); "n" is the first thought, "<=n" thoughts 1..n
HUMANIQ_TABLE8 = {"1": (0.0889, 0.0897), "<=2": (0.0700, 0.0674), "<=3": (0.0630, 0.0618), "<=4": (0.0600, 0.0576),
                  "<=5": (0.0579, 0.0549), "<=6": (0.0570, 0.0540), "<=7": (0.0569, 0.0537), "<=8": (0.0568, 0.0535)}


def run_thoughts(rows: list[dict]) -> list[list[str]]:
    """Per question, the thoughts of its solution process in order (the agent's trace steps)."""
    out = []
    for r in rows:
        steps = (r.get("trace") or {}).get("steps") or []
        out.append([str(st["thought"]).strip() for st in steps if isinstance(st, dict) and str(
            st.get("thought") or "").strip()])
    return out


def _distributions(texts: list[str], embed_fn) -> Any:
    import numpy as np

    if not texts:
        return np.zeros((0, 0))
    vecs = np.asarray(embed_fn(texts), dtype=np.float64)
    vecs = np.exp(vecs - vecs.max(axis=1, keepdims=True))
    return vecs / vecs.sum(axis=1, keepdims=True)


def _mean_jsd(p: Any, q: Any) -> float | None:
    """Mean Jensen-Shannon distance (HumanIQ eq. 1: the square root of the JS divergence, natural log) over every
    pair of a row of ``p`` with a row of ``q``."""
    import numpy as np

    if not len(p) or not len(q):
        return None
    a, b = p[:, None, :], q[None, :, :]
    m = (a + b) / 2
    kl = (a * np.log(a / m)).sum(-1) / 2 + (b * np.log(b / m)).sum(-1) / 2
    return float(np.sqrt(np.maximum(kl, 0.0)).mean())


def thought_divergence(baseline: list[list[str]], hqa: list[list[str]], human: list[list[str]], embed_fn,
                       max_n: int = 8) -> dict[str, Any]:
    """HumanIQ Table 8 (RQ8, Experiment 2): for the first thought (n = 1) and thoughts 1..n (n = 2..``max_n``), the
    mean JS distance between the softmax of each generated thought's embedding and each human-written thought's,
    for the baseline's (GPT-4 without human processes: GPT4-H) and HQA's (HQA-H) processes; Δ = how much closer HQA
    is, in percent of GPT4-H.  Each argument holds one list of thoughts per solution process."""
    rows = []
    for n in range(1, max_n + 1):
        def pick(processes: list[list[str]]) -> list[str]:
            return [t for ts in processes for t in (ts[:1] if n == 1 else ts[:n])]

        b, h, hu = pick(baseline), pick(hqa), pick(human)
        hu_d = _distributions(hu, embed_fn)
        gpt_h, hqa_h = _mean_jsd(_distributions(b, embed_fn), hu_d), _mean_jsd(_distributions(h, embed_fn), hu_d)
        key = "1" if n == 1 else f"<={n}"
        delta = None if gpt_h is None or hqa_h is None or not gpt_h else round(100 * (gpt_h - hqa_h) / gpt_h, 2)
        rows.append({"n": key, "thoughts": [len(b), len(h), len(hu)], "GPT4-H": gpt_h, "HQA-H": hqa_h,
                     "delta_pct": delta, "paper": HUMANIQ_TABLE8.get(key)})
    return {"rows": rows}


def thought_markdown(result: dict[str, Any], embedder: str) -> str:
    def f(v: Any) -> str:
        return "–" if v is None else f"{v:.4f}"

    rows = [[r["n"], "/".join(map(str, r["thoughts"])), f(r["GPT4-H"]), f(r["HQA-H"]),
             "–" if r["delta_pct"] is None else f"{r['delta_pct']:.2f}",
             *(("–", "–") if r["paper"] is None else (f(r["paper"][0]), f(r["paper"][1])))] for r in result["rows"]]
    return "\n".join([f"# HumanIQ Table 8: JS distance of thoughts to human-written ones ({embedder} embeddings)", "",
                      *_table(["n", "thoughts (base/hqa/human)", "GPT4-H", "HQA-H", "Δ (%)", "paper GPT4-H",
                               "paper HQA-H"], rows)])


# -- retrieval and linking ---------------------------------------------------------------------------------------
def _evidence_text(items: Any) -> list[str]:
    out = []
    for e in items or []:
        if isinstance(e, dict):
            out.append(str(e.get("text", "")))
        elif e is not None:
            out.append(str(e))
    return out


def hop_retrieval(rows: list[dict]) -> dict[str, Any] | None:
    """H1-R, H2-R, … over rows with a gold decomposition and a per-hop trace (``trace.hops[i].kept``)."""
    hits: dict[int, list[float]] = {}
    for r in rows:
        decomposition = r.get("decomposition") or []
        hops = _trace(r).hops
        if not decomposition or hops is None:
            continue
        for i, gold in enumerate(decomposition):
            kept = _evidence_text(hops[i].kept) if i < len(hops) else []
            golds = [a for a in (gold or {}).get("answers", []) or [] if str(a).strip()]
            ok = any(answer_recall(text, golds) >= 1.0 for text in kept) if golds else False
            hits.setdefault(i + 1, []).append(1.0 if ok else 0.0)
    if not hits:
        return None
    return {f"H{h}-R": {"n": len(v), "value": _mean(v)} for h, v in sorted(hits.items())}


def entity_linking(rows: list[dict]) -> dict[str, Any] | None:
    """Share of rows with gold question entities where a linked QID is one of them; None when nothing was linked
    in the whole run (a program that does not link, e.g. closed-book)."""
    if not any(_trace(r).linked_ids() for r in rows):
        return None
    scored = [r for r in rows if r.get("gold_entities")]
    if not scored:
        return None
    links = [_trace(r).linked_ids() for r in scored]
    correct = sum(1 for r, ids in zip(scored, links) if ids & set(r["gold_entities"]))
    return {"n": len(scored), "with_links": sum(1 for ids in links if ids), "correct": correct,
            "accuracy": _ratio(correct, len(scored))}


def sparql_stats(rows: list[dict]) -> dict[str, Any] | None:
    """Execution success and non-empty rates over every query the traces record (DIVKNOWQA Table 5)."""
    per_row = [_trace(r).sparql for r in rows]
    queries = [q for qs in per_row for q in qs]
    if not queries:
        return None
    ok = [q for q in queries if q.ok]
    nonempty = [q for q in ok if q.non_empty]
    return {"issued": len(queries), "questions": sum(1 for qs in per_row if qs),
            "per_question": _mean([float(len(qs)) for qs in per_row]),
            "succeeded": len(ok), "non_empty": len(nonempty),
            "success_rate": _ratio(len(ok), len(queries)), "non_empty_rate": _ratio(len(nonempty), len(queries)),
            "endpoint_unavailable": sum(1 for q in queries if q.unavailable)}


def sscot_stats(rows: list[dict]) -> dict[str, Any] | None:
    """Chain statistics of SS-CoT traces: sampled, valid, errors by type, masks filled by KG / text / LM."""
    traced = [t for t in (_trace(r) for r in rows) if t.program == "sscot" or t.chains is not None]
    if not traced:
        return None
    chains = [c for t in traced for c in t.chains or []]
    errors = Counter(e for c in chains for e in c.get("errors") or [])
    fills = [f for t in traced for f in t.fills or []]
    via = Counter(f.get("via") for f in fills)
    return {"questions": len(traced), "chains_sampled": len(chains),
            "chains_valid": sum(1 for c in chains if not c.get("errors")),
            "valid_rate": _ratio(sum(1 for c in chains if not c.get("errors")), len(chains)),
            "errors": dict(sorted(errors.items())), "lm_parse_failures": sum(1 for c in chains if c.get("lm_error")),
            "masks_filled": len(fills), "filled_by": {k: via.get(k, 0) for k in ("kg", "text", "lm")},
            "fallback_to_recall": sum(1 for t in traced if t.fallback)}


def cost_stats(rows: list[dict]) -> dict[str, float | None]:
    return {k: _mean([float(r.get(k) or 0) for r in rows]) for k in COST_KEYS}


def prefix_cache_stats(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """Per program, :func:`hqa.lm.prefix_cache.prefix_share` of its rows (in file order): the share of its prompt
    tokens a provider's prefix cache can serve with the program's step layout, under OpenAI's rule; programs whose
    rows recorded no prompts (runs from before hqa recorded them, imports) are left out."""
    by_program: dict[str, list[dict]] = {}
    for r in rows:
        by_program.setdefault(_trace(r).program or "?", []).append(r)
    out = {p: prefix_share(rs) for p, rs in by_program.items()}
    return {p: v for p, v in out.items() if v is not None}


# -- the summary -------------------------------------------------------------------------------------------------
def _qald(rows: list[dict]) -> dict[str, Any]:
    """GERBIL's macro measures over the rows' answers (:func:`hqa.scoring.metrics.macro_f1_qald`)."""
    return macro_f1_qald((r.get("answer"), r.get("gold") or [], r.get("gold_ids") or []) for r in rows)


def summarize_rows(rows: list[dict], title: str | None = None) -> dict[str, Any]:
    if not rows:
        raise DataError("no evaluation rows to report on")
    scored = scored_rows(rows)
    by_bench: dict[str, list[dict]] = {}
    for r in scored:
        by_bench.setdefault(benchmark_of(r.get("dataset")), []).append(r)
    return {
        "title": title,
        "n": len(rows),
        "unmatched": len(rows) - len(scored),
        # Table 5's re needs no gold: over every row, matched or not
        "responses_all_rows": {s: _ratio(sum(1 for r in rows if _source_answer(r, s)), len(rows)) for s in SOURCES},
        "errors": sum(1 for r in rows if r.get("error")),
        "degraded": sum(1 for r in rows if r.get("degraded")),
        "programs": dict(Counter(_trace(r).program or "?" for r in rows)),
        "datasets": dict(Counter(str(r.get("dataset") or "?") for r in rows)),
        "metrics": {k: _mean([_score(r, k) for r in scored]) for k in METRIC_NAMES},
        "qald": _qald(scored),
        "per_benchmark": {b: {"n": len(rs), **{k: _mean([_score(r, k) for r in rs]) for k in METRIC_NAMES},
                              "f1_qald": _qald(rs)["f1_qald"]} for b, rs in by_bench.items()},
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
        "selective": selective_summary(rows),  # hqa.answering.selective: coverage, precision, risk-coverage curve
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        text = f"{v:.4f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    return str(v)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows] + [""])


def _cost_table(c: dict[str, Any], ref: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += _table(["", "this run", "HumanIQ paper (GPT-4)"],
                    [["LM calls", c["lm_calls"], None], ["prompt tokens", c["prompt_tokens"], None],
                     ["cached prompt tokens (provider's prefix cache)", c.get("cached_prompt_tokens"), None],
                     ["completion tokens", c["completion_tokens"], ref["completion_tokens"]],
                     ["tool calls", c["tool_calls"], ref["tool_calls"]], ["seconds", c["seconds"], None]])
    lines += ["Token counts are what the LM reported; a reply served from the DSPy cache reports none"
              + (f" ({summary['rows_without_token_usage']} of {summary['n']} questions made LM calls without "
                 "token counts, so the token means are lower bounds)." if summary.get("rows_without_token_usage")
                 else "."), ""]
    pc = summary.get("prefix_cache") or {}
    if pc:
        lines += _table(["program", "LM requests per question", f"prompt tokens per question ({TOKENIZER})",
                         "prefix cache can serve",
                         "repeated in the same question", "shared across questions", "measured cached share"],
                        [[p, round(v["lm_requests"] / v["questions"], 2), round(v["prompt_tokens"] / v["questions"]),
                          v["share"], v["share_within_question"],
                          v["share_across_questions"], v["measured_share"]] for p, v in pc.items()])
        lines += ["Share of prompt tokens a provider's prefix cache can serve with the program's step layout, from "
                  "the prompts each run recorded, under OpenAI's rule (a cached prefix is at least 1,024 tokens and "
                  "grows in 128-token steps; platform.openai.com/docs/guides/prompt-caching): a repeated prefix of "
                  "an earlier LM request of the same question (an agent resending its trajectory), or of any earlier "
                  "request (the shared instructions and demos). An upper bound: no eviction, questions in the order "
                  "their rows were written. Measured = the provider's cached / prompt tokens (– when it reported "
                  "none).", ""]
    return lines


def render_markdown(summary: dict[str, Any], title: str | None = None) -> str:
    m, c = summary["metrics"], summary["cost"]
    ref = summary.get("humaniq_reference_gpt4") or HUMANIQ_REFERENCE
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
                  + ", ".join(f"{s} {_fmt(v)}" for s, v in resp.items()) + ".", ""]
    lines += ["## Answer metrics", ""]
    q = summary.get("qald") or {}
    lines += _table(["n scored", "errors", "EM", "token F1", "recall", "Hits@1", "Macro F1 QALD", "Macro F1"],
                    [[summary["n"] - summary.get("unmatched", 0), summary["errors"], m["em"], m["f1"], m["recall"],
                      m["hits1"], q.get("f1_qald"), q.get("f1")]])
    lines += ["Hits@1 = the first answer equals a gold answer after normalisation (automatic EM, HumanIQ §4.3 for "
              "CompMix and Mintaka); Macro F1 QALD = GERBIL's measure over answer sets (QALD); the paper's \"M\" "
              "columns are a manual judgement hqa cannot make.", ""]
    per_b = summary.get("per_benchmark") or {}
    if len(per_b) > 1 or any(b in BENCHMARKS for b in per_b):
        lines += ["## Per benchmark (HumanIQ Tables 1-3 metrics)", ""]
        lines += _table(["benchmark", "n", "Hits@1", "Macro F1 QALD", "recall"],
                        [[b, v["n"], v["hits1"], v["f1_qald"], v["recall"]] for b, v in per_b.items()])
    lines += ["## Cost per question", ""]
    if summary.get("import"):
        lines += ["The authors' files record no LM calls, tokens or times"
                  + (f"; the logs show {_fmt(c['tool_calls'])} tool calls per question" if c["tool_calls"] else "")
                  + f" (HumanIQ reports {_fmt(ref['tool_calls'])} for HQA-GPT-4).", ""]
    else:
        lines += _cost_table(c, ref, summary)
    src = summary["sources"]
    if src["sources_seen"]:
        lines += ["## Answers per source (HumanIQ Table 5)", "",
                  "correct = a gold answer occurs in the source's answer (normalised, whole tokens) or a gold QID "
                  "is named; re = answered / all (the source gave a response), prec = correct / answered, prev = "
                  "questions whose final answer is the source's answer (agrees with it or states it) / all, recall = "
                  "correct / "
                  "all.", ""]
        lines += _table(["source", "answered", "correct", "re", "prec", "prev", "recall"],
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
        lines += _table(header, [[s] + [t5[b][s][k] for b in cols for k in ("re", "prec", "prev")] for s in seen])
        pub = [[f"paper {model} {s}"] + [HUMANIQ_TABLE5[model][s].get(b, (None,) * 3)[i] for b in cols
                                         for i in range(3)]
               for model in HUMANIQ_TABLE5 for s in seen]
        if any(b in BENCHMARKS for b in cols):
            lines += _table(header, pub)
    if src["questions_with_several_source_answers"]:
        lines += ["## Agreement of the source answers (HumanIQ Figure 4)", "",
                  f"Two answers agree when normalised-equal or token F1 ≥ {AGREE_F1}; accuracy = share of the bucket "
                  "whose final answer is correct.", ""]
        lines += _table(["bucket", "questions", "share", "final accuracy"],
                        [[b, v["count"], v["share"], v["accuracy"]] for b, v in src["agreement"].items()])
    ec = summary.get("error_categories") or {}
    if ec.get("wrong"):
        lines += ["## Error categories of the wrong final answers (HumanIQ Table 9)", "",
                  "Assigned automatically from the trace, first match in the order (5), (4), (3), (2), (6)/(7); "
                  "(1) cannot be told from a trace and is never assigned (see hqa.report.error_category).", ""]
        lines += _table(["category", "questions"], [[c, v] for c, v in ec["counts"].items()])
    imp = summary.get("import")
    if imp:
        lines += ["## Imported from the authors' runs", ""] + [f"- {note}" for note in imp.get("notes", [])] + [""]
    if summary.get("hop_retrieval"):
        lines += ["## Retrieval per hop (DIVKNOWQA Table 2)", "",
                  "Hop i retrieved = a gold answer of gold sub-question i occurs in the evidence kept at hop i.", ""]
        lines += _table(["hop", "questions", "retrieved"],
                        [[h, v["n"], v["value"]] for h, v in summary["hop_retrieval"].items()])
    el = summary.get("entity_linking")
    if el:
        lines += ["## Entity linking (DIVKNOWQA Table 5)", ""]
        lines += _table(["questions with gold entities", "with a linked entity", "gold entity linked", "accuracy"],
                        [[el["n"], el["with_links"], el["correct"], el["accuracy"]]])
    sq = summary.get("sparql")
    if sq:
        lines += ["## SPARQL execution", ""]
        lines += _table(["queries", "per question", "success rate", "non-empty rate", "endpoint unavailable"],
                        [[sq["issued"], sq["per_question"], sq["success_rate"], sq["non_empty_rate"],
                          sq["endpoint_unavailable"]]])
    ss = summary.get("sscot")
    if ss:
        errors = ", ".join(f"{k} {v}" for k, v in ss["errors"].items()) or "none"
        fb = ss["filled_by"]
        lines += ["## Semi-structured chains (SS-CoT)", ""]
        lines += _table(["chains sampled", "valid", "valid rate", "masks filled", "by KG", "by text", "by LM",
                         "fallback to recall"],
                        [[ss["chains_sampled"], ss["chains_valid"], ss["valid_rate"], ss["masks_filled"], fb["kg"],
                          fb["text"], fb["lm"], ss["fallback_to_recall"]]])
        lines += [f"Errors by type: {errors}.", ""]
    lines += selective_markdown(summary.get("selective"))
    return "\n".join(lines)


def _plots(summary: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    src = summary["sources"]
    seen = src["sources_seen"]
    fig, axes = plt.subplots(1, 2 if seen else 1, figsize=(9 if seen else 5, 3.4), squeeze=False)
    ax = axes[0][0]
    values = [summary["metrics"][k] or 0 for k in METRIC_NAMES]
    ax.bar(["EM", "F1", "recall", "Hits@1", "QALD F1"], values, color="#4C72B0")
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"answer metrics (n={summary['n']})")
    if seen:
        ax = axes[0][1]
        names = [*seen, "final"]
        width = 0.4
        prec = [src["per_source"][s]["prec"] or 0 for s in names]
        rec = [src["per_source"][s]["recall"] or 0 for s in names]
        ax.bar([i - width / 2 for i in range(len(names))], prec, width, label="precision", color="#DD8452")
        ax.bar([i + width / 2 for i in range(len(names))], rec, width, label="recall", color="#55A868")
        ax.set_xticks(range(len(names)), names)
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=8)
        ax.set_title("per source")
    fig.tight_layout()
    metrics_png, agreement_png = RunFolder(out).plots
    fig.savefig(metrics_png, dpi=100)
    plt.close(fig)

    agreement = src["agreement"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.bar(list(agreement), [v["count"] for v in agreement.values()], color="#55A868")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right", fontsize=8)
    for i, v in enumerate(agreement.values()):
        if v["accuracy"] is not None:
            ax.text(i, v["count"], f"acc {v['accuracy']:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("questions")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    note = "" if src["questions_with_several_source_answers"] else " (no question has 2+ source answers)"
    ax.set_title("agreement of text / KG / parametric answers" + note, fontsize=10)
    fig.tight_layout()
    fig.savefig(agreement_png, dpi=100)
    plt.close(fig)
    return [metrics_png, agreement_png]


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
    _plots(summary, run_dir)
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


# -- paired comparison -------------------------------------------------------------------------------------------
def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test p-value (ties already dropped): 2 · P(X ≤ min(wins, losses)), X ~ Bin(n, 1/2)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def paired_bootstrap(diffs: list[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of ``diffs`` (questions resampled with replacement): of a paired
    difference in ``compare_runs``, of one arm's scores in ``hqa compare``."""
    import numpy as np

    if not diffs:
        return (math.nan, math.nan)
    d = np.asarray(diffs, dtype=float)
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, 200):  # chunks bound the memory of n_boot × n index arrays
        stop = min(n_boot, start + 200)
        means[start:stop] = d[rng.integers(0, len(d), size=(stop - start, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return (round(float(lo), 4), round(float(hi), 4))


def _rows_of(path: Path) -> dict[Any, dict]:
    path = Path(path)
    file = RunFolder(path).rows_path if path.is_dir() else path
    if not file.exists():
        raise DataError(f"no {ROWS} at {path}")
    return {r["id"]: r for r in read_rows(file) if r.get("id") is not None}


def compare_runs(a: Path, b: Path, metric: str = "recall", seed: int = 0, n_boot: int = 2000) -> dict[str, Any]:
    """Paired comparison of runs ``a`` and ``b`` on the question ids both contain: means, B − A, bootstrap CI,
    wins / losses / ties and the exact sign test."""
    if metric not in METRIC_NAMES:
        raise DataError(f"unknown metric {metric!r}; valid: {', '.join(METRIC_NAMES)}")
    ra, rb = _rows_of(a), _rows_of(b)
    shared = sorted(set(ra) & set(rb), key=str)
    if not shared:
        raise DataError(f"runs {a} and {b} share no question ids")
    sa = [_score(ra[i], metric) for i in shared]
    sb = [_score(rb[i], metric) for i in shared]
    diffs = [y - x for x, y in zip(sa, sb)]
    wins = sum(1 for d in diffs if d > 0)
    losses = sum(1 for d in diffs if d < 0)
    return {"metric": metric, "n": len(shared), "only_a": len(set(ra) - set(rb)), "only_b": len(set(rb) - set(ra)),
            "a": str(a), "b": str(b), "mean_a": _mean(sa), "mean_b": _mean(sb), "diff": _mean(diffs),
            "ci95": list(paired_bootstrap(diffs, n_boot=n_boot, seed=seed)), "b_better": wins, "a_better": losses,
            "ties": len(diffs) - wins - losses, "sign_test_p": round(sign_test(wins, losses), 6)}


def compare_markdown(result: dict[str, Any]) -> str:
    r = result
    lines = [f"# Paired comparison: `{r['metric']}` on {r['n']} shared questions", ""]
    if r.get("only_a") or r.get("only_b"):
        lines += [f"({r['only_a']} questions only in A and {r['only_b']} only in B are left out.)", ""]
    lines += _table(["run", "folder", f"mean {r['metric']}"], [["A", r["a"], r["mean_a"]], ["B", r["b"], r["mean_b"]]])
    lines += _table(["B − A", "95% CI (paired bootstrap)", "B better", "A better", "ties", "sign test p (exact)"],
                    [[r["diff"], f"[{_fmt(r['ci95'][0])}, {_fmt(r['ci95'][1])}]", r["b_better"], r["a_better"],
                      r["ties"], r["sign_test_p"]]])
    return "\n".join(lines)


def write_compare_outputs(rows: list[dict], metric: str, out_dir: Path, title: str) -> tuple[Path, Path, Path]:
    """A compare's table (markdown + CSV), bar plot with 95% CIs and rows.json in ``out_dir``."""
    import csv

    from hqa.config import write_atomic

    cols = ["arm", "n", "em", "f1", "recall", "hits1", "ci_low", "ci_high", "lm_calls_per_q", "prompt_tokens_per_q",
            "completion_tokens_per_q", "tool_calls_per_q", "seconds_per_q", "errors", "compile_s"]
    md = [f"# {title}", "", f"95% bootstrap CI is for `{metric}`.", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        md.append("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    folder = CompareFolder(out_dir)
    table_md = folder.table_md
    write_atomic(table_md, "\n".join(md) + "\n")
    table_csv = folder.table_csv
    with open(table_csv, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    plot = folder.plot
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    vals = [r[metric] for r in rows]
    err = [[max(0.0, v - r["ci_low"]) for v, r in zip(vals, rows)], [max(0.0, r["ci_high"] - v) for v, r in zip(vals, rows)]]
    ax.bar([r["arm"] for r in rows], vals, yerr=err, capsize=4, color="#4C72B0")
    ax.set_ylabel(metric)
    ax.set_ylim(0, 1)
    ax.set_title(title)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(plot, dpi=110)
    plt.close(fig)
    write_atomic(folder.rows_json, json.dumps(rows, indent=2, default=str))
    return table_md, table_csv, plot
