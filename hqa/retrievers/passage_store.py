"""The read side of a world's text part (``<world>/text/``, built by :mod:`hqa.world.text`): the passage store and the
retrievers over it.

``open_text(world, section, settings)`` → :class:`TextWorld` with ``.dense`` (the duck type of
:class:`hqa.retrievers.dense.DenseRetriever`, including the vector sharing with a bi-encoder reranker), ``.bm25`` and
``.passage(id)``; passages are fetched from SQLite per query, never loaded whole (the agent's pages over them are
:class:`hqa.retrievers.wikipedia.WorldPages`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hqa.errors import WorldError
from hqa.retrievers import vectors as V
from hqa.retrievers.base import Evidence
from hqa.retrievers.bm25 import BM25Search
from hqa.retrievers.dense import QuerySearch, passage_evidence, passage_text
from hqa.retrievers.embedding.memo import embedder_key

TEXT_FORMAT = 1
STORE, VECTORS, FAISS_FILE, MILVUS_DIR, BM25_DIR = "passages.sqlite", "vectors.npy", "dense.faiss", "milvus.db", "bm25"


class PassageStore:
    """Read side of ``passages.sqlite`` (one read-only connection per thread)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.exists():
            raise WorldError(f"passage store {self.path} is missing: rebuild the world")
        self._local = threading.local()
        self.n = int(self._db().execute("SELECT COUNT(*) FROM passages").fetchone()[0])

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        return db

    def __len__(self) -> int:
        return self.n

    @staticmethod
    def _row_dict(r: tuple) -> dict:
        return {"row": r[0], "id": r[1], "title": r[2], "text": r[3], "sources": json.loads(r[4])}

    def by_rows(self, rows: Sequence[int]) -> dict[int, dict]:
        rows = sorted({int(r) for r in rows if r >= 0})
        if not rows:
            return {}
        q = f"SELECT row, id, title, text, sources FROM passages WHERE row IN ({','.join('?' * len(rows))})"
        return {r[0]: self._row_dict(r) for r in self._db().execute(q, rows)}

    def rows_of(self, ids: Sequence[str]) -> dict[str, int]:
        ids = [str(i) for i in ids]
        found: dict[str, int] = {}
        for lo in range(0, len(ids), 900):  # SQLite's bound-parameter limit
            part = ids[lo:lo + 900]
            q = f"SELECT id, row FROM passages WHERE id IN ({','.join('?' * len(part))})"
            found.update(self._db().execute(q, part).fetchall())
        return found

    def passage(self, pid: str) -> dict | None:
        r = self._db().execute("SELECT row, id, title, text, sources FROM passages WHERE id = ?", (str(pid),)).fetchone()
        return self._row_dict(r) if r else None

    def by_title(self, title: str) -> dict | None:
        r = self._db().execute("SELECT row, id, title, text, sources FROM passages WHERE title = ? COLLATE NOCASE "
                               "ORDER BY row LIMIT 1", (title.strip(),)).fetchone()
        return self._row_dict(r) if r else None

    def texts(self, start: int, count: int) -> list[str]:
        """``passage_text`` of rows ``start .. start+count-1``, in row order."""
        cur = self._db().execute("SELECT title, text FROM passages WHERE row >= ? AND row < ? ORDER BY row",
                                 (start, start + count))
        return [passage_text({"title": t, "text": x}) for t, x in cur]


# -- retrievers ---------------------------------------------------------------------------------------------------
class WorldDense(QuerySearch):
    """Dense retrieval over a world's passages; the duck type of :class:`hqa.retrievers.dense.DenseRetriever`."""

    def __init__(self, store: PassageStore, index: V.VectorIndex, vectors: Path, embedder: str | None, engine: str):
        self.store, self.index, self.engine = store, index, engine
        self.embedder = None if embedder in (None, "", "minilm") else embedder
        self.embedder_key = embedder_key(embedder)
        self._vectors_path = Path(vectors)
        self._vectors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.store)

    def search_vectors(self, qv: np.ndarray, k: int = 5) -> list[list[Evidence]]:
        if not len(self) or k <= 0 or not len(qv):
            return [[] for _ in range(len(qv))]
        qv = np.ascontiguousarray(qv, dtype=np.float32).reshape(len(qv), -1)
        scores, rows = self.index.search(qv, min(int(k), len(self)))
        found = self.store.by_rows(rows.ravel().tolist())
        return [[passage_evidence(found[r], s) for s, r in zip(scores[i].tolist(), rows[i].tolist()) if r in found]
                for i in range(len(qv))]

    def vectors(self, ids: Sequence[str]) -> np.ndarray:
        """The stored embeddings of these passage ids, shape ``(len(ids), dim)``."""
        if self._vectors is None:
            self._vectors = np.load(self._vectors_path, mmap_mode="r")
        if not len(ids):
            return np.zeros((0, self._vectors.shape[1]), dtype=np.float32)
        rows = self.store.rows_of(ids)
        missing = [i for i in ids if str(i) not in rows]
        if missing:
            raise KeyError(f"no passage with id {missing[0]!r}")
        return np.asarray(self._vectors[[rows[str(i)] for i in ids]], dtype=np.float32)


class PassageBM25(BM25Search):
    """BM25 over a world's passages; ``__call__(query, k)`` → ``list[Evidence]`` with ``source="text"``."""

    def __init__(self, folder: Path, store: PassageStore):
        self.store = store
        if not self._load_index(Path(folder)):
            raise WorldError(f"BM25 index {folder} is missing or unreadable: rebuild the world")

    def __len__(self) -> int:
        return self._n

    def __call__(self, query: str, k: int = 10) -> list[Evidence]:
        rows, scores = self.top_k(query, k)
        found = self.store.by_rows(rows.tolist())
        return [passage_evidence(found[r], s) for r, s in zip(rows.tolist(), scores.tolist()) if r in found]


class TextWorld:
    """A world's passages: ``.dense``, ``.bm25``, ``.passage(id)``."""

    def __init__(self, store: PassageStore, dense: WorldDense, bm25: PassageBM25, section: dict):
        self.store, self.dense, self.bm25, self.section = store, dense, bm25, section

    def __len__(self) -> int:
        return len(self.store)

    def passage(self, pid: str) -> dict | None:
        """``{id, title, text, sources, row}`` of a passage id, or None."""
        return self.store.passage(pid)


def _dense_uri(section: dict, settings: Any) -> str:
    """The Milvus URI to use: ``world.dense_uri`` from the settings when set (the same world served by a Milvus
    server), else the one the world was built with."""
    override = getattr(getattr(settings, "world", None), "dense_uri", "") or ""
    return str(override or (section.get("dense") or {}).get("uri") or "")


def open_text(world_dir: Path | str, section: dict, settings: Any = None) -> TextWorld:
    """The retrievers over a built world's text part (``section`` = the manifest's ``text``)."""
    world_dir = Path(world_dir)
    if not isinstance(section, dict) or section.get("format") != TEXT_FORMAT:
        raise WorldError(f"world {world_dir}: text section of an unknown format ({(section or {}).get('format')!r}); "
                         "rebuild the world")
    text_dir = world_dir / section.get("path", "text")
    store = PassageStore(text_dir / STORE)
    dense_sec = section.get("dense") or {}
    engine = dense_sec.get("engine")
    if engine == "faiss":
        index: V.VectorIndex = V.FaissIndex(text_dir / FAISS_FILE, dense_sec.get("kind", "flat"))
    elif engine == "milvus":
        uri = _dense_uri(section, settings)
        if not V.is_remote(uri):
            uri = str(text_dir / uri)
        token = os.environ.get(str(dense_sec.get("token_env") or "MILVUS_TOKEN"), "")
        index = V.MilvusIndex(uri, dense_sec["collection"], section.get("dim", 0), token)
    else:
        raise WorldError(f"world {world_dir}: unknown dense engine {engine!r}")
    if len(index) != len(store):
        raise WorldError(f"world {world_dir}: the dense index holds {len(index)} vectors for {len(store)} passages; "
                         "rebuild the world")
    dense = WorldDense(store, index, text_dir / VECTORS, section.get("embedder"), engine)
    return TextWorld(store, dense, PassageBM25(text_dir / BM25_DIR, store), section)


__all__ = ["TEXT_FORMAT", "PassageBM25", "PassageStore", "TextWorld", "WorldDense", "open_text"]
