"""Dense passage retrieval: sentence embeddings + faiss, persisted to disk and rebuilt only when the corpus changes.

Each passage is embedded as ``title + ": " + text`` with :func:`hqa.retrievers.embedding.encoders.embed` (L2-normalised,
so inner product = cosine).  Up to ``hnsw_threshold`` passages are searched exactly (``IndexFlatIP``); larger corpora
use an approximate ``IndexHNSWFlat`` with the inner-product metric.

With ``index_dir`` set, the index is stored as ``dense-<fp>.faiss`` + ``dense-<fp>.json`` (passage ids, embedder,
kind), where ``<fp>`` is a fingerprint of the passages, the embedder name and the index kind.  A later run with the
same corpus loads it without embedding anything; a changed corpus or embedder gets a new fingerprint and a rebuild.
Files are written to a temp file and ``os.replace``-d in, the ``.json`` last, so a crash never leaves an index that
looks valid but is not.

The small persistence helpers at the bottom are shared with :mod:`hqa.retrievers.bm25`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hqa.data.jsonl import iter_jsonl
from hqa.errors import DataError
from hqa.io.files import atomic_write, atomic_write_json, read_json, remove_stale
from hqa.retrievers.base import Evidence
from hqa.retrievers.embedding.encoders import DEFAULT_EMBEDDER, INT8_EMBEDDER, embed
from hqa.retrievers.embedding.memo import embedder_key

log = logging.getLogger("hqa")

INDEX_FORMAT = 1
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 64


def passage_text(p: dict) -> str:
    """What gets embedded for a passage: ``title: text`` (just the text when there is no title)."""
    title = str(p.get("title") or "").strip()
    text = str(p.get("text") or "")
    return f"{title}: {text}" if title else text


def passage_evidence(p: dict, score: float = 0.0, pid: str | None = None) -> Evidence:
    """A passage ``{id, title, text, sources}`` as text evidence (its id ``pid`` when given)."""
    return Evidence(text=str(p.get("text") or ""), source="text", score=float(score),
                    meta={"id": p.get("id") if pid is None else pid, "title": p.get("title") or "",
                          "sources": list(p.get("sources") or [])})


class QuerySearch:
    """``__call__`` / ``search_many`` / ``embed_queries`` of a dense retriever in terms of its ``search_vectors`` and
    ``embedder`` (shared with the world's passage retriever, :class:`hqa.retrievers.passage_store.WorldDense`)."""

    embedder: str | None = None
    memo = None  # a VectorMemo of this embedder (a toolbox's, shared with its linker and reranker), or None

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Query embeddings with this retriever's embedder, shape ``(len(queries), dim)`` (through ``memo`` when set:
        a question the linker already embedded is not embedded again)."""
        vecs = self.memo.vectors(list(queries)) if self.memo is not None else embed(list(queries), self.embedder)
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def __call__(self, query: str, k: int = 5) -> list[Evidence]:
        return self.search_many([query], k=k)[0]

    def search_many(self, queries: Sequence[str], k: int = 5) -> list[list[Evidence]]:
        """One result list per query; the queries are embedded in one batch."""
        queries = [str(q) for q in queries]
        results: list[list[Evidence]] = [[] for _ in queries]
        live = [i for i, q in enumerate(queries) if q.strip()]
        if len(self) and k > 0 and live:
            for qi, res in zip(live, self.search_vectors(self.embed_queries([queries[i] for i in live]), k)):
                results[qi] = res
        return results


class DenseRetriever(QuerySearch):
    """Embedding search over passages ``{id, title, text, sources}``; ``__call__(query, k)`` → ``list[Evidence]``."""

    def __init__(self, passages: list[dict], embedder: str | None = None, index_dir: Path | str | None = None,
                 hnsw_threshold: int = 200_000, passage_embedder: str | None = None):
        self.passages = [dict(p) for p in passages]
        for i, p in enumerate(self.passages):
            if not p.get("id"):
                p["id"] = f"u{i}"
        self.ids = [str(p["id"]) for p in self.passages]
        self.embedder = embedder
        self.embedder_key = embedder_key(embedder)
        # the passages may be embedded by another model of the same vector space than the queries (the packaged
        # MiniLM's int8 copy, :func:`passage_embedder_for`); the index then holds that model's vectors
        self.passage_embedder = embedder if passage_embedder in (None, "") else passage_embedder
        self.passage_key = embedder_key(self.passage_embedder)
        self.hnsw_threshold = int(hnsw_threshold)
        self.kind = "hnsw" if len(self.passages) > self.hnsw_threshold else "flat"
        self.index_dir = Path(index_dir) if index_dir is not None else None
        self.fingerprint = fingerprint(
            {"format": INDEX_FORMAT, "embedder": self.embedder_key, "kind": self.kind,
             "hnsw": [HNSW_M, HNSW_EF_CONSTRUCTION] if self.kind == "hnsw" else None,
             **({"passages": self.passage_key} if self.passage_key != self.embedder_key else {})},
            ((pid, str(p.get("title") or ""), str(p.get("text") or "")) for pid, p in zip(self.ids, self.passages)))
        self.loaded_from_disk = False
        self._lock = threading.Lock()
        self._row: dict[str, int] | None = None
        self.index = self._load_or_build()

    # -- construction ----------------------------------------------------------------------------------------
    @staticmethod
    def read_corpus(path: Path | str) -> list[dict]:
        """Read a user corpus: one JSON object ``{"title", "text"}`` per line (optional ``id``, ``sources``).

        Blank lines are skipped; records without an id get ``u<n>`` (n = their position in the corpus).  Anything
        malformed raises :class:`~hqa.errors.DataError` naming the file and line.
        """
        path = Path(path)
        out: list[dict] = []
        seen: set[str] = set()
        for lineno, rec in iter_jsonl(path, expected='a JSON object with "title" and "text"'):
            where = f"{path}:{lineno}"
            text, title = rec.get("text"), rec.get("title") if rec.get("title") is not None else ""
            if not isinstance(text, str) or not text.strip():
                raise DataError(f"{where}: \"text\" must be a non-empty string")
            if not isinstance(title, str):
                raise DataError(f"{where}: \"title\" must be a string")
            pid = rec.get("id")
            if pid is None or pid == "":
                pid = f"u{len(out)}"
            elif not isinstance(pid, (str, int)):
                raise DataError(f"{where}: \"id\" must be a string")
            pid = str(pid)
            if pid in seen:
                raise DataError(f"{where}: duplicate id {pid!r}")
            seen.add(pid)
            sources = rec.get("sources")
            sources = [where] if sources is None else [sources] if isinstance(sources, str) else sources
            if not isinstance(sources, list):
                raise DataError(f"{where}: \"sources\" must be a list of strings")
            out.append({"id": pid, "title": title, "text": text, "sources": [str(s) for s in sources]})
        return out

    def _load_or_build(self):
        import faiss

        stem = f"dense-{self.fingerprint[:24]}"
        paths = (self.index_dir / f"{stem}.faiss", self.index_dir / f"{stem}.json") if self.index_dir else None
        if paths is not None:
            index_path, meta_path = paths
            meta = read_json(meta_path)
            if (meta and meta.get("fingerprint") == self.fingerprint and meta.get("ids") == self.ids
                    and index_path.exists()):
                try:
                    index = faiss.read_index(str(index_path))
                except RuntimeError as e:  # truncated / corrupt file: rebuild
                    log.warning("dense index %s unreadable (%s); rebuilding", index_path, e)
                else:
                    if index.ntotal == len(self.ids):
                        self._configure(index)
                        self.loaded_from_disk = True
                        return index
        index = self._build()
        if paths is not None:
            index_path, meta_path = paths
            atomic_write(index_path, lambda tmp: faiss.write_index(index, tmp))
            atomic_write_json(meta_path, {"format": INDEX_FORMAT, "fingerprint": self.fingerprint,
                                          "embedder": self.embedder_key, "passage_embedder": self.passage_key,
                                          "kind": self.kind, "dim": index.d, "count": index.ntotal, "ids": self.ids})
            remove_stale(self.index_dir, "dense-", keep=index_path.stem)
        return index

    def _build(self):
        if not self.passages:
            return None
        log.info("embedding %d passages for the dense index (%s)", len(self.passages), self.passage_key)
        vecs = np.ascontiguousarray(embed([passage_text(p) for p in self.passages], self.passage_embedder,
                                          batch_size=64), dtype=np.float32)
        index = new_faiss_index(self.kind, vecs.shape[1])
        index.add(vecs)
        self._configure(index)
        return index

    def _configure(self, index) -> None:
        if self.kind == "hnsw" and hasattr(index, "hnsw"):
            index.hnsw.efSearch = HNSW_EF_SEARCH

    # -- search ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.passages)

    def search_vectors(self, qv: np.ndarray, k: int = 5) -> list[list[Evidence]]:
        """Search with precomputed (L2-normalised) query vectors; one result list per row."""
        if self.index is None or k <= 0 or not len(qv):
            return [[] for _ in range(len(qv))]
        k_eff = min(int(k), len(self.passages))
        qv = np.ascontiguousarray(qv, dtype=np.float32).reshape(len(qv), -1)
        if self.kind == "hnsw":
            with self._lock:  # efSearch is index state; widen it for large k
                self.index.hnsw.efSearch = max(HNSW_EF_SEARCH, 2 * k_eff)
                scores, idx = faiss_search(self.index, qv, k_eff)
        else:
            scores, idx = faiss_search(self.index, qv, k_eff)
        return [[passage_evidence(self.passages[j], s, self.ids[j]) for s, j in zip(scores[row], idx[row]) if j >= 0]
                for row in range(len(qv))]

    def vectors(self, ids: Sequence[str]) -> np.ndarray:
        """The stored embeddings of these passage ids (of ``passage_text``), shape ``(len(ids), dim)``."""
        if self.index is None or not len(ids):
            return np.zeros((0, self.index.d if self.index is not None else 0), dtype=np.float32)
        if self._row is None:
            self._row = {pid: i for i, pid in enumerate(self.ids)}
        return np.stack([self.index.reconstruct(self._row[str(i)]) for i in ids]).astype(np.float32, copy=False)


#: below this many queries a search runs on the calling thread alone (faiss's own loop, not BLAS, below 20 queries)
FEW_QUERIES = 20


def faiss_search(index: Any, qv: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``index.search(qv, k)``; for fewer than :data:`FEW_QUERIES` queries (a question's search) with faiss's OpenMP
    team off in this thread for the call.  A team per search of one query cost more than it saved: over the pack's
    10k leads, 1.44 → 0.53 ms of CPU per query from 8 threads at once, 9.6 → 0.43 ms on one thread of a loaded
    machine (docs/benchmarks.md, "Beyond one process").  OpenMP's thread count is a per-thread setting, so other
    threads' searches and index builds keep theirs."""
    import faiss

    if len(qv) >= FEW_QUERIES:
        return index.search(qv, k)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return index.search(qv, k)
    finally:
        faiss.omp_set_num_threads(before)


def new_faiss_index(kind: str, dim: int) -> Any:
    """An empty inner-product faiss index: exact (``flat``) or ``hnsw`` with :data:`HNSW_M` and
    :data:`HNSW_EF_CONSTRUCTION`."""
    import faiss

    if kind not in ("flat", "hnsw"):
        raise ValueError(f"unknown faiss index kind {kind!r}")
    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    return index


def passage_embedder_for(embedder: str | None, setting: str | None = "auto") -> str | None:
    """The model a dense index embeds its passages with (``models.passage_embedder``): ``auto`` → the packaged
    MiniLM's int8 copy when the queries use the packaged MiniLM (same vector space, about half the CPU time:
    docs/benchmarks.md, "First run"), else the query embedder itself; ``""`` → the query embedder; any other name as
    written."""
    setting = str(setting or "").strip()
    if setting == "auto":
        return INT8_EMBEDDER if embedder in (None, "", DEFAULT_EMBEDDER) else embedder
    return setting or embedder


# -- persistence helpers (also used by hqa.retrievers.bm25) ---------------------------------------------------
def fingerprint(header: Any, records: Iterable[Iterable[str]]) -> str:
    """SHA-256 over a JSON ``header`` and every record's fields (separated, so field boundaries count)."""
    h = hashlib.sha256(json.dumps(header, sort_keys=True, ensure_ascii=False).encode("utf-8"))
    for fields in records:
        h.update("\x1f".join(fields).encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    return h.hexdigest()


__all__ = ["DenseRetriever", "QuerySearch", "passage_embedder_for", "passage_evidence", "passage_text"]
