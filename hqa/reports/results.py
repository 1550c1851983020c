"""The results table (``hqa results``, ``hqa study``; issue 54): one row per run folder — program, compile arm,
dataset and n, LM, world, hqa commit — with the benchmark's headline metric and its 95% bootstrap interval (from the
per-question rows, so intervals and paired tests are exact), coverage, tool calls, tokens and cost per question, p50
latency, failure rate, the config fingerprint and the command that reproduces the row; beside it the papers' value
for the same configuration (``hqa/data/published.json``) with the difference and where the settings differ, and with
a baseline the paired difference per row (McNemar's exact test for right/wrong metrics, a paired permutation test
for Macro F1 QALD; Benjamini-Hochberg over the rows).  Exports: terminal, Markdown, LaTeX, CSV, JSON, Every Eval
Ever records, and a static HTML page with the table and a plot of each benchmark's rows.  Definitions:
docs/studies.md.
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import statistics
from importlib import resources
from pathlib import Path
from typing import Any

from hqa.errors import DataError
from hqa.io.files import write_atomic
from hqa.reports.markdown import fmt, table as md_table
from hqa.schemas.run_folder import RunFolder
from hqa.scoring.metrics import qald_prf
from hqa.scoring.stats import (benchmark_of, bh_adjust, bootstrap_interval, harmonic_f1, mcnemar_exact,
                               paired_permutation_p, row_score, scored_rows)

__all__ = ["FORMATS", "HEADLINE", "headline_metric", "load_published", "pivot_markdown", "render", "results_table",
           "write_results"]

#: each benchmark's headline metric, as its papers report it: Hits@1 (automatic EM of the first answer) for CompMix
#: and Mintaka (HumanIQ Tables 1, 3), GERBIL's Macro F1 QALD for QALD (HumanIQ Table 2), EM for Bamboogle (SS-CoT
#: Tables 2-3; DIVKNOWQA's Table 2 for the sets it stands in for); anything else: answer-in-prediction recall
HEADLINE = {"compmix": "hits1", "mintaka": "hits1", "qald": "qald_f1", "bamboogle": "em"}
METRIC_LABEL = {"hits1": "Hits@1", "qald_f1": "Macro F1 QALD", "em": "EM", "f1": "F1", "recall": "recall"}
#: right/wrong metrics (McNemar's test); the others are paired by a permutation test
BINARY = ("hits1", "em")
FORMATS = ("terminal", "md", "latex", "csv", "json", "eee", "html")
#: what a dataset spec of hqa's differs in from the paper's data of the same benchmark, where it does
DATASET_NOTES = {"qald9plus": "DBpedia gold, not Wikidata", "mintaka": "24 Mintaka dev questions, not test",
                 "humaniq-compmix": "188 of HumanIQ's 199 listed questions"}


def headline_metric(dataset: Any) -> str:
    return HEADLINE.get(benchmark_of(dataset), "recall")


def load_published() -> list[dict]:
    """The published results (``hqa/data/published.json``: paper, table, row, column, metric, LM, data, n)."""
    text = resources.files("hqa.data").joinpath("published.json").read_text(encoding="utf-8")
    return json.loads(text)["results"]


# -- one row ------------------------------------------------------------------------------------------------------
def _vectors(rows: list[dict], metric: str) -> tuple:
    """The per-question arrays the headline statistic reduces: the scores, or (precision, recall) for QALD."""
    if metric == "qald_f1":
        prf = [qald_prf(r.get("answer"), r.get("gold") or [], r.get("gold_ids") or []) for r in rows]
        return ([x[0] for x in prf], [x[1] for x in prf])
    return ([row_score(r, metric) for r in rows],)


def _statistic(metric: str):
    import numpy as np

    return harmonic_f1 if metric == "qald_f1" else (lambda x, axis=-1: np.mean(x, axis=axis))


def _value(vectors: tuple, metric: str) -> float | None:
    import numpy as np

    if not vectors[0]:
        return None
    return round(float(np.asarray(_statistic(metric)(*[np.asarray(v, float) for v in vectors], axis=-1))), 4)


def _per_q(rows: list[dict], key: str) -> float | None:
    """The mean of a per-question field over the rows that have it (None: no row has it, e.g. a field that hqa
    versions before it did not write)."""
    values = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return round(sum(values) / len(values), 3) if values else None


def _cost(rows: list[dict], price: dict | None) -> float | None:
    if not price:
        return None
    total = 0.0
    for r in rows:
        p, c, o = (float(r.get(k) or 0) for k in ("prompt_tokens", "cached_prompt_tokens", "completion_tokens"))
        c = min(c, p)
        total += ((p - c) * price["prompt"] + c * price["cached_prompt"] + o * price["completion"]) / 1e6
    return total / len(rows) if rows else None


def _answered(row: dict) -> bool:
    return bool(row.get("answer")) and not row.get("abstained") and not row.get("error")


def _command(run, info: dict, n: int) -> str:
    if info.get("command"):
        return str(info["command"])
    import shlex

    args = ["hqa", "evaluate"]
    program = str(run.program)
    args += ["--load", program] if "/" in program else ["--program", program]
    if run.program_kwargs:
        args += ["--program-kwargs", json.dumps(run.program_kwargs, sort_keys=True)]
    return shlex.join([*args, "--dataset", str(run.dataset), "--limit", str(n)])


def _lm_of(info: dict, tag: dict) -> str:
    lm = info.get("lm") or {}
    if lm:
        return f"{lm.get('provider')}:{lm.get('model')}"
    return str(tag.get("lm") or "?")


def _row(folder: Path, seed: int) -> dict[str, Any]:
    rf = RunFolder(folder)
    run = rf.read_run()
    info, tag = rf.info(), run.tag
    rows = scored_rows(run.rows)
    dataset = str(run.dataset or "?")
    metric = headline_metric(dataset)
    vectors = _vectors(rows, metric)
    lo, hi = bootstrap_interval(vectors, _statistic(metric), seed=seed)
    git = info.get("git") or {}
    commit = (str(git.get("commit") or "")[:10] + ("+dirty" if git.get("dirty") else "")) or "?"
    fingerprint = info.get("fingerprint") or hashlib.sha256(
        json.dumps(tag, sort_keys=True, default=str).encode()).hexdigest()[:12]
    fallbacks = [r for r in run.rows if "fallback" in r]
    return {
        "label": info.get("label") or str(run.program), "program": str(run.program),
        "program_kwargs": run.program_kwargs or {}, "arm": info.get("arm") or tag.get("arm") or "none",
        "dataset": dataset, "benchmark": benchmark_of(dataset), "n": len(rows), "lm": _lm_of(info, tag),
        "world": info.get("world") or "?", "commit": commit, "seed": info.get("seed", tag.get("seed")),
        "metric": metric, "value": _value(vectors, metric), "ci_low": lo, "ci_high": hi,
        "coverage": round(sum(map(_answered, run.rows)) / len(run.rows), 4) if run.rows else None,
        "lm_calls_per_q": _per_q(run.rows, "lm_calls"), "tool_calls_per_q": _per_q(run.rows, "tool_calls"),
        "prompt_tokens_per_q": _per_q(run.rows, "prompt_tokens"),
        "cached_prompt_tokens_per_q": _per_q(run.rows, "cached_prompt_tokens"),
        "completion_tokens_per_q": _per_q(run.rows, "completion_tokens"),
        "cost_per_q": _cost(run.rows, info.get("price")),
        "p50_seconds": round(statistics.median(float(r.get("seconds") or 0) for r in run.rows), 3) if run.rows else None,
        "failure_rate": round(sum(1 for r in run.rows if r.get("error")) / len(run.rows), 4) if run.rows else None,
        # written by newer hqa versions only: absent = unknown
        "parse_failures_per_q": _per_q(run.rows, "parse_failures"), "retries_per_q": _per_q(run.rows, "retries"),
        "cached_lm_calls_per_q": _per_q(run.rows, "cached_lm_calls"),
        "fallback_rate": round(sum(1 for r in fallbacks if r.get("fallback")) / len(fallbacks), 4) if fallbacks else None,
        "fingerprint": fingerprint, "command": _command(run, info, len(run.rows)),
        "mlflow_run_id": info.get("mlflow_run_id"), "folder": str(folder),
        "_rows": {str(r["id"]): r for r in rows},
    }


# -- the papers' numbers ------------------------------------------------------------------------------------------
def _lm_name(lm: str) -> str:
    return lm.split(":", 1)[-1].split("/")[-1].lower()


def _published_for(row: dict, published: list[dict]) -> tuple[dict | None, list[str]]:
    """The published entry beside ``row`` and where its settings differ: the same hqa program and kwargs on the same
    benchmark (or the set it stands in for) and metric, automatic before manual, the row's LM first; else the best
    published result of another system on the benchmark."""
    def same(e):
        bench = e.get("stands_in") or e["benchmark"]
        return bench == row["benchmark"] and e["metric"] == row["metric"]

    mine = [e for e in published if same(e) and e.get("hqa_program") == row["program"]
            and (e.get("hqa_kwargs") or {}) == row["program_kwargs"] and row["arm"] == "none"]
    # automatic before manual, the row's LM first, else the paper's strongest LM (its highest value)
    mine.sort(key=lambda e: (e["judgement"] != "automatic", _lm_name(str(e.get("lm"))) != _lm_name(row["lm"]),
                             -e["value"]))
    entry = mine[0] if mine else next((e for e in published if same(e) and e.get("hqa_program") is None), None)
    if entry is None:
        return None, []
    differ = []
    if entry.get("hqa_program") is None:
        differ.append(f"another system ({entry['row']})")
    if entry.get("stands_in"):
        differ.append(f"other data ({entry['data']})")
    elif entry.get("n") and entry["n"] != row["n"]:
        differ.append(f"{'a sample of ' if entry.get('sample') else ''}{entry['n']} questions there, {row['n']} here")
    elif entry.get("sample"):
        differ.append("a random sample there")
    note = DATASET_NOTES.get(row["dataset"].split(":")[0])
    if note and not entry.get("stands_in"):
        differ.append(note)
    if entry["judgement"] != "automatic":
        differ.append("manual metric there")
    if entry.get("lm") and _lm_name(str(entry["lm"])) != _lm_name(row["lm"]):
        differ.append(f"other LM ({entry['lm']})")
    if row["arm"] != "none":
        differ.append(f"compiled ({row['arm']})")
    return entry, differ


# -- paired differences -------------------------------------------------------------------------------------------
def _matches(row: dict, selector: str, number: int) -> bool:
    """Whether ``row`` (the ``number``-th) is picked by ``--baseline SELECTOR``: a row number, a label or program,
    or ``key=value,...`` over the row's fields."""
    selector = selector.strip()
    if selector.isdigit():
        return int(selector) == number
    if "=" in selector:
        return all(str(row.get(k.strip())) == v.strip() for k, _, v in (p.partition("=") for p in selector.split(",")))
    return selector in (row["label"], row["program"])


def _paired(base: dict, row: dict, seed: int) -> dict[str, Any]:
    import numpy as np

    shared = sorted(set(base["_rows"]) & set(row["_rows"]))
    if len(shared) < 2:
        return {"paired_n": len(shared)}
    metric = row["metric"]
    a = _vectors([base["_rows"][i] for i in shared], metric)
    b = _vectors([row["_rows"][i] for i in shared], metric)
    stat = _statistic(metric)
    k = len(a)

    def diff(*arrays, axis=-1):
        return stat(*arrays[k:], axis=axis) - stat(*arrays[:k], axis=axis)

    lo, hi = bootstrap_interval((*a, *b), diff, seed=seed)
    out = {"paired_n": len(shared), "diff": round(float(diff(*[np.asarray(v, float) for v in (*a, *b)])), 4),
           "diff_ci_low": lo, "diff_ci_high": hi}
    if metric in BINARY:
        right_a, right_b = [x >= 1 for x in a[0]], [x >= 1 for x in b[0]]
        only_a = sum(1 for x, y in zip(right_a, right_b) if x and not y)
        only_b = sum(1 for x, y in zip(right_a, right_b) if y and not x)
        out.update(test="McNemar exact", discordant=[only_a, only_b], p=round(mcnemar_exact(only_a, only_b), 6))
    else:
        out.update(test="paired permutation", p=round(paired_permutation_p(a, b, stat, seed=seed), 6))
    return out


def results_table(folders: list[Path], baseline: str | None = None, seed: int = 0) -> dict[str, Any]:
    """The table over run ``folders`` (each a run folder with ``predictions.jsonl``): rows sorted by benchmark,
    dataset and program, each with its published value and, with ``baseline``, its paired difference against the
    baseline row of the same dataset (the one with the same LM first), p-values adjusted by Benjamini-Hochberg."""
    if not folders:
        raise DataError("no run folders to tabulate")
    rows = [_row(Path(f), seed) for f in folders]
    rows.sort(key=lambda r: (r["benchmark"], r["dataset"], r["label"], r["arm"], r["lm"], str(r["seed"])))
    published = load_published()
    for i, row in enumerate(rows, 1):
        row["row"] = i
        entry, differ = _published_for(row, published)
        if entry is not None:
            value = round(entry["value"] / entry["scale"], 4)
            row.update(published=value, published_delta=None if row["value"] is None else round(row["value"] - value, 4),
                       published_source=f"{entry['paper']} {entry['table']}, row {entry['row']}, column {entry['column']}",
                       published_lm=entry.get("lm"), settings_differ=differ)
    if baseline:
        bases = [r for r in rows if _matches(r, baseline, r["row"])]
        if not bases:
            raise DataError(f"--baseline {baseline!r} matches no row (give a row number, a label or program, or "
                            "key=value,... over the row's fields)")
        for row in rows:
            candidates = [b for b in bases if b["dataset"] == row["dataset"] and b is not row]
            candidates.sort(key=lambda b: (b["lm"] != row["lm"], b["seed"] != row["seed"]))
            if candidates and row not in bases:
                row["baseline"] = candidates[0]["row"]
                row.update(_paired(candidates[0], row, seed))
        adjusted = bh_adjust([r.get("p") for r in rows])
        for row, q in zip(rows, adjusted):
            if q is not None:
                row["p_bh"] = round(q, 6)
    return {"rows": rows, "baseline": baseline, "seed": seed}


# -- rendering ----------------------------------------------------------------------------------------------------
def _interval(lo, hi) -> str:
    return "–" if lo is None else f"[{fmt(lo, 3)}, {fmt(hi, 3)}]"


def _money(v) -> str:
    return "–" if v is None else (f"${v:.4f}" if v >= 0.0001 or v == 0 else f"${v:.1e}")


def _cells(r: dict) -> list[str]:
    """One row as the table's text cells (:data:`COLUMNS`)."""
    pub = "–"
    if r.get("published") is not None:
        pub = f"{fmt(r['published'], 3)} (Δ {fmt(r['published_delta'], 3)})"
        if r.get("settings_differ"):
            pub += "; differs: " + "; ".join(r["settings_differ"])
    paired = "–"
    if r.get("diff") is not None:
        paired = (f"{fmt(r['diff'], 3)} {_interval(r.get('diff_ci_low'), r.get('diff_ci_high'))} vs row "
                  f"{r['baseline']}, p {fmt(r.get('p'), 4)}, BH {fmt(r.get('p_bh'), 4)}")
    tokens = "/".join(fmt(r.get(k), 0) if r.get(k) is not None else "–"
                      for k in ("prompt_tokens_per_q", "cached_prompt_tokens_per_q", "completion_tokens_per_q"))
    return [str(r["row"]), r["label"], r["arm"], f"{r['dataset']} ({r['n']})", r["lm"], r["world"], r["commit"],
            f"{METRIC_LABEL.get(r['metric'], r['metric'])} {fmt(r['value'], 3)}", _interval(r["ci_low"], r["ci_high"]),
            pub, fmt(r["coverage"], 3), fmt(r["tool_calls_per_q"], 1), tokens, _money(r["cost_per_q"]),
            fmt(r["p50_seconds"], 2), fmt(r["failure_rate"], 3), paired, r["fingerprint"]]


COLUMNS = ["#", "program", "arm", "dataset (n)", "LM", "world", "commit", "headline", "95% CI", "published (Δ)",
           "coverage", "tool calls/q", "tokens/q prompt/cached/completion", "cost/q", "p50 s", "failures",
           "Δ vs baseline [95% CI], p, BH", "fingerprint"]


def _markdown(result: dict, title: str) -> str:
    rows = result["rows"]
    lines = [f"# {title}", "", "Headline metric per benchmark (Hits@1 CompMix/Mintaka, Macro F1 QALD for QALD, EM "
             "Bamboogle) with its 95% percentile bootstrap interval over questions; published = the papers' value for "
             "the same configuration (hqa/data/published.json), with what differs.", ""]
    lines += md_table(COLUMNS, [_cells(r) for r in rows])
    extra = [k for k in ("parse_failures_per_q", "retries_per_q", "cached_lm_calls_per_q", "fallback_rate")
             if any(r.get(k) is not None for r in rows)]
    if extra:
        lines += md_table(["#", *extra], [[r["row"], *[r.get(k) for k in extra]] for r in rows])
    lines += ["## Reproduce", ""]
    lines += md_table(["#", "command", "MLflow run", "published source"],
                      [[r["row"], f"`{r['command']}`", r.get("mlflow_run_id") or "–", r.get("published_source") or "–"]
                       for r in rows])
    return "\n".join(lines)


def _terminal(result: dict, title: str) -> str:
    cols = [0, 1, 2, 3, 4, 7, 8, 9, 10, 13, 16]
    head = [COLUMNS[i] for i in cols]
    body = [[_cells(r)[i] for i in cols] for r in result["rows"]]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [title, line(head), line(["-" * w for w in widths]), *map(line, body), ""]
    out += [f"{r['row']}: {r['command']}" for r in result["rows"]]
    return "\n".join(out)


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "Δ": r"$\Delta$"}


def _tex(text: str) -> str:
    return "".join(_LATEX.get(ch, ch) for ch in str(text))


def _latex(result: dict, title: str) -> str:
    cols = [0, 1, 2, 3, 4, 7, 8, 9, 10, 13, 16]
    lines = [f"% {title}", r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule",
             " & ".join(_tex(COLUMNS[i]) for i in cols) + r" \\", r"\midrule"]
    lines += [" & ".join(_tex(_cells(r)[i]) for i in cols) + r" \\" for r in result["rows"]]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def _plain(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("_")}


def _csv(result: dict) -> str:
    rows = [_plain(r) for r in result["rows"]]
    fields = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()})
    return buf.getvalue()


def _json(result: dict) -> str:
    return json.dumps({**result, "rows": [_plain(r) for r in result["rows"]]}, indent=1, default=str) + "\n"


def _eee(result: dict) -> str:
    """The rows as Every Eval Ever records (schema 0.2.1: github.com/evaleval/every_eval_ever, ``eval.schema.json``),
    one per row; hqa's own fields go under ``additional_details`` (string values, as the schema asks)."""
    import time

    from hqa.version import __version__

    now = str(time.time())
    records = []
    for r in result["rows"]:
        provider, _, model = r["lm"].partition(":")
        details = {k: str(v) for k, v in _plain(r).items() if v is not None and k not in ("value", "ci_low", "ci_high")}
        score = {"score": r["value"] if r["value"] is not None else 0.0}
        if r["ci_low"] is not None:
            score["uncertainty"] = {"confidence_interval": {"lower": r["ci_low"], "upper": r["ci_high"],
                                                            "confidence_level": 0.95, "method": "percentile bootstrap"},
                                    "num_samples": r["n"], "num_bootstrap_samples": 2000}
        records.append({
            "schema_version": "0.2.1",
            "evaluation_id": f"hqa/{r['label']}/{r['dataset']}/{r['fingerprint']}/{now}",
            "retrieved_timestamp": now,
            "source_metadata": {"source_name": "hqa", "source_type": "evaluation_run",
                                "source_organization_name": "unknown", "evaluator_relationship": "third_party"},
            "eval_library": {"name": "hqa", "version": __version__,
                             "additional_details": {"commit": r["commit"], "fingerprint": r["fingerprint"]}},
            "model_info": {"name": model or r["lm"], "id": f"{provider}/{model}" if model else r["lm"],
                           "inference_platform": provider},
            "evaluation_results": [{
                "evaluation_name": f"{r['dataset']} {METRIC_LABEL.get(r['metric'], r['metric'])} ({r['label']}, "
                                   f"arm {r['arm']})",
                "source_data": {"dataset_name": r["dataset"], "source_type": "other",
                                "additional_details": {"n": str(r["n"]), "world": str(r["world"])}},
                "metric_config": {"evaluation_description": METRIC_LABEL.get(r["metric"], r["metric"]),
                                  "lower_is_better": False, "score_type": "continuous", "min_score": 0.0,
                                  "max_score": 1.0},
                "score_details": score,
                "generation_config": {"generation_args": {"execution_command": r["command"]},
                                      "additional_details": details}}]})
    return json.dumps(records, indent=1, default=str) + "\n"


def _plots_svg(result: dict) -> list[tuple[str, str]]:
    """Per benchmark, an SVG of its rows' headline values with their 95% intervals (and published values as ×)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    benchmarks = list(dict.fromkeys(r["benchmark"] for r in result["rows"]))
    for bench in benchmarks:
        rows = [r for r in result["rows"] if r["benchmark"] == bench and r["value"] is not None]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(rows) + 2), 3.2))
        xs = range(len(rows))
        vals = [r["value"] for r in rows]
        err = [[max(0.0, v - (r["ci_low"] if r["ci_low"] is not None else v)) for v, r in zip(vals, rows)],
               [max(0.0, (r["ci_high"] if r["ci_high"] is not None else v) - v) for v, r in zip(vals, rows)]]
        ax.errorbar(list(xs), vals, yerr=err, fmt="o", capsize=4, color="#4C72B0", label="hqa (95% CI)")
        pub = [(i, r["published"]) for i, r in enumerate(rows) if r.get("published") is not None]
        if pub:
            ax.scatter([p[0] for p in pub], [p[1] for p in pub], marker="x", color="#C44E52", label="published")
        ax.set_xticks(list(xs), [f"#{r['row']} {r['label']}" for r in rows], rotation=25, ha="right", fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel(METRIC_LABEL.get(rows[0]["metric"], rows[0]["metric"]))
        ax.set_title(bench)
        ax.legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        plt.close(fig)
        svg = buf.getvalue()
        out.append((bench, svg[svg.index("<svg"):]))
    return out


def _html(result: dict, title: str) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    body = "\n".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in _cells(r)) + "</tr>" for r in result["rows"])
    commands = "\n".join(f"<li id='cmd-{r['row']}'><code>{e(r['command'])}</code></li>" for r in result["rows"])
    plots = "\n".join(f"<figure class='plot' data-benchmark='{e(b)}'><figcaption>{e(b)}</figcaption>{svg}</figure>"
                      for b, svg in _plots_svg(result))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}} th{{background:#f3f3f3}}
figure{{display:inline-block;margin:0 1em 1em 0}} code{{font-size:12px}}</style></head>
<body><h1>{e(title)}</h1>
<p>Headline metric per benchmark with its 95% percentile bootstrap interval over questions; published values from
hqa/data/published.json, with what differs.</p>
<table id="results"><thead><tr>{head}</tr></thead><tbody>
{body}
</tbody></table>
<h2>Plots</h2>
{plots}
<h2>Reproduce</h2><ol id="commands">
{commands}
</ol></body></html>
"""


def render(result: dict, fmt_name: str, title: str = "results") -> str:
    """The table in one of :data:`FORMATS`."""
    renderers = {"terminal": lambda: _terminal(result, title), "md": lambda: _markdown(result, title),
                 "latex": lambda: _latex(result, title), "csv": lambda: _csv(result), "json": lambda: _json(result),
                 "eee": lambda: _eee(result), "html": lambda: _html(result, title)}
    if fmt_name not in renderers:
        raise DataError(f"unknown format {fmt_name!r}; valid: {', '.join(FORMATS)}")
    return renderers[fmt_name]()


SUFFIX = {"md": ".md", "latex": ".tex", "csv": ".csv", "json": ".json", "eee": ".eee.json", "html": ".html"}


def write_results(result: dict, stem: Path, title: str = "results") -> dict[str, Path]:
    """Every file format of the table beside ``stem`` (``results.md``, ``.tex``, ``.csv``, ``.json``, ``.eee.json``,
    ``.html``)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, suffix in SUFFIX.items():
        path = stem.with_name(stem.name + suffix)
        write_atomic(path, render(result, name, title))
        out[name] = path
    return out


# -- pivots -------------------------------------------------------------------------------------------------------
def pivot_markdown(result: dict, kind: str) -> str:
    """Each row broken down as the reports already do: ``benchmark`` (the per-benchmark metrics of a pooled run),
    ``source`` (HumanIQ Table 5's re / prec / prev, Aggregated) or ``errors`` (HumanIQ Table 9's categories)."""
    from hqa.reports.errors import ERROR_CATEGORIES, error_categories
    from hqa.reports.sources import source_table
    from hqa.reports.summary import summarize_rows

    rows = result["rows"]
    if kind == "errors":
        body = []
        for r in rows:
            counts = error_categories(list(r["_rows"].values()))["counts"]
            body.append([r["row"], r["label"], r["dataset"], *[counts.get(c, 0) for c in ERROR_CATEGORIES]])
        return "\n".join(md_table(["#", "program", "dataset", *ERROR_CATEGORIES], body))
    if kind == "source":
        body = []
        for r in rows:
            agg = source_table(list(r["_rows"].values())).get("aggregated") or {}
            for source, values in agg.items():
                body.append([r["row"], r["label"], r["dataset"], source, values.get("re"), values.get("prec"),
                             values.get("prev")])
        return "\n".join(md_table(["#", "program", "dataset", "source", "re", "prec", "prev"], body))
    if kind == "benchmark":
        body = []
        for r in rows:
            per = summarize_rows(list(r["_rows"].values()))["per_benchmark"]
            for bench, v in per.items():
                body.append([r["row"], r["label"], bench, v["n"], v["hits1"], v["f1_qald"], v["recall"]])
        return "\n".join(md_table(["#", "program", "benchmark", "n", "Hits@1", "Macro F1 QALD", "recall"], body))
    raise DataError(f"unknown pivot {kind!r}; valid: benchmark, source, errors")
