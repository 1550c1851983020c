"""Vectors of a world's fixed texts, embedded once at set-up and read at question time.

A retrieval hop over the knowledge pack embeds texts the world fixes, not the question: the linearized triples the
bi-encoder reranker scores (:func:`hqa.retrievers.bm25.linearize`) and the ``label: description`` texts the entity
linker compares with the question (:meth:`hqa.retrievers.linking.entities.EntityLinker.similarity_texts`).  With the
packaged MiniLM on this project's 2-core machine they were about 16 ms of CPU a ``simple`` question (0.039 → 0.023 s
at 16 concurrent questions; issue 38, docs/benchmarks.md).  :meth:`StoredVectors.build` embeds them once
(``scripts/setup`` does it beside the dense passage index, ``Toolbox.store_world_vectors``) and
:meth:`StoredVectors.load` reads them; a toolbox's :class:`~hqa.retrievers.embedding.memo.VectorMemo` looks a text up
there before embedding it.

The store maps text → vector of one embedder, so it can never give a wrong vector, only none: a text the store does
not hold (a world changed since the build, a question) is embedded as before.  The vectors are those
:func:`~hqa.retrievers.embedding.encoders.embed` returns for the texts in batches, equal to a text embedded on its
own up to float rounding (padding within a batch).

Files (in ``<artifacts>/index/vectors``): ``vectors-<embedder>.npy`` (float32 rows) and ``vectors-<embedder>.json``
(format, embedder, count, the texts in row order), each written atomically, the ``.json`` last, so a crash never
leaves a store that looks valid but is not.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from hqa.io.files import atomic_write, atomic_write_json, read_json
from hqa.retrievers.embedding import encoders
from hqa.retrievers.embedding.memo import embedder_key

log = logging.getLogger("hqa")

STORE_FORMAT = 1


def store_paths(index_dir: Path | str, embedder: str | None) -> tuple[Path, Path]:
    """``(vectors.npy, meta.json)`` of ``embedder``'s store in ``index_dir``."""
    key = embedder_key(embedder)
    stem = f"vectors-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:16]}"
    return Path(index_dir) / f"{stem}.npy", Path(index_dir) / f"{stem}.json"


class StoredVectors:
    """text → L2-normalised vector of one embedder, read-only; ``lookup(texts)`` gives the rows it holds."""

    def __init__(self, embedder: str | None, texts: Sequence[str], vectors: np.ndarray):
        self.embedder = embedder_key(embedder)
        self.texts = list(texts)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.texts):
            raise ValueError(f"{len(self.texts)} texts but vectors of shape {self.vectors.shape}")
        self._row = {t: i for i, t in enumerate(self.texts)}

    def __len__(self) -> int:
        return len(self.texts)

    def lookup(self, texts: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vector of each of ``texts`` the store holds (the others left out)."""
        row = self._row
        return {t: self.vectors[row[t]] for t in texts if t in row}

    @classmethod
    def load(cls, index_dir: Path | str, embedder: str | None) -> "StoredVectors | None":
        """The store of ``embedder`` in ``index_dir``, or None when there is none or it is unreadable (then every
        text is embedded at question time, as without a store)."""
        vec_path, meta_path = store_paths(index_dir, embedder)
        meta = read_json(meta_path)
        if not isinstance(meta, dict) or meta.get("format") != STORE_FORMAT:
            return None
        if meta.get("embedder") != embedder_key(embedder) or not isinstance(meta.get("texts"), list):
            return None
        try:
            vectors = np.load(vec_path, allow_pickle=False)
            return cls(embedder, [str(t) for t in meta["texts"]], vectors)
        except (OSError, ValueError) as exc:
            log.warning("stored vectors %s unreadable (%s); texts are embedded at question time", vec_path, exc)
            return None

    @classmethod
    def build(cls, index_dir: Path | str, embedder: str | None, texts: Iterable[str],
              batch_size: int = 64) -> "StoredVectors":
        """The store of ``embedder`` for exactly ``texts`` (distinct, in first-seen order), written to ``index_dir``:
        texts an existing store holds keep their vectors, only the others are embedded.  An unchanged store is not
        rewritten."""
        texts = list(dict.fromkeys(str(t) for t in texts if str(t)))
        old = cls.load(index_dir, embedder)
        have = old.lookup(texts) if old is not None else {}
        if old is not None and len(have) == len(texts) == len(old):
            return old
        missing = [t for t in texts if t not in have]
        if missing:
            log.info("embedding %d world texts for the stored vectors (%s)", len(missing), embedder_key(embedder))
            have.update(zip(missing, encoders.embed(missing, embedder, batch_size=batch_size)))
        vectors = np.stack([have[t] for t in texts]) if texts else encoders.embed([], embedder)  # (0, dim) if none
        store = cls(embedder, texts, vectors)
        vec_path, meta_path = store_paths(index_dir, embedder)
        atomic_write(vec_path, lambda tmp: _save(tmp, store.vectors))
        atomic_write_json(meta_path, {"format": STORE_FORMAT, "embedder": store.embedder, "count": len(texts),
                                      "texts": texts})
        return store


def _save(path: str, vectors: np.ndarray) -> None:
    with open(path, "wb") as f:  # a file object: np.save would add ".npy" to the temp file's name
        np.save(f, vectors, allow_pickle=False)


__all__ = ["STORE_FORMAT", "StoredVectors", "store_paths"]
