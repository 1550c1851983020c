"""The text side of worlds: passage readers (DPR TSV, KILT, JSONL; plain/gz/bz2), chunking, the resumable build
(SQLite store, BM25, vectors, faiss or Milvus), the retrievers over a built world, and the hop's BM25-over-passages
stage.  Tiny corpora from benchmarks/gen_passages.py; real MiniLM where meaning matters, a hashed bag-of-words
embedder where only the plumbing does."""

from __future__ import annotations

import bz2
import gzip
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from textkit import G, CountingHash, gen, use_embed

from hqa.errors import DataError, WorldError
from hqa.world import passages as P
from hqa.retrievers import passage_store as PS
from hqa.world import text as T


@pytest.mark.parametrize("suffix,opener", [(".gz", gzip.open), (".bz2", bz2.open)])
def test_truncated_compressed_file_names_file_and_line(tmp_path, suffix, opener):
    full = tmp_path / f"full.jsonl{suffix}"  # ~6 MB decompressed: past the reader buffers and bz2 blocks
    with opener(full, "wt", encoding="utf-8") as fh:
        words = np.random.default_rng(0).integers(0, 10**6, size=(30_000, 30))  # compresses like text, not better
        for i, row in enumerate(words):
            fh.write(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": " ".join(map(str, row))}) + "\n")
    cut = tmp_path / f"cut.jsonl{suffix}"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size * 3 // 4])
    with opener(full, "rt") as fh:
        total = sum(1 for _ in fh)
    with pytest.raises(DataError) as e:
        list(P.iter_documents(cut))
    msg = str(e.value)
    assert msg.startswith(f"{cut}:") and ("truncated" in msg or "corrupt" in msg)
    line = int(msg.split(":")[1])
    with opener(cut, "rt") as fh:  # how far the cut file really goes
        intact = 0
        try:
            for _ in fh:
                intact += 1
        except EOFError:
            pass
    assert 1 < line <= intact + 1 < total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def milvus_server(tmp_path):
    """A real Milvus Lite gRPC server on loopback (``milvus-lite server``), stopped at the end."""
    port = _free_port()
    exe = Path(sys.executable).parent / "milvus-lite"
    proc = subprocess.Popen([str(exe), "server", "--data-dir", str(tmp_path / "milvus-data"), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_faiss_and_milvus_engines_answer_alike(tmp_path, monkeypatch, milvus_server):
    src = [(gen(tmp_path, "dpr-tsv", 25), None)]
    use_embed(monkeypatch, CountingHash())
    fa = T.build_text(tmp_path / "fa", src, engine="faiss", progress=False)
    lite = T.build_text(tmp_path / "lite", src, engine="milvus", progress=False)
    srv = T.build_text(tmp_path / "srv", src, engine=milvus_server, progress=False)  # --dense-engine URI
    assert lite["dense"]["engine"] == "milvus" and lite["dense"]["uri"] == "milvus.db"
    assert (tmp_path / "lite" / "text" / "milvus.db").is_dir()  # Milvus Lite's files live in the world
    assert srv["engine"] == "milvus" and srv["dense"]["uri"] == milvus_server
    from hqa.retrievers import vectors as V

    monkeypatch.setattr(V, "HNSW_THRESHOLD", 10)  # the HNSW path a large world takes
    hnsw = T.build_text(tmp_path / "hnsw", src, engine="faiss", progress=False)
    assert hnsw["dense"]["kind"] == "hnsw" and hnsw["dense"]["params"] == {"M": 32, "efConstruction": 80}
    assert not (tmp_path / "srv" / "text" / "milvus.db").exists()
    worlds = [PS.open_text(tmp_path / "fa", fa), PS.open_text(tmp_path / "lite", lite),
              PS.open_text(tmp_path / "srv", srv), PS.open_text(tmp_path / "hnsw", hnsw)]
    for i in (0, 7, 19):
        q = f"When was {G.document(i, 25).title} founded?"
        ranked = [[(e.meta["id"], round(e.score, 4)) for e in w.dense(q, 5)] for w in worlds]
        assert ranked[0] == ranked[1] == ranked[2] == ranked[3] and len(ranked[0]) == 5
    assert worlds[3].dense.index.index.hnsw.efSearch == V.WORLD_EF_SEARCH
    assert worlds[2].dense.index.collection == srv["dense"]["collection"]
    for w in worlds[1:3]:
        w.dense.index.close()

    class Moved:  # the same world pointed at the server by configuration (world.dense_uri)
        class world:
            dense_uri = milvus_server

    elsewhere = {**srv, "dense": {**srv["dense"], "uri": "http://127.0.0.1:9"}}
    assert PS._dense_uri(elsewhere, None) == "http://127.0.0.1:9" and PS._dense_uri(elsewhere, Moved()) == milvus_server
    moved = PS.open_text(tmp_path / "srv", elsewhere, Moved())
    q = f"When was {G.document(3, 25).title} founded?"
    assert [e.meta["id"] for e in moved.dense(q, 5)] == [e.meta["id"] for e in worlds[0].dense(q, 5)]
    moved.dense.index.close()


def test_full_disk_while_embedding_is_one_line_and_the_world_build_resumes(tmp_path, monkeypatch):
    import errno

    from hqa.errors import HQAError
    from hqa.retrievers import vectors as V
    from hqa.world.build import BuildOptions, build_world
    from hqa.retrievers.world_manifest import open_world

    src = gen(tmp_path, "kilt", 12, ".gz")
    use_embed(monkeypatch, CountingHash())
    monkeypatch.setattr(T, "EMBED_CHECKPOINT_ROWS", 4)
    real_write = V.VectorFile.write
    calls = {"n": 0}

    def full_disk(self, row, vecs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, row, vecs)

    monkeypatch.setattr(V.VectorFile, "write", full_disk)
    opts = BuildOptions(passages=[(src, None)], batch_size=4)
    world = tmp_path / "w"
    with pytest.raises(HQAError) as e:
        build_world(world, "w", opts, progress=False)
    assert "disk full" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(WorldError, match="incomplete"):
        open_world(world)
    assert json.loads((world / ".build" / "text" / "embed.json").read_text())["done"] == 8
    manifest = build_world(world, "w", opts, progress=False)  # space freed: the same command resumes
    assert manifest["complete"] and manifest["text"]["passages"] == len(PS.open_text(world, manifest["text"]))
    assert [s["part"] for s in manifest["sources"]] == ["text"] and manifest["sources"][0]["records"] == 12
