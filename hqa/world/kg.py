"""The KG part of a world build: Wikidata dumps → filtered truthy triples → an engine, plus the label store.

Resumable: every ``chunk_triples`` kept triples (at a source-line boundary) are written to a chunk file, loaded into
the engine, and then committed with their names and degrees to the staged label store in the same SQLite transaction
as the checkpoint; a rerun re-reads each source from its start (so the SHA-256 covers the whole file) and skips the
checkpointed lines.  Steps, errors and the disk-full message: docs/worlds.md, "Building and resuming".
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hqa.errors import DataError, HQAError, WorldError
from hqa.world.label_store import LabelStoreWriter
from hqa.world.dumps import (LINE_FILTERS, NTBlockFilter, Source, TripleFilter, TripleSink, check_format,
                                 detect_format, kept_line_source)


class Loader(Protocol):
    def load(self, chunk: Path) -> None: ...

    def finish(self) -> dict: ...

    def close(self) -> None: ...


class OxigraphLoader:
    """Chunks into an on-disk Oxigraph store with its bulk loader (``Store.bulk_load``)."""

    def __init__(self, store_dir: Path):
        import pyoxigraph as ox

        self.store = ox.Store(str(store_dir))

    def load(self, chunk: Path) -> None:
        import pyoxigraph as ox

        self.store.bulk_load(path=str(chunk), format=ox.RdfFormat.N_TRIPLES)
        chunk.unlink()

    def finish(self) -> dict:
        self.store.flush()
        self.store.optimize()
        self.close()
        return {"engine": "oxigraph", "path": "kg"}

    def close(self) -> None:
        """Drop the store (pyoxigraph closes it with the object): an exception's traceback must not keep it open,
        and locked, in this process."""
        self.store = None


class VirtuosoLoader:
    """Chunks into a running Virtuoso: each chunk is kept in the target's load directory and all are bulk-loaded at
    the end (Virtuoso's loader skips files it already loaded, so this resumes too)."""

    def __init__(self, target, token: str):
        self.target = target
        self.token = token
        Path(target.load_dir).mkdir(parents=True, exist_ok=True)

    def load(self, chunk: Path) -> None:
        os.replace(chunk, Path(self.target.load_dir) / f"hqa-{self.token}-{chunk.name}")

    def reset(self) -> None:
        """Start the graph over: drop its triples, its bulk-load records and this world's chunk files."""
        from hqa.world.virtuoso import clear_graph

        clear_graph(self.target)
        for old in Path(self.target.load_dir).glob(f"hqa-{self.token}-*.nt"):
            old.unlink()

    def finish(self) -> dict:
        from hqa.world.virtuoso import bulk_load

        counts = bulk_load(self.target, f"hqa-{self.token}-*.nt")
        return {"engine": "virtuoso", **self.target.describe(), **counts}

    def close(self) -> None:
        return None


class NoLoader:
    """A world whose KG lives elsewhere (``--kg-engine sparql``): the dumps feed only the label store."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def load(self, chunk: Path) -> None:
        chunk.unlink()

    def finish(self) -> dict:
        return {"engine": "sparql", "endpoint": self.endpoint}

    def close(self) -> None:
        return None


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "os error 28" in text or "database or disk is full" in text


def raise_if_disk_full(exc: BaseException, doing: str) -> None:
    """One clear HQAError when ``exc`` is a full disk (``doing`` says what was being written, and how it resumes)."""
    if is_disk_full(exc):
        raise HQAError(f"disk full while {doing}") from None


@dataclass
class KGSource:
    path: Path
    fmt: str | None = None


@dataclass
class KGResult:
    kg: dict
    labels: dict
    sources: list[dict] = field(default_factory=list)


def source_changed(state: dict, now: dict) -> bool:
    return any(state[k] != now[k] for k in ("path", "size", "mtime_ns"))


def changed_sources(build_dir: Path, sources: list[KGSource]) -> list[Path]:
    """Sources whose file differs (path, size, mtime) from what the checkpoint in ``build_dir`` recorded."""
    db_path = build_dir / "labels.sqlite"
    if not db_path.exists():
        return []
    try:
        with closing(sqlite3.connect(str(db_path))) as db:
            done = dict(db.execute("SELECT source, state FROM progress").fetchall())
    except sqlite3.Error:
        return []
    return [src.path for idx, src in enumerate(sources)
            if idx in done and src.path.exists() and source_changed(json.loads(done[idx]), _state_for(src.path))]


def _state_for(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "lines": 0, "records": 0,
            "triples": 0, "statements": 0, "chunks": 0, "done": False}


def build_kg(build_dir: Path, sources: list[KGSource], filt: TripleFilter, loader: Loader, *,
             chunk_triples: int = 1_000_000, progress: bool = False) -> KGResult:
    """Stream, filter and load every source (resuming from the checkpoint in ``build_dir/labels.sqlite``), then
    finish the label store and the engine.  Returns the manifest sections and source records."""
    build_dir.mkdir(parents=True, exist_ok=True)
    writer = LabelStoreWriter(build_dir / "labels.sqlite")
    try:
        done = writer.progress()
        records = []
        for idx, src in enumerate(sources):
            state = json.loads(done[idx]) if idx in done else None
            fresh = _state_for(src.path) if src.path.exists() else None
            if state is not None and fresh is not None and source_changed(state, fresh):
                raise WorldError(f"{src.path} changed since the interrupted build checkpointed it; rerun with "
                                 "--fresh to build from scratch")
            if state is not None and state["done"]:
                records.append(state["record"])
                continue
            records.append(_load_source(idx, src, state, filt, loader, writer, build_dir, chunk_triples, progress))
        try:
            t0 = time.monotonic()
            labels = writer.finish(filt.language)
            t1 = time.monotonic()
            kg = loader.finish()
            kg["finish_seconds"] = {"label_store": round(t1 - t0, 1), "engine": round(time.monotonic() - t1, 1)}
        except (OSError, sqlite3.OperationalError) as exc:
            raise_if_disk_full(exc, f"finishing the KG in {build_dir}: free space and rerun the same command to "
                                    "resume")
            raise
    finally:
        writer.close()
    kg.update({"triples": sum(r["triples_kept"] for r in records), "statements": sum(r["statements"] for r in records),
               "filter": filt.describe()})
    labels["path"] = "labels.sqlite"
    return KGResult(kg=kg, labels=labels, sources=records)


class _Chunks:
    """Chunk files into the engine on one loader thread (the loaders release the GIL) while the next chunk is being
    filtered; each chunk is committed — names, keys, degrees, checkpoint — only after its load finished, in order, and
    while the loader is already busy with the chunk after it."""

    def __init__(self, idx: int, src: KGSource, loader: Loader, writer: LabelStoreWriter, folder: Path, state: dict,
                 fmt: str, filt: TripleFilter):
        from concurrent.futures import ThreadPoolExecutor

        self.idx, self.src, self.loader, self.writer, self.folder = idx, src, loader, writer, folder
        self.state, self.fmt, self.filt = state, fmt, filt
        self.committed_lines = state["lines"]
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hqa-kg-load")
        self.pending: tuple | None = None

    def flush(self, sink: TripleSink, upto: int) -> None:
        """Hand ``sink``'s triples (source lines up to ``upto``) to the engine; the caller starts a new sink."""
        st = self.state
        after = st["lines"]  # the chunk holds what source lines after..upto kept
        chunk = None
        if sink.lines:
            chunk = self.folder / f"{self.idx:03d}-{st['chunks']:06d}.nt"
            tmp = chunk.with_suffix(".tmp")
            with open(tmp, "wb") as fh:
                fh.writelines(sink.lines)
            os.replace(tmp, chunk)
        st.update(lines=upto, triples=st["triples"] + len(sink.lines), statements=st["statements"] + sink.statements,
                  records=st["records"] + sink.records, chunks=st["chunks"] + (chunk is not None))
        future = self.pool.submit(self.loader.load, chunk) if chunk is not None else None  # queued behind the last
        previous, self.pending = self.pending, (future, sink, dict(st), after)
        self._commit(previous)

    def settle(self) -> None:
        """Wait for the loads in flight and commit their chunks."""
        previous, self.pending = self.pending, None
        self._commit(previous)

    def _commit(self, pending: tuple | None) -> None:
        """Wait for a chunk's load and commit it (a loader syntax error names the source line)."""
        if pending is None:
            return
        future, sink, st, after = pending
        if future is not None:
            try:
                future.result()
            except SyntaxError as exc:
                n = exc.lineno or 0
                where = (kept_line_source(self.src.path, self.fmt, self.filt, after, n) if 0 < n <= len(sink.lines)
                         else None) or st["lines"]
                raise DataError(f"{self.src.path}:{where}: malformed triple "
                                f"({str(exc.msg).split(': ', 1)[-1]})") from None
        self.writer.commit_chunk(sink.names, sink.degree_items(), (self.idx, json.dumps(st)))
        self.committed_lines = st["lines"]

    def close(self) -> None:
        """Let a load in flight end (uncommitted: a rerun loads that chunk again) and stop the thread."""
        self.pending = None
        self.pool.shutdown(wait=True)


def _load_source(idx: int, src: KGSource, state: dict | None, filt: TripleFilter, loader: Loader,
                 writer: LabelStoreWriter, build_dir: Path, chunk_triples: int, progress: bool) -> dict:
    with closing(Source(src.path)) as source:
        head = source.head()
        fmt = src.fmt or detect_format(src.path, head)
        check_format(src.path, fmt, head)
        state = dict(state or _state_for(src.path))
        skip = state["lines"]
        line_filter = LINE_FILTERS[fmt]
        sink = TripleSink()
        from tqdm import tqdm

        bar = tqdm(total=src.path.stat().st_size, unit="B", unit_scale=True, desc=f"KG {src.path.name}",
                   disable=not progress)
        seen_bytes = 0
        lineno = 0
        chunks_dir = build_dir / "chunks"
        chunks_dir.mkdir(exist_ok=True)
        chunks = _Chunks(idx, src, loader, writer, chunks_dir, state, fmt, filt)
        fast = NTBlockFilter(filt) if fmt == "nt" else None
        try:
            for first, block in source.blocks():
                lineno = source.line
                if lineno <= skip:
                    continue
                if first <= skip:  # the checkpoint falls inside this block: drop the lines it covers
                    cut = 0
                    for _ in range(skip - first + 1):
                        cut = block.index(b"\n", cut) + 1
                    block, first = block[cut:], skip + 1
                kept = fast(block) if fast is not None else None
                if kept is not None and len(sink.lines) + len(kept.lines) < chunk_triples:
                    sink.merge(kept)  # the chunk boundary is not in this block
                else:  # line by line: malformed lines are named, and a chunk ends exactly at chunk_triples
                    rows = block.split(b"\n")
                    if block.endswith(b"\n"):
                        rows.pop()
                    for at, line in enumerate(rows, first):
                        sink.records += line_filter(filt, sink, src.path, at, line)
                        if len(sink.lines) >= chunk_triples:
                            chunks.flush(sink, at)
                            sink = TripleSink()
                bar.update(source.raw.bytes - seen_bytes)
                seen_bytes = source.raw.bytes
            chunks.flush(sink, max(lineno, skip))
            chunks.settle()
        except (OSError, sqlite3.OperationalError) as exc:
            raise_if_disk_full(exc, f"loading {src.path} (line {lineno}) into {build_dir}: free space and rerun "
                                    f"the same command: the build resumes after line {chunks.committed_lines}")
            raise
        finally:
            chunks.close()
            bar.update(source.raw.bytes - seen_bytes)
            bar.close()
        record = {**source.record(f"wikidata-{fmt}", state["records"]), "part": "kg", "triples_kept": state["triples"],
                  "statements": state["statements"]}
        state.update(done=True, record=record)
        writer.commit_chunk((), {}, (idx, json.dumps(state)))
        return record


__all__ = ["build_kg", "changed_sources", "KGSource", "KGResult", "OxigraphLoader", "VirtuosoLoader", "NoLoader",
           "is_disk_full", "raise_if_disk_full"]
