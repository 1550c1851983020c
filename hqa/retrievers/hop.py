"""One retrieval hop over every source — the path DETLLM and the ``simple`` program run, and the benchmarks measure.

``HopRetriever(toolbox).run(question, HopRequest(...), k=5, k_per_source=5, exclude=...)``:

1. **linking** — each given mention is linked (``linker.link``, disambiguated by the question); with ``spot > 0`` the
   question's own mentions are spotted too (``linker.spot``);
2. **text** — ``k_per_source`` passages per search query (``toolbox.dense``; a bi-encoder reranker on the dense
   retriever's embedder is handed the query and passage vectors the search computed, so they are not embedded twice);
   when the toolbox has a ``text_bm25`` (a world's BM25 over its passages), ``k_per_source`` BM25 passages per search
   query too — a passage both find is kept once (same passage id), and the stored vectors of the BM25-only ones go to
   the reranker as well;
3. **triples** — ``k_per_source`` BM25 hits over linearized triples per triple query (``toolbox.bm25``);
4. **SPARQL** — each LM-written query, with an entity reference that cannot resolve grounded to its mention's linked
   id (:func:`ground_sparql`), run read-only through ``toolbox.sparql`` (an error is an observation, never a crash),
   rows labelled; and with ``neighbourhood_limit > 0`` the one-hop neighbourhood of every linked entity;
5. the union is **deduplicated** (same passage id / same triple / same normalised text, also against ``exclude``:
   evidence kept at earlier hops), **reranked** against ``rerank_query`` and the top ``k`` kept.

The result is a typed :class:`HopResult`: what was kept, what each source returned, the links, the SPARQL results,
the tool calls in order, per-stage timings and the sources that could not answer (``source_errors``: the linker's
outage or replay-cache miss too, as an observation: the hop goes on with the entities it has).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from hqa.data import wikidata as W
from hqa.retrievers.base import Evidence, SparqlResult, VectorPassageSearch, VectorReranker
from hqa.retrievers.rerank import evidence_text
from hqa.retrievers.sparql.guard import ONE_HOP
from hqa.retrievers.sparql.results import rows_as_evidence


def evidence_key(e: Evidence) -> tuple:
    """What makes two evidence items the same: passage id, triple (s, p, o), else the normalised text."""
    meta = e.meta or {}
    if e.source == "text" and meta.get("id") is not None:
        return ("text", str(meta["id"]))
    if e.source == "triples" and meta.get("s") and meta.get("p") and meta.get("o"):
        return ("triples", meta["s"], meta["p"], meta["o"])
    return (e.source, " ".join(e.text.split()).lower())


_WD_REF_RE = re.compile(r"\bwd:([^\s{}()\[\].,;]+)")
_QID_ONLY_RE = re.compile(r"^Q\d+$")


def ground_sparql(query: str, qid: str | None, known: set[str] | dict | None = None) -> tuple[str, str | None]:
    """Replace the one entity reference the store cannot resolve with the linked ``qid``.

    A reference is unresolvable when it is not a QID at all (``wd:Gabon``, ``wd:ENTITY``) or, when ``known`` (the
    ids a local store holds) is given, a QID outside it.  Only a query with exactly one distinct such reference is
    rewritten — with several, which one the link belongs to is a guess.  Returns ``(query, replaced_ref_or_None)``.
    """
    if not qid or not query:
        return query, None
    bad = list(dict.fromkeys(ref for ref in _WD_REF_RE.findall(query)
                             if not _QID_ONLY_RE.match(ref) or (known is not None and ref not in known)))
    if len(bad) != 1 or bad[0] == qid:
        return query, None
    ref = bad[0]
    return re.sub(r"\bwd:" + re.escape(ref) + r"(?![\w-])", "wd:" + qid, query), ref


def one_hop_evidence(result: SparqlResult, subject: str, labels: dict[str, str]) -> list[Evidence]:
    """Rows of a one-hop query → ``subject relation object`` evidence with labels resolved."""
    out = []
    for row in result.rows:
        pid = W.local_id(row.get("p", "")) or row.get("p", "")
        obj = row.get("o", "")
        o_text, s_label = W.render_value(obj, labels), labels.get(subject, subject)
        out.append(Evidence(text=f"{s_label} {labels.get(pid, pid)} {o_text}", source="sparql", score=1.0,
                            meta={"query": result.query, "s": subject, "p": pid, "o": W.local_id(obj) or obj,
                                  "s_label": s_label, "o_label": o_text}))
    return out


def result_ids(res: SparqlResult) -> list[str]:
    """The Wikidata ids bound anywhere in the rows, sorted."""
    return sorted({lid for row in res.rows for v in row.values() if (lid := W.local_id(v))})


@dataclass
class HopRequest:
    """What one hop retrieves (no LM here: the program decided these)."""

    searches: list[str]
    triple_queries: list[str] = field(default_factory=list)
    mentions: list[str] = field(default_factory=list)
    spot: int = 0
    sparql: list[tuple[str, str | None]] = field(default_factory=list)  # (query, the mention it is about)
    neighbourhood_limit: int = 0
    rerank_query: str = ""


@dataclass
class HopResult:
    kept: list[Evidence] = field(default_factory=list)
    passages: list[Evidence] = field(default_factory=list)
    triples: list[Evidence] = field(default_factory=list)
    kg_items: list[Evidence] = field(default_factory=list)
    linked: list[dict] = field(default_factory=list)  # every candidate of every mention, as dicts
    entities: list[Any] = field(default_factory=list)  # the linked / spotted entities used (Candidates)
    sparql_results: list[SparqlResult] = field(default_factory=list)
    grounded: list[dict[str, str]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    source_errors: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    n_pool: int = 0

    @property
    def n_by_source(self) -> dict[str, int]:
        return {"text": len(self.passages), "triples": len(self.triples), "sparql": len(self.kg_items)}

    @property
    def retrieval_ms(self) -> float:
        return self.timings.get("total_ms", 0.0)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 2)


class HopRetriever:
    """See the module docstring.  Stateless apart from the toolbox (its parts as :mod:`hqa.retrievers.base` types
    them; ``bm25`` has the :class:`~hqa.retrievers.base.PassageSearch` call shape); safe to share between threads."""

    link_k = 3  # candidates per linked mention

    def __init__(self, toolbox: Any):
        self.tb = toolbox

    # -- text, sharing vectors with a bi-encoder reranker on the same embedder --------------------------------
    def _can_share_vectors(self) -> bool:
        """A dense index that shows its vectors and a bi-encoder reranker on the same embedder."""
        d, r = self.tb.dense, self.tb.reranker
        return (isinstance(d, VectorPassageSearch) and isinstance(r, VectorReranker) and r.kind == "bi-encoder"
                and r.embedder_key == d.embedder_key)

    def _text(self, searches: list[str], k: int) -> list[list[Evidence]]:
        dense = self.tb.dense
        if not self._can_share_vectors():
            return [dense(q, k) for q in searches]
        qv = dense.embed_queries(searches)
        per_query = dense.search_vectors(qv, k)
        self.tb.reranker.add_vectors(searches, qv)
        self._share_passage_vectors([ev for res in per_query for ev in res], dense_hits=True)
        return per_query

    def _share_passage_vectors(self, hits: list[Evidence], dense_hits: bool = False) -> None:
        """Hand the reranker the dense index's stored vectors of these passages (found by the dense search itself,
        or by another retriever: then ids the dense index does not know are left to the reranker)."""
        if not hits or not (dense_hits or self._can_share_vectors()):
            return
        items = {ev.meta["id"]: ev for ev in hits if "id" in (ev.meta or {})}
        if not items:
            return
        try:
            vecs = self.tb.dense.vectors(list(items))
        except (KeyError, IndexError):
            if dense_hits:
                raise
            return
        self.tb.reranker.add_vectors([evidence_text(ev) for ev in items.values()], vecs)

    def _run_sparql(self, query: str) -> SparqlResult:
        try:
            return self.tb.sparql.run(query)
        except Exception as exc:  # untrusted LM SPARQL: a failure is an observation, never a crash
            return SparqlResult(query=query, error=f"{type(exc).__name__}: {exc}")

    def _labels(self, ids: list[str]) -> dict[str, str]:
        try:
            return self.tb.sparql.labels(ids) if ids else {}
        except Exception:  # labels are a nicety; rows stay usable as ids
            return {}

    @staticmethod
    def _add(out: HopResult, into: list[Evidence], source: str, tool: str, query: str, hits: list[Evidence]) -> None:
        """One retriever call's hits into the result, its outage (``hits.error``) into ``source_errors``."""
        into.extend(hits)
        err = getattr(hits, "error", None)
        if err:
            out.source_errors[source] = err
        out.tool_calls.append({"tool": tool, "input": query, "output": err or len(hits)})

    @staticmethod
    def _add_links(out: HopResult, tool: str, query: str, cands: list) -> None:
        """A link / spot call into the tool calls; the linker's outage (``cands.error``, see
        :class:`~hqa.retrievers.linking.entities.GuardedLinker`) into ``source_errors["linker"]`` and the call's output."""
        err = getattr(cands, "error", None)
        if err:
            out.source_errors.setdefault("linker", err)
        out.tool_calls.append({"tool": tool, "input": query, "output": err or [c.id for c in cands]})

    # -- the hop ----------------------------------------------------------------------------------------------
    def run(self, question: str, req: HopRequest, *, k: int = 5, k_per_source: int = 5,
            exclude: set | None = None) -> HopResult:
        """The stages of the module docstring in order, one method each, each timed into ``timings`` (``link_ms``,
        ``dense_ms``, ``text_bm25_ms`` only when the toolbox has a ``text_bm25``, ``bm25_ms``, ``sparql_ms``,
        ``rerank_ms``) and the whole hop as ``total_ms``."""
        t_start = time.perf_counter()
        out = HopResult()
        top_qid = self._timed(out, "link_ms", self._link, question, req, out)
        self._timed(out, "dense_ms", self._dense, req, k_per_source, out)
        if getattr(self.tb, "text_bm25", None) is not None:
            self._timed(out, "text_bm25_ms", self._text_bm25, req, k_per_source, out)
        self._timed(out, "bm25_ms", self._triples, req, k_per_source, out)
        self._timed(out, "sparql_ms", self._sparql, req, top_qid, out)
        self._timed(out, "rerank_ms", self._rerank, question, req, k,
                    exclude if exclude is not None else set(), out)
        out.timings["total_ms"] = _ms(t_start)
        return out

    @staticmethod
    def _timed(out: HopResult, key: str, stage, *args):
        t0 = time.perf_counter()
        result = stage(*args)
        out.timings[key] = _ms(t0)
        return result

    def _link(self, question: str, req: HopRequest, out: HopResult) -> dict[str, str]:
        """Stage 1: link each mention (the top candidate becomes an entity) and spot the question's own; returns
        mention -> its top linked id (what :func:`ground_sparql` grounds a mention's query to)."""
        linker = self.tb.linker
        top_qid: dict[str, str] = {}
        for mention in req.mentions:
            cands = linker.link(mention, question, k=self.link_k)
            if cands:
                top_qid[mention] = cands[0].id
                out.entities.append(cands[0])
            out.linked.extend(c.to_dict() for c in cands)
            self._add_links(out, "link", mention, cands)
        if req.spot > 0:
            spotted = linker.spot(question, k=req.spot)
            out.entities.extend(c for c in spotted if c.id not in {e.id for e in out.entities})
            out.linked.extend(c.to_dict() for c in spotted if c.id not in {x["id"] for x in out.linked})
            self._add_links(out, "spot", question, spotted)
        return top_qid

    def _dense(self, req: HopRequest, k_per_source: int, out: HopResult) -> None:
        """Stage 2a: ``k_per_source`` dense passages per search query."""
        if req.searches and k_per_source > 0:
            for q, hits in zip(req.searches, self._text(req.searches, k_per_source)):
                self._add(out, out.passages, "text", "dense", q, hits)

    def _text_bm25(self, req: HopRequest, k_per_source: int, out: HopResult) -> None:
        """Stage 2b: ``k_per_source`` BM25 passages per search query; the stored vectors of those the dense search
        did not find go to the reranker."""
        if req.searches and k_per_source > 0:
            dense_ids = {e.meta.get("id") for e in out.passages}
            for q in req.searches:
                hits = self.tb.text_bm25(q, k_per_source)
                self._add(out, out.passages, "text", "text_bm25", q, hits)
                self._share_passage_vectors([e for e in hits if e.meta.get("id") not in dense_ids])

    def _triples(self, req: HopRequest, k_per_source: int, out: HopResult) -> None:
        """Stage 3: ``k_per_source`` BM25 hits over linearized triples per triple query."""
        for q in req.triple_queries if k_per_source > 0 else []:
            self._add(out, out.triples, "triples", "bm25", q, self.tb.bm25(q, k_per_source))

    def _known_entities(self):
        """The ids an entity reference may resolve to when the KG is the pack's own store (oxigraph with the pack's
        linker: the store holds exactly the pack's entities); None otherwise (no reference is replaced)."""
        tb = self.tb
        settings = getattr(tb, "settings", None)
        if (settings is not None and getattr(getattr(settings, "kg", None), "kind", None) == "oxigraph"
                and getattr(getattr(settings, "linker", None), "kind", "pack") == "pack"):
            return getattr(tb.linker, "entities", None)
        return None

    def _sparql(self, req: HopRequest, top_qid: dict[str, str], out: HopResult) -> None:
        """Stage 4: each LM-written query with an unresolvable entity reference grounded to its mention's linked id,
        run once (a repeated query is not run again), its rows labelled; then the linked entities' neighbourhoods."""
        known = self._known_entities()
        ran: set[str] = set()
        for query, mention in req.sparql:
            if not query:
                continue
            qid = top_qid.get((mention or "").strip())
            query, replaced = ground_sparql(query, qid, known)
            if replaced:
                out.grounded.append({"from": replaced, "to": qid})
            if query in ran:
                continue
            ran.add(query)
            res = self._run_sparql(query)
            out.kg_items.extend(rows_as_evidence(res, self._labels(result_ids(res)) if res.ok and res.rows else {}))
            out.sparql_results.append(res)
            out.tool_calls.append({"tool": "sparql", "input": query, "output": res.error if res.error else
                                   f"{len(res.rows) or (res.boolean is not None)} rows"})
        for cand in out.entities if req.neighbourhood_limit > 0 else []:  # at most neighbourhood_limit rows each
            res = self._run_sparql(ONE_HOP.format(qid=cand.id, limit=req.neighbourhood_limit))
            out.kg_items.extend(one_hop_evidence(res, cand.id, self._labels(sorted({cand.id, *result_ids(res)}))))
            out.sparql_results.append(res)
            out.tool_calls.append({"tool": "sparql", "input": res.query, "output": res.error if res.error else
                                   f"{len(res.rows)} rows"})

    def _rerank(self, question: str, req: HopRequest, k: int, exclude: set, out: HopResult) -> None:
        """Stage 5: the union deduplicated (also against ``exclude``), reranked, the top ``k`` kept."""
        first: dict[tuple, Evidence] = {}
        for e in out.passages + out.triples + out.kg_items:
            first.setdefault(evidence_key(e), e)
        pool = [e for key, e in first.items() if key not in exclude]
        out.n_pool = len(pool)
        rq = req.rerank_query or question
        out.kept = list(self.tb.reranker.rerank(rq, pool, k))[:k] if pool and k > 0 else []
        out.tool_calls.append({"tool": "rerank", "input": rq, "output": len(out.kept)})


__all__ = ["HopRetriever", "HopRequest", "HopResult", "evidence_key", "ground_sparql", "one_hop_evidence"]
