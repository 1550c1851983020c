"""Bounded SPARQL on the embedded store (time, memory, Ctrl-C) and the read-only gate deciding from the parse tree."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hqa.errors import QueryRejected
from hqa.retrievers.sparql.guard import prepare_query
from hqa.retrievers.sparql.backends import OxigraphSparql

ONE_HOP = "SELECT ?p ?o WHERE { wd:Q1000 ?p ?o }"


def test_worker_is_reused_between_queries(kg):
    backend = OxigraphSparql(kg, timeout=5.0, limit=20)
    try:
        backend.run(ONE_HOP)
        pids = {w.proc.pid for w in backend.store._all}
        for _ in range(5):
            assert backend.run(ONE_HOP).rows
        assert {w.proc.pid for w in backend.store._all} == pids and len(pids) == 1
        limits = Path(f"/proc/{pids.pop()}/limits").read_text()
        cap = next(line.split()[3] for line in limits.splitlines() if line.startswith("Max address space"))
        assert cap != "unlimited" and int(cap) > 1024 * 1024 * 1024  # the store's own size + kg.memory_mb (1024)
    finally:
        backend.close()
    assert not backend.store._all


def test_results_match_the_in_process_store(kg):
    isolated = OxigraphSparql(kg, timeout=5.0, limit=7)
    inproc = OxigraphSparql(kg, timeout=5.0, limit=7, isolate=False)
    try:
        for q in (ONE_HOP, "ASK { wd:Q1000 ?p ?o }", "DESCRIBE wd:Q1000", "SELECT ?s WHERE { ?s ?p ?o }",
                  "SELECT ?x WHERE { ?x wdt:P31 ?y FILTER(?y > ) }"):
            a, b = isolated.run(q).to_dict(), inproc.run(q).to_dict()
            a.pop("elapsed_ms"), b.pop("elapsed_ms")
            assert a == b
        assert isolated.run("SELECT ?s WHERE { ?s ?p ?o }").truncated
    finally:
        isolated.close()


def test_missing_store_is_one_clear_error(tmp_path):
    from hqa.errors import PackMissingError

    (tmp_path / "kg").mkdir()
    (tmp_path / "kg" / "CURRENT").write_text("garbage")
    with pytest.raises(PackMissingError, match="cannot open Oxigraph store"):
        OxigraphSparql(tmp_path / "kg")


# -- the read-only gate ------------------------------------------------------------------------------------------
READ_WITH_UPDATE_WORDS = [
    "SELECT ?insert WHERE { ?insert ?p ?o }",
    "PREFIX ex: <http://example.org/>\nSELECT ?x WHERE { ?x ex:add ?y }",
    "SELECT ?with ?delete ?load ?clear ?drop ?create ?copy ?move ?add WHERE { ?with ?delete ?load }",
    "PREFIX ex: <http://example.org/>\nASK { ex:drop ex:copy ex:move }",
    "SELECT ?service WHERE { ?service ?p ?o }",
    "SELECT ?x WHERE { ?x wdt:P31 ?y } ORDER BY ?insert",
]


@pytest.mark.parametrize("query", READ_WITH_UPDATE_WORDS)
def test_update_words_as_names_pass_the_gate(query):
    form, full = prepare_query(query)
    assert form in ("SELECT", "ASK")


@pytest.mark.parametrize("query,op", [
    ("INSERT DATA { <urn:a> <urn:b> <urn:c> }", "INSERT DATA"),
    ("DELETE DATA { <urn:a> <urn:b> <urn:c> }", "DELETE DATA"),
    ("DELETE WHERE { ?s ?p ?o }", "DELETE WHERE"),
    ("INSERT { ?s <urn:p> 1 } WHERE { ?s ?p ?o }", "INSERT"),
    ("WITH <urn:g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }", "WITH DELETE"),
    ("LOAD <http://127.0.0.1:9/x>", "LOAD"), ("CLEAR ALL", "CLEAR"), ("DROP GRAPH <urn:g>", "DROP"),
    ("CREATE GRAPH <urn:g>", "CREATE"), ("ADD DEFAULT TO <urn:g>", "ADD"), ("MOVE DEFAULT TO <urn:g>", "MOVE"),
    ("COPY DEFAULT TO <urn:g>", "COPY"), ("PREFIX ex: <urn:x#>\nINSERT DATA { ex:insert ex:add ex:select }", "INSERT"),
])
def test_every_update_form_is_refused_by_name(query, op):
    with pytest.raises(QueryRejected, match=f"refused: SPARQL update operation {op}"):
        prepare_query(query)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["insert", "add", "delete", "load", "clear", "drop", "create", "move", "copy", "with",
                                 "service", "x"]), min_size=1, max_size=4),
       st.sampled_from(["?", "ex:"]))
def test_reads_named_after_update_keywords_pass(words, sigil):
    names = [f"{sigil}{w}{i}" if i else f"{sigil}{w}" for i, w in enumerate(words)]
    prefix = "PREFIX ex: <http://example.org/>\n"
    var = "?v"
    triple = " ".join((names + [var, var])[:3]) if sigil == "ex:" else " ".join((names * 3)[:3])
    projection = var if sigil == "ex:" else " ".join(dict.fromkeys(names))
    query = f"{prefix}SELECT {projection} WHERE {{ {triple} }}"
    assert prepare_query(query)[0] == "SELECT"
