"""The one markdown and plot helper of hqa's reports: how a value prints in a report table, the table itself, and the
plots ``hqa report`` writes beside ``summary.md``.  Each analysis module renders its own section with these
(:func:`hqa.reports.summary.render_markdown` puts the sections together)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hqa.schemas.run_folder import RunFolder
from hqa.scoring.stats import METRIC_NAMES

__all__ = ["fmt", "risk_coverage_plot", "summary_plots", "table"]


def fmt(v: Any, digits: int = 4) -> str:
    """A table cell: "–" for None; a float with at most ``digits`` decimals, trailing zeros dropped but one kept
    (``0.5``, ``1.0``, ``0.1235`` with 4; with 1 every float prints as ``f"{v:.1f}"``); anything else as ``str``."""
    if v is None:
        return "–"
    if isinstance(v, float):
        text = f"{v:.{digits}f}"
        if "." not in text:  # digits=0, nan, inf
            return text
        text = text.rstrip("0")
        return text + "0" if text.endswith(".") else text
    return str(v)


def table(header: list[str], rows: list[list[Any]], digits: int = 4) -> list[str]:
    """A markdown table (then an empty line) whose cells print with :func:`fmt`."""
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(fmt(c, digits) for c in row) + " |" for row in rows] + [""])


def summary_plots(summary: dict[str, Any], out: Path) -> list[Path]:
    """The report's plots of ``summary`` in the run folder ``out``: answer metrics and precision / recall per source
    (``metrics.png``), the agreement buckets with their accuracy (``agreement.png``) and, for a run that answered
    selectively, its risk-coverage curve (``risk_coverage.png``)."""
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
    folder = RunFolder(out)
    if not summary.get("selective"):
        folder.risk_coverage.unlink(missing_ok=True)  # an earlier report's plot of rows that are gone
        return [metrics_png, agreement_png]
    risk_coverage_plot({str(summary.get("title") or "run"): summary["selective"]}, folder.risk_coverage,
                       f"risk-coverage (n={summary['n']})")
    return [metrics_png, agreement_png, folder.risk_coverage]


def risk_coverage_plot(curves: dict[str, dict[str, Any]], path: Path, title: str) -> Path:
    """The risk-coverage curves of :func:`hqa.reports.selective.selective_summary` results (one line each, by
    name), each with its point at the threshold the run answered at, written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    for name, s in curves.items():
        curve = s.get("curve") or []
        line, = ax.plot([p["coverage"] for p in curve], [p["risk"] for p in curve], label=name, lw=1.4)
        ax.plot([s["coverage"]], [1 - s["precision"]], "o", color=line.get_color(), ms=5)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("coverage (share answered)")
    ax.set_ylabel("risk (1 − precision of answered)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
