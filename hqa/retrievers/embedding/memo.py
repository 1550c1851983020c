"""Vectors of texts the query side embeds, remembered (a bounded LRU per embedder).

A retrieval hop embeds the same strings more than once: the question for the linker's description similarity and
again as the reranker's query; the "label: description" texts of entities a later question mentions again; the
triples of a neighbourhood a later hop reads again.  A :class:`VectorMemo` is what the linker's similarity and the
bi-encoder reranker of one toolbox share (``Toolbox.vector_memo``): ``vectors(texts)`` embeds only the texts it does
not hold, in one :func:`hqa.retrievers.embedding.encoders.embed` call, and ``add(texts, vectors)`` takes vectors
computed elsewhere by the same embedder (a passage index's stored vectors, the dense search's query vectors).  A memo
given ``stored`` (:class:`hqa.retrievers.embedding.stored.StoredVectors`: the world's triples and entity descriptions,
embedded at set-up) takes a text it does not hold from there before embedding it.  The vectors are what ``embed``
returns (the stored ones up to float rounding), so results do not change — only the work does.

Building indexes (millions of passages, each embedded once) goes to ``embed`` directly, not through here.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from hqa.retrievers.embedding import encoders

MEMO_SIZE = 16_384  # texts per embedder (~25 MB of 384-dim float32 vectors)
QUERY_MEMO_SIZE = 4_096  # questions per embedder in the process-wide memo of query_vector (~6 MB)


def embedder_key(name: str | None) -> str:
    """``"minilm"`` for the packaged default (``None``, ``""``, ``"minilm"``), else the name itself."""
    return "minilm" if name in (None, "", "minilm") else str(name)


class VectorMemo:
    """text → L2-normalised vector of one embedder, least recently used dropped first; thread-safe."""

    def __init__(self, embedder: str | None, size: int = MEMO_SIZE, stored=None):
        self.embedder = None if embedder_key(embedder) == "minilm" else embedder
        self.size = int(size)
        # a read-only StoredVectors of the same embedder (its own, never evicted), or None
        self.stored = stored if stored is not None and stored.embedder == embedder_key(embedder) else None
        self._vecs: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._vecs)

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Remember ``vectors`` (rows, same order as ``texts``) computed by this embedder elsewhere."""
        with self._lock:
            for t, v in zip(texts, np.asarray(vectors, dtype=np.float32)):
                self._vecs[t] = v
                self._vecs.move_to_end(t)
            while len(self._vecs) > self.size:
                self._vecs.popitem(last=False)

    def vectors(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """``float32 (len(texts), dim)``: remembered rows, the others embedded in one call (each distinct text once)
        and remembered."""
        texts = [str(t) for t in texts]
        with self._lock:
            have = {t: self._vecs[t] for t in texts if t in self._vecs}
            for t in texts:
                if t in have:
                    self._vecs.move_to_end(t)
        missing = list(dict.fromkeys(t for t in texts if t not in have))
        if missing and self.stored is not None:
            have.update(self.stored.lookup(missing))
            missing = [t for t in missing if t not in have]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = encoders.embed(missing, self.embedder, batch_size=batch_size)  # looked up per call: tests spy on it
            self.add(missing, fresh)
            have.update(zip(missing, fresh))
        if not texts:
            return encoders.embed([], self.embedder)
        return np.stack([have[t] for t in texts]).astype(np.float32, copy=False)


@functools.lru_cache(maxsize=None)
def _queries(key: str) -> VectorMemo:
    return VectorMemo(key, size=QUERY_MEMO_SIZE)  # VectorMemo reads "minilm" as the packaged default


def query_vector(text: str, embedder: str | None = None) -> np.ndarray:
    """The L2-normalised vector of one query text, remembered process-wide per embedder: a HumanIQ question is
    embedded once, although the demo selection (:mod:`hqa.artifacts.dpp_program`) and GenerateSparql's nearest SQUALL
    few-shots (:mod:`hqa.squall.fewshots`) both ask for it (issue 38: an embedding is the largest single cost between
    two LM calls of a question, docs/benchmarks.md)."""
    return _queries(embedder_key(embedder)).vectors([text])[0]


__all__ = ["MEMO_SIZE", "QUERY_MEMO_SIZE", "VectorMemo", "embedder_key", "query_vector"]
