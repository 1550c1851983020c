"""BM25 over linearized triples fetched on demand: the triple retriever of worlds that are not a local pack.

For a query, the entities it mentions are spotted by the configured linker, their one-hop neighbourhoods
(``wd:Q ?p ?o`` over direct properties) are read from the SPARQL backend with labels, and the linearized triples are
ranked with the same BM25 as the pack's (:class:`~hqa.retrievers.bm25.TripleBM25`, no index on disk).  A SPARQL
failure, or the linker's (an outage or a replay-cache miss, see
:class:`~hqa.retrievers.linking.entities.GuardedLinker`), is kept in ``error`` of the returned
:class:`~hqa.retrievers.base.Hits`, never dropped silently nor raised.
"""

from __future__ import annotations

from typing import Any

from hqa.data import wikidata as W
from hqa.retrievers.bm25 import TripleBM25
from hqa.retrievers.hop import result_ids
from hqa.retrievers.sparql.guard import ONE_HOP
from hqa.retrievers.base import Hits


class NeighbourhoodBM25:
    entities = 2  # spotted entities whose neighbourhood is read
    hop_limit = 200  # rows of each neighbourhood

    def __init__(self, linker: Any, sparql: Any) -> None:
        self.linker, self.sparql = linker, sparql

    def triples(self, query: str) -> tuple[list[dict], str | None]:
        out: list[dict] = []
        spotted = self.linker.spot(query, k=self.entities)
        errors = [spotted.error] if getattr(spotted, "error", None) else []  # the linker's outage (GuardedLinker)
        for cand in spotted:
            res = self.sparql.run(ONE_HOP.format(qid=cand.id, limit=self.hop_limit))
            if res.error:
                errors.append(res.error)
                continue
            labels = self.sparql.labels(sorted({cand.id, *result_ids(res)}))
            for row in res.rows:
                p, o = row.get("p", ""), row.get("o", "")
                pid, oid = W.local_id(p), W.local_id(o)
                out.append({"s": f"<{W.WD}{cand.id}>", "p": f"<{p}>", "o": f"<{o}>" if oid else o,
                            "s_label": labels.get(cand.id) or cand.label, "p_label": labels.get(pid or "", pid or p),
                            "o_label": labels.get(oid, oid) if oid else o, "sources": [f"sparql:{cand.id}"]})
        return out, ("; ".join(errors)[:500] or None)

    def __call__(self, query: str, k: int = 10) -> Hits:
        triples, error = self.triples(query)
        return Hits(TripleBM25(triples)(query, k) if triples else [], error)
