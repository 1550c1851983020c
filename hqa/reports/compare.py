"""The paired comparison of two runs (``hqa report compare A B``) and the outputs of ``hqa compare`` (its table, CSV,
plot with 95% bootstrap intervals and rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hqa.errors import DataError
from hqa.io.files import write_atomic
from hqa.reports.markdown import fmt, table
from hqa.schemas.run_folder import ROWS, CompareFolder, RunFolder, read_rows
from hqa.scoring.stats import METRIC_NAMES, mean, paired_bootstrap, row_score, sign_test

__all__ = ["compare_markdown", "compare_runs", "write_compare_outputs", "write_table"]


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
    sa = [row_score(ra[i], metric) for i in shared]
    sb = [row_score(rb[i], metric) for i in shared]
    diffs = [y - x for x, y in zip(sa, sb)]
    wins = sum(1 for d in diffs if d > 0)
    losses = sum(1 for d in diffs if d < 0)
    return {"metric": metric, "n": len(shared), "only_a": len(set(ra) - set(rb)), "only_b": len(set(rb) - set(ra)),
            "a": str(a), "b": str(b), "mean_a": mean(sa), "mean_b": mean(sb), "diff": mean(diffs),
            "ci95": list(paired_bootstrap(diffs, n_boot=n_boot, seed=seed)), "b_better": wins, "a_better": losses,
            "ties": len(diffs) - wins - losses, "sign_test_p": round(sign_test(wins, losses), 6)}


def compare_markdown(result: dict[str, Any]) -> str:
    """The markdown of a :func:`compare_runs` result: both means, B − A with its interval, wins and the sign test."""
    r = result
    lines = [f"# Paired comparison: `{r['metric']}` on {r['n']} shared questions", ""]
    if r.get("only_a") or r.get("only_b"):
        lines += [f"({r['only_a']} questions only in A and {r['only_b']} only in B are left out.)", ""]
    lines += table(["run", "folder", f"mean {r['metric']}"], [["A", r["a"], r["mean_a"]], ["B", r["b"], r["mean_b"]]])
    lines += table(["B − A", "95% CI (paired bootstrap)", "B better", "A better", "ties", "sign test p (exact)"],
                   [[r["diff"], f"[{fmt(r['ci95'][0])}, {fmt(r['ci95'][1])}]", r["b_better"], r["a_better"],
                     r["ties"], r["sign_test_p"]]])
    return "\n".join(lines)


def write_table(rows: list[dict], cols: list[str], head: list[str], md: Path, csv_file: Path) -> None:
    """``rows`` as a markdown table under the lines ``head`` (in ``md``) and as CSV (``csv_file``), columns ``cols``."""
    import csv

    lines = [*head, "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    write_atomic(md, "\n".join(lines) + "\n")
    with open(csv_file, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_compare_outputs(rows: list[dict], metric: str, out_dir: Path, title: str) -> tuple[Path, Path, Path]:
    """A compare's table (markdown + CSV), bar plot with 95% CIs and rows.json in ``out_dir``."""
    cols = ["arm", "n", "em", "f1", "recall", "hits1", "ci_low", "ci_high", "lm_calls_per_q",
            "cached_lm_calls_per_q", "prompt_tokens_per_q", "completion_tokens_per_q", "tool_calls_per_q",
            "seconds_per_q", "errors", "compile_s"]
    folder = CompareFolder(out_dir)
    cached = sum(float(r.get("cached_lm_calls_per_q") or 0) for r in rows)
    note = ("Every arm's dev questions were asked with DSPy's LM cache off: its LM calls, tokens and seconds per "
            "question are its own." if not cached else
            "Some LM calls were served by DSPy's LM cache (`cached_lm_calls_per_q`): those arms' tokens and seconds "
            "per question leave them out.")
    write_table(rows, cols, [f"# {title}", "", f"95% bootstrap CI is for `{metric}`. {note}", ""], folder.table_md,
                folder.table_csv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the metric with its interval, and beside it what an arm costs per question (prompt + completion tokens)
    fig, (ax, cost_ax) = plt.subplots(1, 2, figsize=(max(8, 2.0 * len(rows)), 4))
    vals = [r[metric] for r in rows]
    err = [[max(0.0, v - r["ci_low"]) for v, r in zip(vals, rows)],
           [max(0.0, r["ci_high"] - v) for v, r in zip(vals, rows)]]
    arms = [r["arm"] for r in rows]
    ax.bar(arms, vals, yerr=err, capsize=4, color="#4C72B0")
    ax.set_ylabel(metric)
    ax.set_ylim(0, 1)
    ax.set_title(title)
    tokens = [float(r.get("prompt_tokens_per_q") or 0) + float(r.get("completion_tokens_per_q") or 0) for r in rows]
    cost_ax.bar(arms, tokens, color="#DD8452")
    cost_ax.set_ylabel("LM tokens per question (prompt + completion)")
    cost_ax.set_title("cost per question")
    for axis in (ax, cost_ax):
        plt.setp(axis.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(folder.plot, dpi=110)
    plt.close(fig)
    write_atomic(folder.rows_json, json.dumps(rows, indent=2, default=str))
    return folder.table_md, folder.table_csv, folder.plot
