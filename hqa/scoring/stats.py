"""The correctness rule of hqa's reports (:func:`is_correct`), the rows they score (:func:`scored_rows`) and the
statistics of a paired comparison (:func:`sign_test`, :func:`paired_bootstrap`: ``hqa report compare``,
``hqa compare``); the results table's (``hqa results``, issue 54) from scipy: a bootstrap interval of any statistic
over questions (:func:`bootstrap_interval`), McNemar's exact test (:func:`mcnemar_exact`), a paired permutation test
(:func:`paired_permutation_p`) and the Benjamini-Hochberg adjustment (:func:`bh_adjust`)."""

from __future__ import annotations

import math
from typing import Any

from hqa.schemas.trace import trace_of
from hqa.scoring.metrics import _QID_RE, answer_recall, qald_prf

__all__ = ["BENCHMARKS", "METRIC_NAMES", "benchmark_of", "bh_adjust", "bootstrap_interval", "harmonic_f1",
           "is_correct", "mcnemar_exact", "mean", "paired_bootstrap", "paired_permutation_p", "ratio", "row_correct",
           "row_score", "scored_rows", "sign_test"]

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


# -- the results table's statistics (scipy.stats; issue 54) ---------------------------------------------------------
def harmonic_f1(p, r, axis: int = -1):
    """GERBIL's Macro F1 QALD over per-question precisions ``p`` and recalls ``r`` (arrays; vectorised along
    ``axis``): the harmonic mean of their means, 0 where both means are 0 (:func:`hqa.scoring.metrics.macro_f1_qald`)."""
    import numpy as np

    mp, mr = np.mean(p, axis=axis), np.mean(r, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mp + mr > 0, 2 * mp * mr / (mp + mr), 0.0)


def bootstrap_interval(samples: tuple, statistic=None, seed: int = 0, n_resamples: int = 2000,
                       level: float = 0.95) -> tuple[float | None, float | None]:
    """The ``level`` percentile bootstrap interval of ``statistic`` (default the mean) over questions:
    ``scipy.stats.bootstrap`` with the per-question arrays in ``samples`` resampled together (paired), seeded.
    (None, None) for fewer than 2 questions."""
    import warnings

    import numpy as np
    from scipy.stats import bootstrap

    arrays = tuple(np.asarray(a, dtype=float) for a in samples)
    if not arrays or len(arrays[0]) < 2:
        return (None, None)
    statistic = statistic or (lambda x, axis=-1: np.mean(x, axis=axis))
    if len(set(np.concatenate(arrays).tolist())) == 1:  # every resample gives the same value
        value = float(np.asarray(statistic(*arrays, axis=-1)))
        return (round(value, 4), round(value, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's DegenerateDataWarning for near-constant data
        res = bootstrap(arrays, statistic, paired=True, vectorized=True, n_resamples=n_resamples,
                        confidence_level=level, method="percentile", rng=np.random.default_rng(seed))
    lo, hi = res.confidence_interval
    return (round(float(lo), 4), round(float(hi), 4))


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact test of paired right/wrong outcomes: ``b`` questions only the first got right, ``c`` only the
    second; the two-sided binomial test of ``c`` of ``b + c`` discordant pairs at 1/2 (``scipy.stats.binomtest``).
    1.0 without discordant pairs."""
    from scipy.stats import binomtest

    if b + c == 0:
        return 1.0
    return float(binomtest(int(c), int(b + c), 0.5, alternative="two-sided").pvalue)


def paired_permutation_p(first: tuple, second: tuple, statistic, seed: int = 0, n_resamples: int = 2000) -> float:
    """Two-sided p-value of ``statistic(second) - statistic(first)`` under exchanging each question's pair of
    outcomes (``scipy.stats.permutation_test``, ``permutation_type="samples"``); ``first`` / ``second`` are tuples of
    per-question arrays (e.g. precisions and recalls) that ``statistic(*arrays, axis=-1)`` reduces."""
    import numpy as np
    from scipy.stats import permutation_test

    k = len(first)
    # each sample is one (k, n) array: permutation_type="samples" swaps the i-th question's column between the two,
    # the same swap for all k of its values (its precision and recall stay together)
    x = np.stack([np.asarray(v, dtype=float) for v in first])
    y = np.stack([np.asarray(v, dtype=float) for v in second])

    def diff(a, b, axis=-1):
        return (statistic(*[b[..., j, :] for j in range(k)], axis=-1)
                - statistic(*[a[..., j, :] for j in range(k)], axis=-1))

    res = permutation_test((x, y), diff, permutation_type="samples", vectorized=True, n_resamples=n_resamples,
                           alternative="two-sided", axis=-1, rng=np.random.default_rng(seed))
    return float(res.pvalue)


def bh_adjust(pvalues: list[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (``scipy.stats.false_discovery_control``) over the given ones, None kept."""
    from scipy.stats import false_discovery_control

    given = [p for p in pvalues if p is not None]
    if not given:
        return list(pvalues)
    adjusted = iter(false_discovery_control(given, method="bh").tolist())
    return [None if p is None else float(next(adjusted)) for p in pvalues]
