"""The text side of worlds: passage readers (DPR TSV, KILT, JSONL; plain/gz/bz2), chunking, the resumable build
(SQLite store, BM25, vectors, faiss or Milvus), the retrievers over a built world, and the hop's BM25-over-passages
stage.  Tiny corpora from benchmarks/gen_passages.py; real MiniLM where meaning matters, a hashed bag-of-words
embedder where only the plumbing does."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from textkit import G, CountingHash, gen, use_embed

from hqa.errors import DataError, WorldError
from hqa.retrievers.base import Evidence
from hqa.world import passages as P
from hqa.retrievers import passage_store as PS
from hqa.world import text as T


# ------------------------------------------------------------------------------------------------------------
# readers
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", P.FORMATS)
@pytest.mark.parametrize("suffix", ["", ".gz", ".bz2"])
def test_readers_read_every_format_plain_and_compressed(tmp_path, fmt, suffix):
    path = gen(tmp_path, fmt, 6, suffix)
    magic = path.read_bytes()[:3]
    assert (magic[:2] == b"\x1f\x8b") == (suffix == ".gz") and (magic == b"BZh") == (suffix == ".bz2")
    with P.PassageSource(path) as src:  # format detected
        assert src.format == fmt
        docs = list(src)
        rec = src.record()
    assert [d.id for d in docs] == [G.passage_id(fmt, i) for i in range(6)]
    assert [d.title for d in docs] == [G.document(i, 6).title for i in range(6)]
    assert rec["records"] == 6 and rec["bytes"] == path.stat().st_size and len(rec["sha256"]) == 64
    assert rec["compression"] == {"": "none", ".gz": "gzip", ".bz2": "bzip2"}[suffix]
    lead = G.document(0, 6).paragraphs[0]
    assert docs[0].text.startswith(lead.split(".")[0])  # the opening sentence, unescaped
    if fmt == "kilt":  # title paragraph and Section:::: headings dropped, BULLET:::: stripped
        assert "Section::::" not in docs[0].text and "BULLET::::" not in docs[0].text
        assert not docs[0].text.startswith(docs[0].title + " " + docs[0].title)
        assert docs[0].paragraphs[-1] == G.document(0, 6).facts["founder"]
    assert [d.line for d in docs] == list(range(2, 8) if fmt == "dpr-tsv" else range(1, 7))


def test_dpr_tsv_quoting_as_the_csv_module_writes_it(tmp_path):
    path = tmp_path / "psgs_w100.tsv"
    path.write_text('id\ttext\ttitle\n1\t"Aaron ( or ; ""Ahärôn"") is a prophet"\tAaron\n'
                    '2\tplain text, no quotes\t"Title ""quoted"""\n', encoding="utf-8")
    docs = list(P.iter_documents(path))
    assert [(d.id, d.text, d.title) for d in docs] == [("1", 'Aaron ( or ; "Ahärôn") is a prophet', "Aaron"),
                                                      ("2", "plain text, no quotes", 'Title "quoted"')]
    gz = gen(tmp_path, "dpr-tsv", 40, ".gz")  # the generator quotes nicknames: they come back unescaped
    nick = [G.document(i, 40).nickname for i in range(40)]
    texts = [d.text for d in P.iter_documents(gz)]
    assert any(nick) and all(f'"{n}"' in t for n, t in zip(nick, texts) if n)


@pytest.mark.parametrize("name,content,fmt,where,what", [
    ("bad.tsv", "id\ttext\ttitle\n1\tok\tA\n2\tonly two fields\n", None, ":3:", "expected 3 tab-separated"),
    ("bad.jsonl", '{"id": "a", "title": "A", "text": "x"}\n{"id": "b", "title": \n', None, ":2:", "not valid JSON"),
    ("bad.jsonl", '{"id": "a", "title": "A", "text": "x"}\n[1, 2]\n', "jsonl", ":2:", "expected a JSON object"),
    ("kilt.json", '{"wikipedia_id": "1", "wikipedia_title": "A", "text": ["A", "x"]}\n'
                  '{"wikipedia_id": "2", "wikipedia_title": "B"}\n', None, ":2:", "not a KILT page"),
    ("noid.jsonl", '{"title": "A", "text": "x"}\n', None, ":1:", '"id" must be'),
    ("notes.txt", "just some text\n", None, ":1:", "not a passage file"),
    ("kilt.json", '{"wikipedia_id": "1", "wikipedia_title": "A", "text": ["A"]}\n', "dpr-tsv", ":1:",
     "looks like kilt"),
    ("psgs.tsv", "id\ttext\ttitle\n1\tx\tA\n", "jsonl", ":1:", "looks like dpr-tsv"),
    ("kilt.jsonl", '{"wikipedia_id": "1", "wikipedia_title": "A", "text": ["A", "b"]}\n', "jsonl", ":1:",
     "a KILT page"),
    ("latin1.jsonl", None, None, ":2:", "not UTF-8"),
])
def test_malformed_or_wrong_format_is_one_error_naming_file_and_line(tmp_path, name, content, fmt, where, what):
    path = tmp_path / name
    if content is None:
        path.write_bytes(b'{"id": "a", "title": "A", "text": "x"}\n{"id": "b", "title": "\xe9", "text": "y"}\n')
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as e:
        list(P.iter_passages(path, fmt))
    assert f"{path}{where}" in str(e.value) and what in str(e.value)


def test_chunking_is_dpr_style_with_stable_ids():
    doc = P.Document("d7", "T", " ".join(f"w{i}" for i in range(250)), 3, "src.jsonl")
    parts = P.chunk_document(doc, 100)
    assert [p["id"] for p in parts] == ["d7_0", "d7_1", "d7_2"]
    assert [len(p["text"].split()) for p in parts] == [100, 100, 50]
    assert parts[1]["text"].split()[0] == "w100" and all(p["sources"] == ["src.jsonl:3"] for p in parts)
    assert P.chunk_document(doc, 100) == parts  # stable
    short = P.Document("42", "T", "only a few words", 9, "psgs.tsv")
    assert [p["id"] for p in P.chunk_document(short, 100)] == ["42"]  # fits: keeps its (DPR) id
    assert P.chunk_document(P.Document("e", "T", "   ", 1, "x"), 100) == []
    assert [p["id"] for p in P.chunk_document(doc, 125)] == ["d7_0", "d7_1"]


# ------------------------------------------------------------------------------------------------------------
# build + retrievers
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("corpus")
    return {"dpr": gen(tmp, "dpr-tsv", 14, ".gz"), "kilt": gen(tmp, "kilt", 4, ".bz2", seed=1)}


@pytest.fixture(scope="module")
def minilm_world(tmp_path_factory, corpus):
    """A world text part built with the real MiniLM embedder and faiss (24 passages)."""
    world = tmp_path_factory.mktemp("world")
    section = T.build_text(world, [(corpus["dpr"], None), (corpus["kilt"], "kilt")], embedder="minilm",
                           engine="auto", progress=False, batch_size=8)
    return world, section, PS.open_text(world, section)


def test_build_writes_the_text_part_and_a_manifest_section(minilm_world, corpus):
    world, section, tw = minilm_world
    assert section["engine"] == "faiss" and section["dense"]["kind"] == "flat" and section["dim"] == 384
    assert section["documents"] == 18 and section["passages"] == len(tw) == len(tw.dense) == len(tw.bm25)
    assert [s["format"] for s in section["sources"]] == ["dpr-tsv", "kilt"]
    assert [s["path"] for s in section["sources"]] == [str(corpus["dpr"].resolve()), str(corpus["kilt"].resolve())]
    assert {p.name for p in (world / "text").iterdir()} == {"passages.sqlite", "vectors.npy", "dense.faiss", "bm25"}
    assert not (world / ".build" / "text" / "text").exists()  # staged folder renamed into place
    # the store round-trips every passage the readers produce
    expected = [p for path, fmt in ((corpus["dpr"], None), (corpus["kilt"], "kilt"))
                for p in P.iter_passages(path, fmt)]
    db = sqlite3.connect(world / "text" / "passages.sqlite")
    rows = db.execute("SELECT row, id, title, text, sources FROM passages ORDER BY row").fetchall()
    assert [(r[1], r[2], r[3], json.loads(r[4])) for r in rows] == \
        [(p["id"], p["title"], p["text"], p["sources"]) for p in expected]
    assert [r[0] for r in rows] == list(range(len(expected)))
    assert tw.passage(expected[5]["id"]) == {**expected[5], "row": 5}
    assert tw.passage("no-such-id") is None


def test_dense_and_bm25_find_the_one_passage_that_answers(minilm_world):
    _, _, tw = minilm_world
    for i in (2, 9):
        doc = G.document(i, 14)
        pid = G.passage_id("dpr-tsv", i)
        hits = tw.dense(f"Who founded {doc.title}?", k=3)
        assert hits[0].meta["id"] == pid and hits[0].source == "text"
        assert set(hits[0].meta) == {"id", "title", "sources"} and hits[0].meta["title"] == doc.title
        assert hits[0].score >= hits[1].score >= hits[2].score
        founder = doc.facts["founder"]
        bm = tw.bm25(f"founded by {founder}", k=3)
        assert bm[0].meta["id"] == pid and bm[0].source == "text" and founder in bm[0].text
        assert bm[0].score > (bm[1].score if len(bm) > 1 else 0)
    assert tw.bm25("zzzz qqqq", k=5) == [] and tw.dense("   ", k=3) == [] and tw.dense("x", k=0) == []
    assert len(tw.dense("anything", k=100)) == len(tw)  # k past the corpus: every passage, no -1 rows
    batch = tw.dense.search_many([f"Who founded {G.document(2, 14).title}?", ""], k=2)
    assert batch[0][0].meta["id"] == G.passage_id("dpr-tsv", 2) and batch[1] == []


def test_title_lookup_and_vectors(minilm_world):
    from hqa.retrievers.dense import passage_text
    from hqa.retrievers.embedding.encoders import embed

    _, _, tw = minilm_world
    assert tw.store.by_title(G.document(4, 14).title.upper())["id"] == "5"  # a page's first passage, any case
    p = tw.passage("5")
    got = tw.dense.vectors(["5", "2"])
    want = embed([passage_text(p), passage_text(tw.passage("2"))], None, batch_size=8)
    assert got.shape == (2, 384) and np.allclose(got, want, atol=1e-5)
    assert tw.dense.embedder_key == "minilm"
    with pytest.raises(KeyError):
        tw.dense.vectors(["no-such-id"])


def _dump(world: Path) -> dict:
    text = world / "text"
    db = sqlite3.connect(text / "passages.sqlite")
    try:
        rows = db.execute("SELECT * FROM passages ORDER BY row").fetchall()
    finally:
        db.close()
    bm25 = {p.name: p.read_bytes() for p in sorted((text / "bm25").iterdir())}
    return {"rows": rows, "vectors": (text / "vectors.npy").read_bytes(), "bm25": bm25,
            "faiss": (text / "dense.faiss").read_bytes()}


def test_an_interrupted_build_resumes_and_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    src = [(gen(tmp_path, "jsonl", 30, ".gz"), None), (gen(tmp_path, "dpr-tsv", 9), None)]
    monkeypatch.setattr(T, "EMBED_CHECKPOINT_ROWS", 4)  # a checkpoint after every batch of 4
    monkeypatch.setattr(T, "INGEST_COMMIT", 7)

    whole = CountingHash()
    use_embed(monkeypatch, whole)
    ref = T.build_text(tmp_path / "ref", src, engine="faiss", batch_size=4, progress=False)

    # 1. killed while reading the first source: only committed documents survive, reading resumes after them
    real_chunk = T.chunk_document
    seen = {"n": 0}

    def dying_chunk(doc, words):
        seen["n"] += 1
        if seen["n"] == 17:
            raise KeyboardInterrupt
        return real_chunk(doc, words)

    monkeypatch.setattr(T, "chunk_document", dying_chunk)
    world = tmp_path / "w"
    with pytest.raises(KeyboardInterrupt):
        T.build_text(world, src, engine="faiss", batch_size=4, progress=False)
    assert not (world / "text").exists()
    db = sqlite3.connect(world / ".build" / "text" / "text" / "passages.sqlite")
    assert db.execute("SELECT source, documents, done FROM ingest").fetchall() == [(0, 14, 0)]
    first14 = sum(len(real_chunk(d, 100)) for _, d in zip(range(14), P.iter_documents(src[0][0])))
    assert db.execute("SELECT COUNT(*) FROM passages").fetchone()[0] == first14
    db.close()
    monkeypatch.setattr(T, "chunk_document", real_chunk)

    # 2. killed while embedding, after 3 batches
    dying = CountingHash(fail_after=3)
    use_embed(monkeypatch, dying)
    with pytest.raises(RuntimeError, match="killed mid-build"):
        T.build_text(world, src, engine="faiss", batch_size=4, progress=False)
    assert not (world / "text").exists()
    assert json.loads((world / ".build" / "text" / "embed.json").read_text())["done"] == 12

    # 3. rerun: embeds only what is left, ends with the same files as the uninterrupted build
    rest = CountingHash()
    use_embed(monkeypatch, rest)
    section = T.build_text(world, src, engine="faiss", batch_size=4, progress=False)
    assert len(rest.texts) == ref["passages"] - 12 and rest.texts == whole.texts[12:]
    assert {k: v for k, v in section.items() if k != "seconds"} == {k: v for k, v in ref.items() if k != "seconds"}
    assert _dump(world) == _dump(tmp_path / "ref")
    a, b = PS.open_text(world, section), PS.open_text(tmp_path / "ref", ref)
    q = G.document(3, 30).title
    assert [e.meta["id"] for e in a.dense(q, 5)] == [e.meta["id"] for e in b.dense(q, 5)]
    assert [e.meta["id"] for e in a.bm25(q, 5)] == [e.meta["id"] for e in b.bm25(q, 5)] != []

    # 4. a finished build run again returns its section without redoing anything
    again = CountingHash()
    use_embed(monkeypatch, again)
    assert T.build_text(world, src, engine="faiss", batch_size=4, progress=False) == section and not again.texts


def test_duplicate_passage_ids_name_the_line(tmp_path, monkeypatch):
    path = tmp_path / "dup.jsonl"
    path.write_text('{"id": "a", "title": "A", "text": "x y"}\n{"id": "b", "title": "B", "text": "z"}\n'
                    '{"id": "a", "title": "C", "text": "w"}\n', encoding="utf-8")
    use_embed(monkeypatch, CountingHash())
    with pytest.raises(DataError, match=rf"{path}:3: duplicate passage id 'a'"):
        T.build_text(tmp_path / "w", [(path, None)], progress=False)


def test_engine_choice():
    url = "http://127.0.0.1:19530"
    assert T.choose_engine("auto") == ("faiss", "") and T.choose_engine(None) == ("faiss", "")
    assert T.choose_engine("auto", url) == ("milvus", url) and T.choose_engine(url) == ("milvus", url)
    assert T.choose_engine("milvus") == ("milvus", "") and T.choose_engine("faiss") == ("faiss", "")
    with pytest.raises(WorldError, match="must be one of"):
        T.choose_engine("qdrant")
    with pytest.raises(WorldError, match="needs --dense-engine milvus"):
        T.choose_engine("faiss", url)
    with pytest.raises(WorldError, match="must be http"):
        T.choose_engine("milvus", "/tmp/x.db")


# ------------------------------------------------------------------------------------------------------------
# the hop: BM25 over passages next to dense, vector sharing
# ------------------------------------------------------------------------------------------------------------
def _toolbox(dense, text_bm25, reranker):
    from hqa.config import Settings
    from hqa.toolbox import Toolbox

    from conftest import ScriptedLinker, ScriptedSparql, fake_bm25

    return Toolbox(Settings(), dense=dense, text_bm25=text_bm25, bm25=fake_bm25, reranker=reranker,
                   sparql=ScriptedSparql(), linker=ScriptedLinker({}))


def test_hop_adds_passages_only_bm25_finds_and_dedupes_by_id(minilm_world):
    from conftest import KeepOrderReranker
    from hqa.retrievers.hop import HopRequest, HopRetriever

    _, _, tw = minilm_world
    doc = G.document(6, 14)
    target = G.passage_id("dpr-tsv", 6)
    other = tw.passage("1")

    def dense_elsewhere(q, k=5):  # a dense retriever that misses the answer
        return [Evidence(text=other["text"], source="text", score=0.9,
                         meta={"id": "1", "title": other["title"], "sources": other["sources"]})][:k]

    q = f"founded by {doc.facts['founder']}"
    r = HopRetriever(_toolbox(dense_elsewhere, tw.bm25, KeepOrderReranker())).run(
        q, HopRequest(searches=[q]), k=10, k_per_source=2)
    ids = [e.meta.get("id") for e in r.kept if e.source == "text"]
    assert target in ids and "1" in ids and len(ids) == len(set(ids))
    assert [c["tool"] for c in r.tool_calls] == ["dense", "text_bm25", "rerank"]
    assert "text_bm25_ms" in r.timings and r.timings["text_bm25_ms"] >= 0

    # the same passage from both retrievers is one item of the pool
    both = HopRetriever(_toolbox(lambda q, k=5: tw.bm25(q, k), tw.bm25, KeepOrderReranker())).run(
        q, HopRequest(searches=[q]), k=10, k_per_source=2)
    assert both.n_pool == 2  # 2 passages, each found twice
    assert len(both.passages) == 4

    # without a text BM25 the hop is what it was
    none = HopRetriever(_toolbox(dense_elsewhere, None, KeepOrderReranker())).run(
        q, HopRequest(searches=[q]), k=10, k_per_source=2)
    assert target not in [e.meta.get("id") for e in none.kept] and "text_bm25_ms" not in none.timings


def test_hop_shares_world_vectors_with_the_bi_encoder(minilm_world, monkeypatch):
    import hqa.retrievers.embedding.encoders as embed_mod
    from hqa.retrievers.hop import HopRequest, HopRetriever
    from hqa.retrievers.rerank import Reranker

    _, _, tw = minilm_world
    real = embed_mod.embed
    calls: list[list[str]] = []

    def spy(texts, name=None, **kw):
        calls.append([texts] if isinstance(texts, str) else list(texts))
        return real(texts, name, **kw)

    doc = G.document(11, 14)
    q = f"Who founded {doc.title}?"
    shared = Reranker(model=None)
    tb = _toolbox(tw.dense, tw.bm25, shared)
    assert HopRetriever(tb)._can_share_vectors()
    monkeypatch.setattr(embed_mod, "embed", spy)  # what the reranker embeds itself
    out = HopRetriever(tb).run(q, HopRequest(searches=[q, doc.facts["founder"]]), k=6, k_per_source=3)
    monkeypatch.undo()
    embedded = {t for call in calls for t in call}
    assert embedded <= {"Gabon capital Libreville"}  # only the fake triple: no passage (dense or BM25), no query
    assert out.kept[0].meta.get("id") == G.passage_id("dpr-tsv", 11)
    fresh = Reranker(model=None).rerank(q, [e for e in out.kept], k=6)
    assert [e.text for e in fresh] == [e.text for e in out.kept]
    assert [round(e.score, 4) for e in fresh] == [round(e.score, 4) for e in out.kept]


def test_world_use_sets_the_query_side_to_the_passages_embedder(tmp_path, monkeypatch, capsys):
    """``hqa world use`` on a world whose passages were embedded with ``minilm-int8`` writes that embedder into the
    config too: the linker and the reranker then embed with it, so the reranker takes the stored vectors of the dense
    hits instead of embedding those passages again."""
    from hqa.cli.entry import main
    from hqa.config import load_settings
    from hqa.retrievers.embedding import encoders as E
    from hqa.retrievers.hop import HopRequest, HopRetriever
    from hqa.toolbox import Toolbox

    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(tmp_path / "art"))
    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "hqa.toml"))
    (tmp_path / "hqa.toml").write_text("")
    src = gen(tmp_path, "jsonl", 8)
    assert main(["world", "build", "w8", "--passages", f"{src}:jsonl", "--embedder", "minilm-int8", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["world", "use", "w8"]) == 0
    assert "models.embedder = minilm-int8" in capsys.readouterr().out
    config = (tmp_path / "hqa.toml").read_text()
    assert 'path = "w8"' in config and 'embedder = "minilm-int8"' in config

    settings = load_settings()
    settings.models.reranker = ""  # the bi-encoder: the path that shares vectors
    tb = Toolbox(settings)
    hop = HopRetriever(tb)
    assert tb.reranker.embedder_key == tb.dense.embedder_key == "minilm-int8" and hop._can_share_vectors()
    doc = G.document(3, 8)
    question = f"Who founded {doc.title}?"
    embedded: list[str] = []
    real = E.embed
    monkeypatch.setattr(E, "embed", lambda texts, *a, **kw: (embedded.extend([texts] if isinstance(texts, str) else
                                                                              texts), real(texts, *a, **kw))[1])
    res = hop.run(question, HopRequest(searches=[question]), k=3, k_per_source=3)
    assert res.kept and all(e.source == "text" for e in res.kept)
    assert embedded == [question]  # the passages' vectors are the stored ones
    # a second `use` changes nothing more
    assert main(["world", "use", "w8"]) == 0 and "models.embedder" not in capsys.readouterr().out
