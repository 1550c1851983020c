"""One retrieval hop over every source: dense passages + BM25 triples (+ SPARQL rows), deduplicated and reranked.

``MultiSourceRetriever(dense, bm25, sparql_fn, reranker)(queries, sparql=None, k=None)``:

1. for each query, ``k_per_source`` passages from ``dense`` and ``k_per_source`` triples from ``bm25`` (queries are
   batched through ``search_many`` when the retriever has it);
2. if a SPARQL query is given and ``sparql_fn`` is set, the rows ``sparql_fn(query)`` returns (``Evidence`` with
   ``source="sparql"``); a query the SPARQL layer rejects (an :class:`~hqa.errors.HQAError`) is recorded in
   ``last_stats["sparql_error"]`` and the hop goes on with the other sources;
3. duplicates — same ``(source, text)`` — are merged, keeping the best-scored copy and every query that found it;
4. the pool is reranked against the *first* query (without a reranker, reciprocal-rank fusion of the per-source
   rankings orders it, since BM25 and cosine scores are not comparable), and the top ``k`` are returned.  A
   bi-encoder reranker on the dense retriever's embedder is handed the query and passage vectors the dense search
   already computed, so only triples and SPARQL rows get embedded again.

Every returned item keeps its retriever's provenance in ``meta`` (passage id/title, triple ids, sources) plus
``retriever`` (dense / bm25 / sparql), ``query`` (the query that found it first) and ``retrieval_score``.
Timings of the last call are in ``last_stats``: ``dense_ms``, ``bm25_ms``, ``sparql_ms``, ``rerank_ms``,
``total_ms``, and counts per source.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from hqa.errors import HQAError
from hqa.retrievers.base import Evidence

log = logging.getLogger("hqa")

RRF_K = 60


class MultiSourceRetriever:
    """Union of dense, BM25 and SPARQL evidence for one or more queries, reranked; see the module docstring."""

    def __init__(self, dense: Any = None, bm25: Any = None, sparql_fn: Callable[[str], list[Evidence]] | None = None,
                 reranker: Any = None, k_per_source: int = 5, top_k: int = 5):
        self.dense = dense
        self.bm25 = bm25
        self.sparql_fn = sparql_fn
        self.reranker = reranker
        self.k_per_source = k_per_source
        self.top_k = top_k
        self.last_stats: dict[str, Any] = {}

    @staticmethod
    def _search(retriever: Any, queries: list[str], k: int) -> list[list[Evidence]]:
        if hasattr(retriever, "search_many"):
            return retriever.search_many(queries, k=k)
        return [retriever(q, k=k) for q in queries]

    def _can_share_vectors(self) -> bool:
        """Dense retriever and bi-encoder reranker use the same embedder: reuse query and passage vectors."""
        d, r = self.dense, self.reranker
        return (r is not None and all(hasattr(d, a) for a in ("embed_queries", "search_vectors", "vectors"))
                and hasattr(r, "add_vectors") and getattr(r, "kind", None) == "bi-encoder"
                and getattr(r, "embedder_key", None) == getattr(d, "embedder_key", None))

    def _dense_sharing_vectors(self, queries: list[str]) -> list[list[Evidence]]:
        from hqa.retrievers.rerank import evidence_text

        qv = self.dense.embed_queries(queries)
        per_query = self.dense.search_vectors(qv, self.k_per_source)
        self.reranker.add_vectors(queries, qv)
        items = {ev.meta["id"]: ev for res in per_query for ev in res if "id" in ev.meta}
        if items:
            self.reranker.add_vectors([evidence_text(ev) for ev in items.values()], self.dense.vectors(list(items)))
        return per_query

    def __call__(self, queries: Sequence[str] | str, sparql: str | None = None, k: int | None = None) -> list[Evidence]:
        t_start = time.perf_counter()
        if isinstance(queries, str):
            queries = [queries]
        queries = list(dict.fromkeys(q.strip() for q in queries if isinstance(q, str) and q.strip()))
        top = self.top_k if k is None else int(k)
        stats: dict[str, Any] = {"dense_ms": 0.0, "bm25_ms": 0.0, "sparql_ms": 0.0, "rerank_ms": 0.0,
                                 "total_ms": 0.0, "queries": len(queries), "sparql_error": None,
                                 "n_retrieved": {"dense": 0, "bm25": 0, "sparql": 0}, "n_candidates": 0}
        self.last_stats = stats

        pool: dict[tuple[str, str], Evidence] = {}
        rankings: list[list[tuple[str, str]]] = []  # per (retriever, query) ranking, for fusion without reranker

        def add(results: list[Evidence], retriever: str, query: str | None, extra: dict | None = None) -> None:
            ranking = []
            for ev in results:
                key = (ev.source, ev.text)
                ranking.append(key)
                seen = pool.get(key)
                if seen is None:
                    meta = dict(ev.meta)
                    meta.setdefault("retriever", retriever)
                    for key_, value in (extra or {}).items():
                        meta.setdefault(key_, value)
                    if query is not None:
                        meta.setdefault("query", query)
                        meta["queries"] = [query]
                    pool[key] = dataclasses.replace(ev, meta=meta)
                else:
                    if query is not None and query not in seen.meta.setdefault("queries", []):
                        seen.meta["queries"].append(query)
                    if ev.score > seen.score and ev.source == seen.source:
                        seen.score = ev.score
            rankings.append(ranking)

        for name, retriever in (("dense", self.dense), ("bm25", self.bm25)):
            if retriever is None or not queries:
                continue
            t0 = time.perf_counter()
            if name == "dense" and self._can_share_vectors():
                per_query = self._dense_sharing_vectors(queries)
            else:
                per_query = self._search(retriever, queries, self.k_per_source)
            stats[f"{name}_ms"] = _ms(t0)
            for q, res in zip(queries, per_query):
                stats["n_retrieved"][name] += len(res)
                add(res, name, q)

        if sparql and sparql.strip() and self.sparql_fn is not None:
            t0 = time.perf_counter()
            try:
                rows = list(self.sparql_fn(sparql) or [])
            except HQAError as e:
                rows = []
                stats["sparql_error"] = str(e)
                log.info("SPARQL step failed: %s", e)
            stats["sparql_ms"] = _ms(t0)
            stats["n_retrieved"]["sparql"] = len(rows)
            add(rows, "sparql", None, {"sparql": sparql})

        candidates = list(pool.values())
        stats["n_candidates"] = len(candidates)
        if not candidates or top <= 0:
            stats["total_ms"] = _ms(t_start)
            return []
        t0 = time.perf_counter()
        if self.reranker is not None and queries:
            out = self.reranker.rerank(queries[0], candidates, k=top)
        else:
            out = _fuse(candidates, rankings)[:top]
        stats["rerank_ms"] = _ms(t0)
        stats["total_ms"] = _ms(t_start)
        return out


def _fuse(candidates: list[Evidence], rankings: list[list[tuple[str, str]]]) -> list[Evidence]:
    """Reciprocal-rank fusion: score = Σ 1/(60 + rank) over the rankings an item appears in."""
    fused: dict[tuple[str, str], float] = {}
    for ranking in rankings:
        for r, key in enumerate(ranking, 1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + r)
    scored = []
    for i, ev in enumerate(candidates):
        s = fused.get((ev.source, ev.text), 0.0)
        meta = dict(ev.meta)
        meta.setdefault("retrieval_score", ev.score)
        meta["reranker"] = "rrf"
        scored.append((-s, i, dataclasses.replace(ev, score=s, meta=meta)))
    scored.sort(key=lambda x: (x[0], x[1]))
    return [ev for _, _, ev in scored]


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


__all__ = ["MultiSourceRetriever"]
