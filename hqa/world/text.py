"""The text side of a world: passages streamed into an on-disk store, BM25 over them, and a dense index.

``build_text(world, sources, ...)`` builds ``<world>/text/`` (``passages.sqlite``, ``vectors.npy``, the dense index
and ``bm25/``; their layout is in docs/worlds.md, "Passages (the text side)").  Nothing holds all passages or all vectors in memory;
checkpoints live under ``<world>/.build/text/`` and a killed build rerun with the same arguments ends with the same
files as an uninterrupted one (batches restart on the same boundaries, so even the float bits match).  Everything is
staged in ``.build/text/text/`` and renamed to ``<world>/text`` at the end.

The read side (``open_text``, the passage store and its retrievers) is :mod:`hqa.retrievers.passage_store`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from hqa.errors import DataError, WorldError
from hqa.io.files import atomic_write_json, publish_dir, read_json, replace_dir
from hqa.retrievers.bm25 import BM25Search, normalize
from hqa.retrievers.embedding.encoders import embed
from hqa.retrievers.embedding.memo import embedder_key
from hqa.retrievers import vectors as V
from hqa.retrievers.passage_store import (BM25_DIR, FAISS_FILE, MILVUS_DIR, STORE, TEXT_FORMAT, VECTORS,
                                          PassageStore)
from hqa.world.passages import PassageSource, chunk_document

log = logging.getLogger("hqa")

ENGINES = ("auto", *V.ENGINES)
INGEST_COMMIT = 10_000  # documents per SQLite transaction (and ingest checkpoint)
EMBED_CHECKPOINT_ROWS = 4_096  # at most this many passages embedded between two fsync + checkpoint writes,
EMBED_CHECKPOINT_SECONDS = 30.0  # and at most this long
BM25_BLOCK = 20_000  # passages tokenised at a time
BM25_PARAMS = {"k1": 1.5, "b": 0.75, "method": "lucene"}


def choose_engine(engine: str | None, dense_uri: str = "") -> tuple[str, str]:
    """``(engine, dense_uri)`` for a ``--dense-engine`` value: ``faiss``; ``milvus`` (Milvus Lite inside the world, or
    the server at ``dense_uri``); a server URI ``http(s)://HOST:PORT`` (= ``milvus`` there); ``auto``: Milvus when a
    server URI is given, else faiss — in one process faiss HNSW answered ~400x faster than Milvus Lite at 100k vectors
    (benchmarks/results/vectors.md), so the vector engine is for serving from a Milvus deployment."""
    engine = engine or "auto"
    if V.is_remote(engine):
        engine, dense_uri = "milvus", engine
    if engine not in ENGINES:
        raise WorldError(f"--dense-engine must be one of {', '.join(ENGINES)} or a Milvus server URI "
                         f"http(s)://HOST:PORT, got {engine!r}")
    if dense_uri and not V.is_remote(dense_uri):
        raise WorldError(f"the Milvus server URI must be http(s)://HOST:PORT, got {dense_uri!r}")
    if engine == "faiss" and dense_uri:
        raise WorldError("a Milvus server URI needs --dense-engine milvus (or auto)")
    if engine == "auto":
        engine = "milvus" if dense_uri else "faiss"
    return engine, dense_uri


# -- the passage store ------------------------------------------------------------------------------------------------
_SCHEMA = """
CREATE TABLE IF NOT EXISTS passages (row INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT NOT NULL,
                                     text TEXT NOT NULL, sources TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ingest (source INTEGER PRIMARY KEY, documents INTEGER NOT NULL, done INTEGER NOT NULL,
                                   record TEXT);
"""


# -- the build ----------------------------------------------------------------------------------------------------
def _source_params(sources: list[tuple[Path, str | None]]) -> list[list]:
    out = []
    for path, fmt in sources:
        path = Path(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            raise DataError(f"{path}: file not found") from None
        out.append([str(path.resolve()), fmt, st.st_size, st.st_mtime_ns])
    return out


def _ingest(db: sqlite3.Connection, sources: list[tuple[Path, str | None]], chunk_words: int, progress: bool) -> list:
    """Stream every source into ``passages`` (resumable: skips what a checkpoint says was committed)."""
    from tqdm import tqdm

    state = {r[0]: r for r in db.execute("SELECT source, documents, done, record FROM ingest")}
    row = int(db.execute("SELECT COALESCE(MAX(row) + 1, 0) FROM passages").fetchone()[0])
    records = []
    bar = tqdm(desc="reading passages", unit=" passages", initial=row, disable=not progress)
    try:
        for si, (path, fmt) in enumerate(sources):
            if si in state and state[si][2]:
                records.append(json.loads(state[si][3]))
                continue
            skip = state[si][1] if si in state else 0
            with PassageSource(path, fmt) as src:
                for doc in src:
                    if src.documents <= skip:
                        continue
                    chunks = chunk_document(doc, chunk_words)
                    try:
                        db.executemany("INSERT INTO passages VALUES (?, ?, ?, ?, ?)",
                                       [(row + j, c["id"], c["title"], c["text"], json.dumps(c["sources"]))
                                        for j, c in enumerate(chunks)])
                    except sqlite3.IntegrityError:
                        dup = next(c["id"] for c in chunks if db.execute(
                            "SELECT 1 FROM passages WHERE id = ?", (c["id"],)).fetchone())
                        raise DataError(f"{src.path}:{doc.line}: duplicate passage id {dup!r}") from None
                    row += len(chunks)
                    bar.update(len(chunks))
                    if src.documents % INGEST_COMMIT == 0:
                        db.execute("INSERT OR REPLACE INTO ingest VALUES (?, ?, 0, NULL)", (si, src.documents))
                        db.commit()
                record = src.record()
            db.execute("INSERT OR REPLACE INTO ingest VALUES (?, ?, 1, ?)", (si, src.documents, json.dumps(record)))
            db.commit()
            records.append(record)
    except BaseException:
        db.rollback()  # keep only what the last checkpoint covers
        raise
    finally:
        bar.close()
    db.execute("CREATE INDEX IF NOT EXISTS passages_title ON passages(title COLLATE NOCASE)")
    db.commit()
    return records


def _build_bm25(store: PassageStore, out: Path, progress: bool) -> None:
    """bm25s over every passage, tokenised in blocks (token id lists share the vocabulary's int objects)."""
    import bm25s
    from tqdm import tqdm

    tok = BM25Search._new_tokenizer()
    ids: list[list[int]] = []
    for start in tqdm(range(0, len(store), BM25_BLOCK), desc="BM25 tokenising", unit=" blocks",
                      disable=not progress):
        texts = [normalize(t) for t in store.texts(start, BM25_BLOCK)]
        ids.extend(tok.tokenize(texts, update_vocab=True, return_as="ids", show_progress=False))
    retriever = bm25s.BM25(**BM25_PARAMS)
    retriever.index((ids, tok.get_vocab_dict()), show_progress=progress)
    del ids
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    retriever.save(str(tmp), show_progress=False)
    tok.save_vocab(str(tmp))
    atomic_write_json(tmp / "hqa.json", {"count": len(store), **BM25_PARAMS})
    publish_dir(tmp, out)


def _embed_all(store: PassageStore, out: Path, checkpoint: Path, embedder: str | None, batch_size: int,
               progress: bool) -> int:
    """Embed every passage into ``out`` (``vectors.npy``), resuming at the checkpointed row; returns the dim."""
    from tqdm import tqdm

    state = read_json(checkpoint) or {}
    done, dim = int(state.get("done", 0)), state.get("dim")
    n = len(store)
    vf = V.VectorFile(out, n, dim) if dim else None
    every = max(1, EMBED_CHECKPOINT_ROWS // batch_size)
    bar = tqdm(total=n, initial=done, desc="embedding passages", unit=" passages", disable=not progress)
    try:
        batches, last = 0, time.monotonic()
        for start in range(done, n, batch_size):
            vecs = embed(store.texts(start, batch_size), embedder, batch_size=batch_size)
            if vf is None:
                dim = int(vecs.shape[1])
                vf = V.VectorFile(out, n, dim)
            vf.write(start, vecs)
            bar.update(len(vecs))
            batches += 1
            if batches % every == 0 or start + batch_size >= n or time.monotonic() - last > EMBED_CHECKPOINT_SECONDS:
                batches, last = 0, time.monotonic()
                vf.sync()
                atomic_write_json(checkpoint, {"done": min(n, start + batch_size), "dim": dim})
    finally:
        bar.close()
        if vf is not None:
            vf.close()
    return int(dim)


def _collection_name(world_dir: Path, params: dict) -> str:
    import hashlib

    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    return re.sub(r"[^A-Za-z0-9_]", "_", f"hqa_{world_dir.name}_{digest}")[:200]


def _build_dense(stage: Path, state_dir: Path, engine: str, dense_uri: str, collection: str, n: int,
                 progress: bool) -> dict:
    from tqdm import tqdm

    vectors = stage / VECTORS
    if engine == "faiss":
        kind = V.faiss_kind(n)
        with tqdm(total=n, desc=f"faiss {kind} index", unit=" vectors", disable=not progress) as bar:
            return V.build_faiss(vectors, stage / FAISS_FILE, kind, progress=bar.update)
    uri = dense_uri or str(stage / MILVUS_DIR)
    checkpoint = state_dir / "milvus.json"
    start = int((read_json(checkpoint) or {}).get("inserted", 0))
    client = V.milvus_client(uri, os.environ.get("MILVUS_TOKEN", ""))
    try:
        with tqdm(total=n, initial=start, desc="Milvus insert", unit=" vectors", disable=not progress) as bar:
            def step(done: int) -> None:
                bar.update(done - bar.n)
                atomic_write_json(checkpoint, {"inserted": done})

            V.milvus_insert(client, collection, vectors, start, on_block=step)
        section = V.milvus_finish(client, collection)
    except Exception as exc:
        if isinstance(exc, (OSError, sqlite3.Error)):
            raise
        raise WorldError(f"Milvus at {uri}: {V._reason(exc)}") from None
    finally:
        client.close()
        V.release_local(uri)
    section["uri"] = dense_uri or MILVUS_DIR
    return section


def build_text(world_dir: Path | str, sources: list[tuple[Path, str | None]], *, embedder: str | None = "minilm",
               engine: str = "auto", chunk_words: int = 100, batch_size: int = 64, progress: bool = True,
               dense_uri: str = "") -> dict:
    """Build (or resume building) ``<world_dir>/text/``; returns the manifest's ``text`` section."""
    world_dir = Path(world_dir)
    if chunk_words < 1 or batch_size < 1:
        raise WorldError("chunk_words and batch_size must be at least 1")
    if not sources:
        raise WorldError("no passage files given")
    engine, dense_uri = choose_engine(engine, dense_uri)
    params = {"format": TEXT_FORMAT, "sources": _source_params(sources), "embedder": embedder_key(embedder),
              "engine": engine, "dense_uri": dense_uri, "chunk_words": chunk_words, "batch_size": batch_size}
    state_dir = world_dir / ".build" / "text"
    stage = state_dir / "text"
    final = world_dir / "text"
    if read_json(state_dir / "params.json") not in (None, params):
        log.warning("the passage files or options changed since the interrupted build; the text part starts over")
        shutil.rmtree(state_dir)
    section = read_json(state_dir / "section.json")
    if section is not None:  # finished before; only the rename into place may be left
        if stage.exists():
            replace_dir(stage, final)
        if final.exists():
            return section
        shutil.rmtree(state_dir)
    stage.mkdir(parents=True, exist_ok=True)
    atomic_write_json(state_dir / "params.json", params)
    seconds: dict[str, float] = {}

    t0 = time.perf_counter()
    with closing(sqlite3.connect(stage / STORE)) as db:
        db.executescript(_SCHEMA)
        db.execute("PRAGMA synchronous = NORMAL")
        records = _ingest(db, sources, chunk_words, progress)
    seconds["ingest"] = round(time.perf_counter() - t0, 2)
    store = PassageStore(stage / STORE)
    if not len(store):
        raise DataError(f"no passages in {', '.join(str(p) for p, _ in sources)}")

    t0 = time.perf_counter()
    if not (stage / BM25_DIR / "hqa.json").exists():
        _build_bm25(store, stage / BM25_DIR, progress)
    seconds["bm25"] = round(time.perf_counter() - t0, 2)

    t0 = time.perf_counter()
    dim = _embed_all(store, stage / VECTORS, state_dir / "embed.json", embedder, batch_size, progress)
    seconds["embed"] = round(time.perf_counter() - t0, 2)

    t0 = time.perf_counter()
    dense = read_json(state_dir / "dense.json")
    if dense is None:
        dense = _build_dense(stage, state_dir, engine, dense_uri, _collection_name(world_dir, params), len(store),
                             progress)
        atomic_write_json(state_dir / "dense.json", dense)
    seconds["dense"] = round(time.perf_counter() - t0, 2)

    documents = sum(int(r.get("records", 0)) for r in records)
    section = {"format": TEXT_FORMAT, "path": "text", "engine": engine, "passages": len(store),
               "documents": documents, "embedder": embedder_key(embedder), "dim": dim,
               "chunking": {"words": chunk_words, "ids": "<id> when one passage, else <id>_<n>"},
               "store": STORE, "vectors": VECTORS, "dense": dense,
               "bm25": {"path": BM25_DIR, **BM25_PARAMS}, "sources": records, "seconds": seconds}
    atomic_write_json(state_dir / "section.json", section)
    replace_dir(stage, final)
    return section


__all__ = ["ENGINES", "build_text", "choose_engine"]
