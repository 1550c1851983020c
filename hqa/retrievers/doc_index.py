"""A sparse or dense index over a fixed list of evidence documents: passages, linearized triples, or both in one
(DIVKNOWQA Table 3's "Text-KB" unified source), for the retrieval arms of DETLLM and SSCoT.

The toolbox builds and keeps these (:meth:`hqa.toolbox.Toolbox.doc_index`, one per corpus, kind and embedder); this
module says what an index is and which documents a corpus holds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hqa.errors import ConfigError
from hqa.retrievers.base import Evidence
from hqa.retrievers.bm25 import TripleBM25, linearize
from hqa.retrievers.dense import DenseRetriever, passage_evidence
from hqa.retrievers.rerank import evidence_text


class DocIndex:
    """A sparse (BM25) or dense retriever over a fixed list of evidence documents; ``__call__(query, k)`` returns the
    documents themselves, re-scored.  Reuses the project's BM25 (:class:`~hqa.retrievers.bm25.TripleBM25` over the
    documents' texts) and dense index (:class:`~hqa.retrievers.dense.DenseRetriever`), persisted under
    ``index_dir`` like theirs."""

    def __init__(self, docs: list[Evidence], kind: str, embedder: str | None = None, index_dir: Any = None):
        self.docs, self.kind = list(docs), kind
        texts = [evidence_text(d) for d in self.docs]
        if kind == "sparse":
            self.index = TripleBM25([{"s_label": t, "p_label": "", "o_label": ""} for t in texts], index_dir=index_dir)
        else:
            self.index = DenseRetriever([{"id": str(i), "title": "", "text": t} for i, t in enumerate(texts)],
                                        embedder=embedder, index_dir=index_dir)

    def __len__(self) -> int:
        return len(self.docs)

    def __call__(self, query: str, k: int = 5) -> list[Evidence]:
        if not self.docs or k <= 0:
            return []
        if self.kind == "sparse":
            idx, sc = self.index.top_k(query, k)
            pairs = zip(idx.tolist(), sc.tolist())
        else:
            pairs = ((int(h.meta["id"]), h.score) for h in self.index(query, k))
        return [dataclasses.replace(self.docs[j], score=float(score)) for j, score in pairs]


def passage_docs(passages: list[dict]) -> list[Evidence]:
    """The passages (``{id, title, text, sources}``) as text evidence; an error when there are none to index."""
    if not passages:
        raise ConfigError("detllm: this arm indexes the passages itself, but the toolbox has no passage list (a "
                          "world's own passage store is searched only by its dense and BM25 indexes)")
    return [passage_evidence(p, pid=str(p.get("id") or f"u{i}")) for i, p in enumerate(passages)]


def triple_docs(triples: list[dict] | None) -> list[Evidence]:
    """The local triple set linearized ``"sub relation obj"`` as triple evidence; an error when there is none (the
    KG is read around linked entities instead)."""
    if triples is None:
        raise ConfigError("detllm: kb_retriever='dense' and sources='unified' index the linearized triples, but this "
                          "toolbox has no local triple set (its triples are read around linked entities)")
    return [Evidence(text=linearize(t), source="triples",
                     meta={k: t.get(k) for k in ("s", "p", "o", "s_label", "p_label", "o_label")}
                     | {"sources": list(t.get("sources") or [])}) for t in triples]


__all__ = ["DocIndex", "passage_docs", "triple_docs"]
