"""The kinds of part a toolbox holds (hqa/retrievers/base.py): each real part satisfies its protocol, each kind has its
own absent stand-in, the SPARQL backends share one guarded ``run``, and the hop shares vectors by protocol."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hqa.retrievers.base import (AbsentLinker, AbsentPassages, AbsentTriples, Linker, PassageSearch, SparqlResult,
                                 TripleSearch, VectorPassageSearch, VectorReranker)
from hqa.retrievers.sparql.backends import Failed, HttpSparql, OxigraphSparql, SparqlStore


def test_a_world_without_a_part_gets_that_kinds_absent_stand_in(tmp_path):
    from hqa.config import load_settings
    from hqa.toolbox import Toolbox
    from hqa.retrievers.world_manifest import World

    world = World(tmp_path, {"name": "bare", "kg": None, "labels": None, "text": None})
    tb = Toolbox(load_settings(Path("/nonexistent-hqa.toml"), environ={}), world=world)

    assert type(tb.sparql) is AbsentTriples and isinstance(tb.sparql, TripleSearch)
    res = tb.sparql.run("SELECT ?s WHERE { ?s ?p ?o }")
    assert isinstance(res, SparqlResult) and res.error == "world bare has no knowledge graph" and not res.rows
    assert tb.sparql.labels(["Q1"]) == {} and tb.sparql.ping() is None

    assert type(tb.linker.inner) is AbsentLinker and isinstance(tb.linker, Linker)
    assert tb.linker.link("Gabon") == [] and tb.linker.spot("Where is Gabon?") == []
    assert tb.linker.label("Q1") is None and tb.linker.title_to_qid("Gabon") is None and tb.linker.entities == {}

    assert type(tb.dense) is AbsentPassages and isinstance(tb.dense, PassageSearch)
    hits = tb.dense("capital of Gabon", 3)
    assert hits == [] and hits.error == "world bare has no passages"
    assert [h.error for h in tb.dense.search_many(["a", "b"])] == ["world bare has no passages"] * 2


def test_each_absent_stand_in_is_only_its_own_kind():
    passages, triples, linker = AbsentPassages("p"), AbsentTriples("t"), AbsentLinker("l")
    assert isinstance(passages, PassageSearch) and not isinstance(passages, (TripleSearch, Linker))
    assert isinstance(triples, TripleSearch) and not isinstance(triples, (PassageSearch, Linker))
    assert isinstance(linker, Linker) and not isinstance(linker, (PassageSearch, TripleSearch))


def test_the_real_parts_satisfy_their_protocols():
    from hqa.retrievers.linking.entities import EntityLinker, GuardedLinker
    from hqa.retrievers.passage_store import WorldDense
    from hqa.retrievers.rerank import Reranker

    assert isinstance(HttpSparql("http://127.0.0.1:9/sparql"), TripleSearch)
    linker = EntityLinker([{"id": "Q1", "label": "Gabon", "description": "country"}])
    assert isinstance(linker, Linker) and isinstance(GuardedLinker(linker), Linker)
    bi = Reranker(model=None)  # no cross-encoder: the bi-encoder on the packaged MiniLM
    assert isinstance(bi, VectorReranker) and bi.kind == "bi-encoder"
    for method in ("embed_queries", "search_vectors", "vectors", "search_many", "__call__"):
        assert callable(getattr(WorldDense, method)), method


class _Recorded(SparqlStore):
    """A backend whose store is a list of replies."""

    name = "recorded"

    def __init__(self, *replies):
        super().__init__()
        self.replies, self.seen = list(replies), []

    def where(self) -> str:
        return "the recorded store"

    def _execute(self, full: str) -> dict:
        self.seen.append(full)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_every_backend_runs_through_the_one_guarded_run():
    assert OxigraphSparql.run is HttpSparql.run is SparqlStore.run
    store = _Recorded({"rows": [{"s": "http://www.wikidata.org/entity/Q1"}], "variables": ["s"], "truncated": False},
                      {"boolean": True}, Failed("endpoint down", unavailable=True), {"error": "bad store"})
    refused = store.run("DELETE WHERE { ?s ?p ?o }")
    assert refused.error.startswith("refused") and store.seen == []  # the store never saw it
    rows = store.run("SELECT ?s WHERE { ?s ?p ?o }")
    assert rows.rows == [{"s": "http://www.wikidata.org/entity/Q1"}] and rows.variables == ["s"] and rows.ok
    assert "PREFIX wd:" in store.seen[0] and store.seen[0].rstrip().endswith("LIMIT 101")
    assert store.run("ASK { ?s ?p ?o }").boolean is True
    down = store.run("SELECT ?s WHERE { ?s ?p ?o }")
    assert down.error == "endpoint down" and down.unavailable
    assert store.run("SELECT ?s WHERE { ?s ?p ?o }").error == "bad store"
    store.replies.append({"error": "still bad"})
    with pytest.raises(Exception, match="the recorded store is not usable: still bad"):
        store.ping()


def test_the_hop_shares_vectors_only_between_parts_that_show_them():
    from hqa.retrievers.hop import HopRetriever

    class Dense:
        embedder_key = "minilm"

        def __call__(self, query, k=5):
            return []

        def search_many(self, queries, k=5):
            return [[] for _ in queries]

        def embed_queries(self, queries):
            return [[1.0] for _ in queries]

        def search_vectors(self, qv, k=5):
            return [[] for _ in qv]

        def vectors(self, ids):
            return []

    class BiEncoder:
        kind, embedder_key = "bi-encoder", "minilm"

        def add_vectors(self, texts, vectors):
            pass

    def hop(dense, reranker):
        return HopRetriever(SimpleNamespace(dense=dense, reranker=reranker))._can_share_vectors()

    assert isinstance(Dense(), VectorPassageSearch) and isinstance(BiEncoder(), VectorReranker)
    assert hop(Dense(), BiEncoder())
    no_vectors = type("NoVectors", (Dense,), {"vectors": None})()
    assert not hop(no_vectors, BiEncoder())  # a dense retriever that keeps no vectors
    other = BiEncoder()
    other.embedder_key = "bge"
    assert not hop(Dense(), other)  # another embedder's vectors are not comparable
    cross = BiEncoder()
    cross.kind = "cross-encoder"
    assert not hop(Dense(), cross)
    assert not hop(AbsentPassages("none"), BiEncoder())


def test_evidence_to_dict_is_asdict_with_meta_copied_as_deep():
    """Evidence.to_dict builds asdict's dict directly (issue 38): the same dict for JSON-like meta and for values
    asdict treats its own way (a tuple, a named tuple, a nested dataclass, any other object), and a copy the caller may
    change without changing the evidence."""
    import collections
    from dataclasses import asdict

    from hqa.retrievers.base import Evidence

    Pair = collections.namedtuple("Pair", "a b")
    meta = {"id": "p1", "title": "Paris", "score": 0.5, "ok": True, "none": None, "sources": ["wd", "pack"],
            "nested": {"rows": [[1, 2], (3, {"x": [4]})]}, "pair": Pair(1, [2]), "inner": Evidence("x", "text"),
            "other": SimpleNamespace(v=1)}
    evidence = Evidence("Paris is the capital of France.", "triples", 1.5, meta)
    out = evidence.to_dict()
    assert out == asdict(evidence) and list(out) == ["text", "source", "score", "meta"]
    assert type(out["meta"]["inner"]) is dict and type(out["meta"]["pair"]) is Pair
    assert type(out["meta"]["nested"]["rows"][1]) is tuple
    out["meta"]["sources"].append("changed")
    out["meta"]["nested"]["rows"][1][1]["x"].append(5)
    assert meta["sources"] == ["wd", "pack"] and meta["nested"]["rows"][1][1]["x"] == [4]
    assert out["meta"]["other"] is not meta["other"]  # asdict deep-copies any other object too
