"""Untrusted model output, property-based, in process (the unit half of tests/integration/test_fuzz.py, which has the
store, the servers on 127.0.0.1, the tools and the CLI): fixed and generated SPARQL at ``prepare_query``, the label
service and DESCRIBE limits, any text at the entity linker, and any model output in an evaluation row."""

from __future__ import annotations

import json
import time

import dspy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sparqlkit import READS

from hqa.errors import QueryRejected
from hqa.toolbox import Toolbox
from hqa.retrievers.sparql.guard import prepare_query

FAST = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))



def test_fixed_read_queries_are_accepted():
    for text in READS:
        if text.lstrip("`").lower().startswith("sparql"):
            continue
        prepare_query(text, 20, local_labels=False)  # raises QueryRejected if the gate refused a read


def test_label_service_is_allowed_only_where_it_is_harmless():
    q = ('SELECT ?x ?xLabel WHERE { wd:Q1000 wdt:P36 ?x . '
         'SERVICE wikibase:label { bd:serviceParam wikibase:language "en". } }')
    assert "SERVICE" not in prepare_query(q, local_labels=True)[1]  # rewritten for the local store
    assert "SERVICE wikibase:label" in prepare_query(q, local_labels=False)[1]  # passed on to Wikidata as is
    redefined = "PREFIX wikibase: <http://evil.example/#>\n" + q
    with pytest.raises(QueryRejected, match="SERVICE http://evil.example/#label"):
        prepare_query(redefined, local_labels=False)
    nested = "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x . SERVICE wikibase:label { { { ?x ?p ?o } } } }"
    with pytest.raises(QueryRejected, match="SERVICE"):  # not rewritable: must not leave the local store
        prepare_query(nested, local_labels=True)
    with pytest.raises(QueryRejected, match="SERVICE"):
        prepare_query("SELECT * WHERE { \\u0053ERVICE <http://evil.example/> { ?s ?p ?o } }")


def test_describe_limit_is_lowered_not_duplicated():
    _, full = prepare_query("DESCRIBE wd:Q1000 LIMIT 5000", limit=10)
    assert full.count("LIMIT") == 1 and full.rstrip().endswith("LIMIT 11")


def test_entity_linker_takes_any_text(settings_for):
    linker = Toolbox(settings_for()).linker

    @settings(max_examples=60, **FAST)
    @given(st.one_of(st.text(max_size=300), st.sampled_from(["Gabon", "Q1000", "[Q1000]", "'Q99999999999999999999'",
                                                             "Libreville " * 400, "\x00", "\ud800", "ｇａｂｏｎ"])),
           st.text(max_size=100), st.integers(-3, 20))
    def run(mention, question, k):
        for cands in (linker.link(mention, question, k=k), linker.spot(mention, k=k), linker.spot(question, k=k)):
            assert isinstance(cands, list)
            for c in cands:
                assert c.id in linker.entities or c.id.startswith("Q")
                json.dumps(c.to_dict(), ensure_ascii=False)
        assert isinstance(linker.labels([mention, "Q1000"]), dict)
        assert linker.label(mention) is None or isinstance(linker.label(mention), str)

    run()


# -- evaluation rows hold whatever the LM said ---------------------------------------------------------------------
def test_evaluation_rows_survive_any_model_output(tmp_path):
    from hqa.jobs.evaluate import evaluate
    from hqa.schemas.run_folder import read_rows

    @settings(max_examples=30, **FAST)
    @given(st.lists(st.text(max_size=80) | st.sampled_from(["\ud800", "\udcff", "\x00", "\u2028", '"}\n{"id": 1}']),
                    min_size=1, max_size=3))
    def run(answers):
        class Echo(dspy.Module):
            def forward(self, question):
                return dspy.Prediction(answer=answers[int(question[1:]) % len(answers)],
                                       trace={"answers": {"final": answers}, "sparql": [{"error": answers[0]}]})

        out = tmp_path / f"run-{time.monotonic_ns()}" / "predictions.jsonl"
        examples = [dspy.Example(id=f"id{i}", question=f"q{i}", answers=[answers[0]]).with_inputs("question")
                    for i in range(len(answers))]
        summary = evaluate(Echo(), examples, out=out)
        assert summary.n == len(answers) and summary.errors == 0
        rows = read_rows(out)
        assert sorted(r["id"] for r in rows) == sorted(ex.id for ex in examples)

    run()
