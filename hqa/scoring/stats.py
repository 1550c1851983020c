"""The correctness rule of hqa's reports (:func:`is_correct`), the rows they score (:func:`scored_rows`) and the
statistics of a paired comparison (:func:`sign_test`, :func:`paired_bootstrap`: ``hqa report compare``,
``hqa compare``)."""

from __future__ import annotations

import math
from typing import Any

from hqa.schemas.trace import trace_of
from hqa.scoring.metrics import _QID_RE, answer_recall, qald_prf

__all__ = ["BENCHMARKS", "METRIC_NAMES", "benchmark_of", "is_correct", "mean", "paired_bootstrap", "ratio",
           "row_correct", "row_score", "scored_rows", "sign_test"]

METRIC_NAMES = ("em", "f1", "recall", "hits1", "qald_f1")
BENCHMARKS = ("mintaka", "qald", "compmix")


def mean(values: list[float]) -> float | None:
    """The mean rounded to 4 places, as every report prints it; None for no values."""
    return round(sum(values) / len(values), 4) if values else None


def ratio(num: int, den: int) -> float | None:
    """``num / den`` rounded to 4 places; None when ``den`` is 0."""
    return round(num / den, 4) if den else None


def is_correct(answer: str | None, gold: list[str], gold_ids: list[str] = ()) -> bool:
    """Answer-in-prediction recall against the gold labels (:func:`hqa.scoring.metrics.answer_recall`, HumanIQ's
    metric), or a gold QID named in the answer (QALD-10's entity answers are QIDs only)."""
    if not answer:
        return False
    ids = {str(g).upper() for g in gold_ids or []}
    return answer_recall(answer, list(gold or [])) >= 1.0 or any(q in ids for q in _QID_RE.findall(answer))


def row_correct(row: dict, answer: str | None) -> bool:
    """:func:`is_correct` of ``answer`` against a predictions row's gold labels and ids."""
    return is_correct(answer, row.get("gold") or [], row.get("gold_ids") or [])


def scored_rows(rows: list[dict]) -> list[dict]:
    """The rows that can be scored: all but those an import could not match to a gold answer
    (``trace.gold_matched`` is false, :mod:`hqa.data.authors_runs`); those are counted but left out of every score."""
    return [r for r in rows if trace_of(r).gold_matched is not False]


def benchmark_of(dataset: Any) -> str:
    """The HumanIQ benchmark a dataset name belongs to (``compmix/test``, ``humaniq-compmix`` → compmix; ``qald10``,
    ``qald9plus`` → qald; ``mintaka``), else the name itself."""
    name = str(dataset or "?").lower()
    return next((b for b in BENCHMARKS if name.startswith(b) or name.startswith(f"humaniq-{b}")), name)


def row_score(row: dict, metric: str) -> float:
    """A row's stored score, or for ``qald_f1`` (absent from rows written before it existed) recomputed."""
    scores = row.get("scores") or {}
    if metric == "qald_f1" and metric not in scores:
        return qald_prf(row.get("answer"), row.get("gold") or [], row.get("gold_ids") or [])[2]
    return float(scores.get(metric, 0.0))


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test p-value (ties already dropped): 2 · P(X ≤ min(wins, losses)), X ~ Bin(n, 1/2)."""
    n = wins + losses
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n)


def paired_bootstrap(diffs: list[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of ``diffs`` (questions resampled with replacement): of a paired
    difference in :func:`hqa.reports.compare.compare_runs`, of one arm's scores in ``hqa compare``."""
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
