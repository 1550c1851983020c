"""Untrusted model output: random and adversarial strings at the SPARQL layer, every agent tool, the linker and
the CLI — no exception escapes, and nothing is ever written to the store."""

import hashlib
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hqa.errors import QueryRejected
from hqa.programs.tools import ALL_TOOLS, AgentTools
from hqa.retrievers.base import Evidence
from hqa.retrievers.registry import Toolbox
from hqa.retrievers.sparql import OxigraphSparql, prepare_query

UPDATES = ["INSERT DATA { <urn:a> <urn:b> <urn:c> }", "DELETE WHERE { ?s ?p ?o }", "CLEAR ALL", "DROP DEFAULT",
           "LOAD <file:///etc/passwd>", "CREATE GRAPH <urn:g>", "ADD DEFAULT TO <urn:g>", "MOVE DEFAULT TO <urn:g>",
           "COPY DEFAULT TO <urn:g>", "WITH <urn:g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
           "INSERT { ?s <urn:p> 1 } WHERE { ?s ?p ?o }"]


def casing(text: str, flips: list[bool]) -> str:
    return "".join(c.upper() if f else c.lower() for c, f in zip(text, flips + [False] * len(text)))


adversarial = st.one_of(
    st.text(max_size=300),
    st.builds(lambda u, flips, sep: casing(u, flips).replace(" ", sep), st.sampled_from(UPDATES),
              st.lists(st.booleans(), max_size=80), st.sampled_from([" ", "\n", "\t", "  ", " #c\n "])),
    st.builds(lambda u: f"SELECT * WHERE {{ ?s ?p ?o }} ; {u}", st.sampled_from(UPDATES)),
    st.builds(lambda u: f"PREFIX wd: <http://evil/> {u}", st.sampled_from(UPDATES)),
    st.builds(lambda n: "{" * n + "SELECT" + "}" * n, st.integers(0, 60)),
    st.sampled_from(['SELECT ?x WHERE { ?x rdfs:label "unterminated }', "SELECT ?x WHERE { SERVICE <http://e> {} }",
                     "select * { service   silent   <http://e> { ?s ?p ?o } }", "ASK {", "\x00", "#", "x" * 30_000,
                     'SELECT ?x WHERE { ?x rdfs:label "LOAD <x>" }', "DESCRIBE wd:Q1000", "CONSTRUCT WHERE { ?s ?p ?o }"]),
)


def store_digest(store: OxigraphSparql) -> str:
    import pyoxigraph as ox  # the backend's own queries run in a worker process: read the store directly

    quads = sorted(str(q) for q in ox.Store.read_only(str(store.path)).quads_for_pattern(None, None, None, None))
    return hashlib.sha256("\n".join(quads).encode()).hexdigest()


@pytest.fixture(scope="module")
def store(built_pack):
    return OxigraphSparql(built_pack / "pack" / "kg", timeout=5, limit=20)


@settings(max_examples=300, deadline=None)
@given(adversarial)
def test_prepare_query_accepts_only_read_forms_or_rejects(text):
    try:
        form, full = prepare_query(text)
    except QueryRejected:
        return
    assert form in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE")
    from rdflib.plugins.sparql.parser import parseQuery

    parseQuery(full)  # what goes to the store is a parseable read query


def test_store_never_written_under_adversarial_input(store):
    before = store_digest(store)

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(adversarial)
    def run(text):
        res = store.run(text)
        assert res.ok or res.error

    run()
    assert store_digest(store) == before


def fake_dense(query, k=5):
    return [Evidence(text="text", source="text", meta={"id": "p", "title": "t"})][:k]


def test_every_tool_returns_an_observation(settings_for):
    tb = Toolbox(settings_for(), dense=fake_dense)
    before = store_digest(tb.sparql)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.sampled_from(ALL_TOOLS + ("Finish", "Nope", "")), adversarial)
    def run(tool, arg):
        tools = AgentTools(tb, "question?", lambda *a: arg)
        out = tools(tool, arg)
        assert isinstance(out, str) and out

    run()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text(max_size=200))
    def link(text):
        assert isinstance(tb.linker.link(text, text), list)
        assert isinstance(tb.linker.spot(text), list)

    link()
    assert store_digest(tb.sparql) == before


@pytest.mark.real_lm
@pytest.mark.parametrize("question", ["'; DROP ALL; --", "SELECT * WHERE { ?s ?p ?o }", "🙂 " * 50, "Wer ist Gödel?",
                                      "x" * 5000])
def test_cli_odd_questions(tmp_path, question):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--program", "closedbook", "--json", question],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
