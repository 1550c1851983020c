"""Determinantal point process (DPP) demo selection, in plain numpy.

HumanIQ picks the few-shot demonstrations for a question with a DPP whose

* quality ``q_i`` is the relevance of demo *i* to the question (cosine similarity of sentence embeddings, mapped to
  ``(0, 1]`` as ``(1 + cos) / 2``), and whose
* similarity ``S_ij`` is ``1 - normalised Levenshtein distance`` between the demos' tool-action sequences (one
  symbol per action),

so the kernel is ``L = diag(q) · S · diag(q)``.  ``k`` demos are chosen by greedy MAP inference
(Chen, Zhang & Zhou 2018, "Fast Greedy MAP Inference for Determinantal Point Process to Improve Recommendation
Diversity"): each step adds the item that maximises ``log det L_Y``, using an incremental Cholesky update, so
choosing k of N costs O(N·k²).  Greedy MAP is an approximation: it equals a step-by-step ``slogdet`` search,
not always the exhaustive best k-subset.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

MODES = ("dpp", "relevance", "diversity", "random")

#: Added to the similarity matrix's diagonal so the kernel stays positive definite (identical action sequences
#: otherwise make it singular).
DEFAULT_JITTER = 1e-6

# Residual gains at or below this are "no new direction": the kernel restricted to the chosen items plus any
# further item is (numerically) singular.
_GAIN_EPS = 1e-12


# -- Levenshtein distance over symbol sequences -----------------------------------------------------------------------
def levenshtein(a: Sequence[str], b: Sequence[str]) -> int:
    """Edit distance (insert / delete / substitute, each cost 1) between two sequences of symbols.

    Each element is one symbol (a tool name), so ``levenshtein(["WikiSearch"], ["Read"]) == 1``.  A plain string
    is a sequence of characters.
    """
    a, b = list(a), list(b)
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def normalized_levenshtein(a: Sequence[str], b: Sequence[str]) -> float:
    """``levenshtein(a, b) / max(len(a), len(b))`` in ``[0, 1]``; 0.0 for two empty sequences."""
    n = max(len(a), len(b))
    return 0.0 if n == 0 else levenshtein(a, b) / n


def action_similarity(sequences: Sequence[Sequence[str]]) -> np.ndarray:
    """``S_ij = 1 - normalized_levenshtein(seq_i, seq_j)`` (symmetric, ones on the diagonal)."""
    n = len(sequences)
    sim = np.ones((n, n), dtype=np.float64)
    for i in range(n):
        for j in range(i + 1, n):
            sim[i, j] = sim[j, i] = 1.0 - normalized_levenshtein(sequences[i], sequences[j])
    return sim


# -- Kernel and greedy MAP --------------------------------------------------------------------------------------------
def psd_similarity(similarity: np.ndarray, jitter: float = DEFAULT_JITTER) -> np.ndarray:
    """Make a similarity matrix safe as a DPP similarity: symmetrise it, clip negative eigenvalues to zero (an edit
    distance similarity need not be positive semi-definite) and add ``jitter`` to the diagonal."""
    s = np.asarray(similarity, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {s.shape}")
    s = (s + s.T) / 2.0
    if s.shape[0]:
        w, v = np.linalg.eigh(s)
        if w[0] < 0:
            s = (v * np.clip(w, 0.0, None)) @ v.T
            s = (s + s.T) / 2.0
    return s + jitter * np.eye(s.shape[0])


def dpp_kernel(relevance: np.ndarray, similarity: np.ndarray, jitter: float = DEFAULT_JITTER) -> np.ndarray:
    """``L = diag(q) · S · diag(q)`` with ``S`` made PSD-safe by :func:`psd_similarity`."""
    q = np.asarray(relevance, dtype=np.float64).reshape(-1)
    s = psd_similarity(similarity, jitter)
    if s.shape[0] != q.shape[0]:
        raise ValueError(f"{q.shape[0]} relevance scores for a {s.shape[0]}x{s.shape[0]} similarity matrix")
    return q[:, None] * s * q[None, :]


def _argmax_first(values: np.ndarray) -> int:
    """Index of the maximum; among values within a relative 1e-10 of it, the smallest index (deterministic ties)."""
    best = float(np.max(values))
    tol = 1e-10 * max(1.0, abs(best))
    return int(np.flatnonzero(values >= best - tol)[0])


def greedy_map(L: np.ndarray, k: int) -> list[int]:
    """Greedy MAP inference for a k-DPP with kernel ``L`` (Chen et al. 2018, incremental Cholesky).

    Returns up to ``min(k, N)`` distinct indices in the order chosen.  Step *t* adds the item with the largest
    marginal gain ``d_j² = det L_{Y+j} / det L_Y``; ties (within 1e-10 relative) go to the smaller index.  When
    every remaining gain is numerically zero (the kernel is singular on the rest) the remaining slots are filled by
    largest ``L_jj`` then index.
    """
    L = np.asarray(L, dtype=np.float64)
    if L.ndim != 2 or L.shape[0] != L.shape[1]:
        raise ValueError(f"L must be a square matrix, got shape {L.shape}")
    n = L.shape[0]
    k = max(0, min(int(k), n))
    if k == 0:
        return []
    cis = np.zeros((k, n))  # rows of the incremental Cholesky factor, one per chosen item
    gains = np.diag(L).copy()  # d_j²: current marginal gain of each item
    chosen: list[int] = []
    available = np.ones(n, dtype=bool)
    while len(chosen) < k:
        masked = np.where(available, gains, -np.inf)
        j = _argmax_first(masked)
        if masked[j] <= _GAIN_EPS:
            break
        chosen.append(j)
        available[j] = False
        t = len(chosen) - 1
        if len(chosen) == k:
            break
        # e_i = (L_ji - <c_j, c_i>) / d_j ;  d_i² -= e_i²
        e = (L[j, :] - cis[:t, j] @ cis[:t, :]) / np.sqrt(gains[j])
        cis[t, :] = e
        gains = gains - e * e
    if len(chosen) < k:
        rest = sorted(np.flatnonzero(available), key=lambda i: (-L[i, i], i))
        chosen.extend(int(i) for i in rest[: k - len(chosen)])
    return chosen


# -- Demo selection ---------------------------------------------------------------------------------------------------
def relevance_scores(query_vec: np.ndarray, demo_vecs: np.ndarray) -> np.ndarray:
    """Cosine similarity of L2-normalised vectors mapped to ``(0, 1]``: ``(1 + cos) / 2``, floored at 1e-6."""
    q = np.asarray(query_vec, dtype=np.float64).reshape(-1)
    d = np.asarray(demo_vecs, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] != q.shape[0]:
        raise ValueError(f"demo_vecs of shape {d.shape} do not match a query vector of size {q.shape[0]}")
    cos = np.clip(d @ q, -1.0, 1.0)
    return np.clip((1.0 + cos) / 2.0, 1e-6, 1.0)


def select_demos(query_vec: np.ndarray | None, demo_vecs: np.ndarray | None, demo_actions: Sequence[Sequence[str]],
                 k: int, mode: str = "dpp", rng: np.random.Generator | int | None = None, exclude: Iterable[int] = (),
                 *, similarity: np.ndarray | None = None, jitter: float = DEFAULT_JITTER) -> list[int]:
    """Pick ``k`` demo indices for one query.

    * ``"dpp"`` — greedy MAP of ``L = diag(relevance) · S · diag(relevance)``;
    * ``"relevance"`` — the k most relevant (ties → smaller index);
    * ``"diversity"`` — greedy MAP with all qualities equal (the query is ignored);
    * ``"random"`` — k distinct indices drawn with ``rng`` (a ``numpy.random.Generator`` or a seed).

    ``demo_actions`` gives each demo's action sequence; ``similarity`` may pass the precomputed
    :func:`action_similarity` of all demos instead (it is indexed, not recomputed).  Indices in ``exclude`` are never
    picked.  Returns indices into the demo list, in selection order; fewer than ``k`` when fewer are allowed.
    ``query_vec``/``demo_vecs`` may be ``None`` for the ``"diversity"`` and ``"random"`` modes.
    """
    if mode not in MODES:
        raise ValueError(f"unknown selection mode {mode!r}; expected one of {', '.join(MODES)}")
    n = len(demo_actions) if similarity is None else np.asarray(similarity).shape[0]
    if demo_vecs is not None and len(demo_vecs) != n:
        raise ValueError(f"{len(demo_vecs)} demo vectors for {n} demos")
    banned = {int(i) for i in exclude}
    cand = np.array([i for i in range(n) if i not in banned], dtype=np.int64)
    k = min(int(k), len(cand))
    if k <= 0:
        return []

    if mode == "random":
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        return [int(i) for i in gen.choice(cand, size=k, replace=False)]

    if mode in ("dpp", "relevance"):
        if query_vec is None or demo_vecs is None:
            raise ValueError(f"mode {mode!r} needs query_vec and demo_vecs")
        rel = relevance_scores(query_vec, np.asarray(demo_vecs)[cand])
        if mode == "relevance":
            order = np.lexsort((cand, -rel))  # by relevance desc, then index
            return [int(cand[i]) for i in order[:k]]
    else:
        rel = np.ones(len(cand))

    if similarity is not None:
        sim = np.asarray(similarity, dtype=np.float64)[np.ix_(cand, cand)]
    else:
        sim = action_similarity([demo_actions[i] for i in cand])
    picks = greedy_map(dpp_kernel(rel, sim, jitter), k)
    return [int(cand[i]) for i in picks]


__all__ = ["MODES", "DEFAULT_JITTER", "levenshtein", "normalized_levenshtein", "action_similarity", "psd_similarity",
           "dpp_kernel", "greedy_map", "relevance_scores", "select_demos"]
