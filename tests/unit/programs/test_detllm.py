"""DETLLM (DIVKNOWQA's decompose–retrieve–answer program): hop count, LM-call budget, SPARQL handling, context flow.

Unit tests script the LM with DummyLM and inject a fake toolbox (tagged dense/BM25 evidence, an order-keeping
reranker, a recording SPARQL backend).  One test runs scripted hops over the real pack's retrievers; one smoke test
runs the embedded SmolLM2 end to end.
"""

from __future__ import annotations

import copy
from pathlib import Path

import dspy
import pytest
from conftest import KeepOrderReranker, ScriptedLinker, ScriptedSparql
from detllmkit import HOP_KEYS, Q, ans, one_query, plan, run
from dspy.utils import DummyLM

from hqa.programs.detllm import DETLLM, clean_sparql, ground_sparql
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox

WD = "http://www.wikidata.org/entity/"
CAPITAL_OF = "SELECT ?c WHERE { ?c wdt:P36 wd:Q3825 }"
CONTINENT = "SELECT ?x WHERE { wd:Q1000 wdt:P30 ?x }"


# -- fakes ---------------------------------------------------------------------------------------------------------
def gabon_sparql():
    return ScriptedSparql({"wdt:P36 wd:Q3825": [{"c": WD + "Q1000"}], "wd:Q1000 wdt:P30": [{"x": WD + "Q15"}]},
                          labels={"Q1000": "Gabon", "Q3825": "Libreville", "Q15": "Africa"})


def gabon_linker():
    return ScriptedLinker({"Q1000": "Gabon", "Q3825": "Libreville", "Q15": "Africa"})


class Recorder:
    """A fake retriever returning evidence tagged with the query, so each hop's items are distinct."""

    def __init__(self, source: str, n: int = 2):
        self.source, self.n, self.calls = source, n, []

    def __call__(self, query, k=5):
        self.calls.append((query, k))
        out = []
        for i in range(min(self.n, k)):
            meta = ({"id": f"{query}#{i}", "title": f"T{i}"} if self.source == "text"
                    else {"s": f"s:{query}", "p": f"p{i}", "o": f"o{i}"})
            out.append(Evidence(text=f"{self.source} item {i} for <{query}>", source=self.source, score=1.0 - i / 10,
                                meta=meta))
        return out


class NoCopy:
    def __deepcopy__(self, memo):
        raise AssertionError("the toolbox must never be deep-copied")


@pytest.fixture()
def fake(tmp_path):
    from hqa.config import load_settings

    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path))
    parts = dict(dense=Recorder("text"), bm25=Recorder("triples"), reranker=KeepOrderReranker(), linker=gabon_linker(),
                 sparql=gabon_sparql())
    parts["dense"].guard = NoCopy()  # a part that raises if the toolbox's parts are ever deep-copied
    tb = Toolbox(settings, **parts)
    return tb


# -- hop count and the LM-call budget ----------------------------------------------------------------------------
@pytest.mark.parametrize("hops", [1, 2, 3])
def test_hops_and_exactly_hops_plus_one_lm_calls(fake, hops):
    answers = [plan(f"query {i}") for i in range(1, hops + 1)] + [ans("Africa")]
    pred, lm = run(one_query(hops=hops, k=3, toolbox=fake), answers)
    t = pred.trace
    assert pred.answer == "Africa" and t["answers"]["final"] == "Africa"
    assert len(t["hops"]) == hops and [h["hop"] for h in t["hops"]] == list(range(1, hops + 1))
    assert t["lm_calls"] == hops + 1 and len(lm.history) == hops + 1 and t["lm_requests"] == hops + 1
    for h in t["hops"]:
        assert HOP_KEYS <= set(h)
        assert set(h["n_by_source"]) == {"text", "triples", "sparql"}
        assert len(h["kept"]) == 3 and all(e["source"] in ("text", "triples", "sparql") and "meta" in e
                                           for e in h["kept"])
    assert [s["step"] for s in t["steps"]] == ["hop"] * hops + ["answer"]
    assert len(t["evidence"]) == 3 * hops
    # each hop retrieved with its own search query; BM25 got query + entity
    assert [q for q, _ in fake.dense.calls] == [f"query {i}" for i in range(1, hops + 1)]
    assert [q for q, _ in fake.bm25.calls] == [f"query {i} Gabon" for i in range(1, hops + 1)]


def test_named_predictors_are_distinct_per_hop():
    for hops in (1, 2, 3):
        prog = one_query(hops=hops, demos="none")
        named = prog.named_predictors()
        assert [n for n, _ in named] == [f"hop{i}" for i in range(1, hops + 1)] + ["answer"]
        assert len({id(p) for _, p in named}) == hops + 1
    prog = one_query(hops=2, demos="none")
    prog.hop1.demos = [dspy.Example(question="q", context=[], hop=1, rationale="r", search_query="s",
                                    query_entity="e", sparql="None")]
    assert prog.hop2.demos == []  # demos are per hop


# -- SPARQL handling -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("none", ["None", "none", "", "N/A", "```\nNone\n```", "null"])
def test_none_sparql_is_not_executed(fake, none):
    pred, _ = run(one_query(hops=2, toolbox=fake),
                  [plan("capital Libreville", sparql=none), plan("continent of Gabon", sparql=none), ans("x")])
    assert fake.sparql.queries == []
    for h in pred.trace["hops"]:
        assert h["sparql"] is None and h["sparql_ok"] is None and h["sparql_rows"] == 0
        assert h["n_by_source"]["sparql"] == 0
    assert pred.trace["sparql"] == [] and pred.trace["answers"]["kg"] is None


def test_sparql_errors_are_trace_entries_not_crashes(fake):
    answers = [plan("capital Libreville", sparql="SELECT BROKEN"),
               plan("continent of Gabon", sparql="SELECT ?x WHERE { RAISE }"), ans("Africa")]
    pred, _ = run(one_query(hops=2, toolbox=fake), answers)
    t = pred.trace
    assert pred.answer == "Africa"
    assert [h["sparql_ok"] for h in t["hops"]] == [False, False]
    assert len(t["sparql"]) == 2 and all(s["error"] for s in t["sparql"])
    assert "malformed" in t["hops"][0]["sparql_errors"][0]
    assert "RuntimeError" in t["hops"][1]["sparql_errors"][0]
    assert all(h["n_by_source"]["sparql"] == 0 for h in t["hops"])


def test_sparql_rows_become_evidence_and_kg_answer(fake):
    answers = [plan("country with capital Libreville", entity="Libreville", sparql=CAPITAL_OF),
               plan("continent of Gabon", entity="Gabon", sparql=f"```sparql\n{CONTINENT}\n```"),
               ans("Africa")]
    pred, _ = run(one_query(hops=2, k=10, toolbox=fake), answers)
    t = pred.trace
    assert fake.sparql.queries == [CAPITAL_OF, CONTINENT]  # fences stripped
    assert [h["sparql_ok"] for h in t["hops"]] == [True, True]
    assert [h["sparql_rows"] for h in t["hops"]] == [1, 1]
    kept_sparql = [e for e in t["hops"][0]["kept"] if e["source"] == "sparql"]
    assert kept_sparql and kept_sparql[0]["text"] == "c=Gabon (Q1000)"
    assert kept_sparql[0]["meta"]["query"] == CAPITAL_OF  # provenance
    assert t["answers"]["kg"] == "Africa"  # labels of the last hop that returned rows
    assert t["hops"][0]["linked_entities"][0]["id"] == "Q3825"
    assert {e["id"] for e in t["entities"]} == {"Q3825", "Q1000"}
    # DIVKNOWQA §4.3: candidates are disambiguated by the hop's query, not the full question
    assert fake.linker.calls == [("Libreville", "country with capital Libreville"), ("Gabon", "continent of Gabon")]


def test_unresolvable_entity_reference_is_grounded_by_the_linker(fake):
    answers = [plan("continent of Gabon", entity="Gabon", sparql="SELECT ?x WHERE { wd:Gabon wdt:P30 ?x }"),
               ans("Africa")]
    pred, _ = run(one_query(hops=1, toolbox=fake), answers)
    assert fake.sparql.queries == [CONTINENT]
    h = pred.trace["hops"][0]
    assert h["grounded"] == [{"from": "Gabon", "to": "Q1000"}] and h["sparql_rows"] == 1


def test_ground_sparql_rules():
    assert ground_sparql("SELECT ?x WHERE { wd:ENTITY wdt:P36 ?x }", "Q1")[0] == "SELECT ?x WHERE { wd:Q1 wdt:P36 ?x }"
    q = "SELECT ?x WHERE { wd:Q5 wdt:P36 ?x }"
    assert ground_sparql(q, "Q1") == (q, None)  # a QID is kept when there is no local id set
    assert ground_sparql(q, "Q1", known={"Q1"}) == ("SELECT ?x WHERE { wd:Q1 wdt:P36 ?x }", "Q5")
    two = "SELECT ?x WHERE { wd:A wdt:P36 wd:B }"
    assert ground_sparql(two, "Q1") == (two, None)  # ambiguous: left alone
    assert ground_sparql(q, None) == (q, None)


def test_clean_sparql():
    assert clean_sparql(None) is None and clean_sparql(" None. ") is None and clean_sparql("'none'") is None
    assert clean_sparql("```sparql\nASK { ?s ?p ?o }\n```") == "ASK { ?s ?p ?o }"
    assert clean_sparql("SPARQL: SELECT ?x WHERE { ?x ?p ?o }") == "SELECT ?x WHERE { ?x ?p ?o }"


# -- context flows from hop to hop -----------------------------------------------------------------------------------
def _user_text(entry) -> str:
    return "\n".join(str(m.get("content", "")) for m in entry["messages"] if m.get("role") == "user")


def test_hop2_context_contains_evidence_kept_at_hop1(fake):
    answers = [plan("first query", sparql=CAPITAL_OF), plan("second query"), ans("Africa")]
    pred, lm = run(one_query(hops=2, k=3, toolbox=fake), answers)
    t = pred.trace
    hop1_lines = [f"[{e['source']}] " + (f"{e['meta']['title']}: {e['text']}" if e["meta"].get("title") else e["text"])
                  for e in t["hops"][0]["kept"]]
    first, second, final = (_user_text(e) for e in lm.history)
    assert "first query" not in first  # hop 1 starts from an empty context
    for line in hop1_lines:
        assert line in second
        assert line in final
    for e in t["hops"][1]["kept"]:
        assert e["text"] in final and e["text"] not in second
    # no evidence is kept twice across hops
    keys = [(e["source"], e["text"]) for e in t["evidence"]]
    assert len(keys) == len(set(keys))
    assert "[[ ## hop ## ]]\n2" in second


def test_evidence_kept_earlier_is_not_kept_again(fake):
    # the same search query twice: hop 2 retrieves the same items, which must not be re-added
    answers = [plan("same query"), plan("same query"), ans("x")]
    pred, _ = run(one_query(hops=2, k=10, toolbox=fake), answers)
    h1, h2 = pred.trace["hops"]
    assert len(h1["kept"]) == 4 and h2["kept"] == []


# -- self-consistency sampling -----------------------------------------------------------------------------------------
def test_samples_make_several_hop_calls_with_distinct_rollouts(fake):
    answers = []
    sparqls = {1: [CAPITAL_OF, CAPITAL_OF, "None"], 2: [CONTINENT, "None", "None"]}
    for hop in (1, 2):
        answers += [plan(f"h{hop} q{s}", sparql=sparqls[hop][s]) for s in range(3)]
    answers.append(ans("Africa"))
    pred, lm = run(DETLLM(hops=2, samples=3, temperature=0.7, toolbox=fake), answers)
    t = pred.trace
    assert t["lm_calls"] == 7 and len(lm.history) == 7
    for hop in (0, 1):
        calls = lm.history[3 * hop: 3 * hop + 3]
        assert [c["kwargs"].get("rollout_id") for c in calls] == [0, 1, 2]
        assert all(c["kwargs"].get("temperature") == 0.7 for c in calls)
        assert len(t["hops"][hop]["samples"]) == 3
        assert t["hops"][hop]["search_queries"] == [f"h{hop + 1} q{s}" for s in range(3)]
    assert "rollout_id" not in lm.history[-1]["kwargs"]  # the final answer is a single plain call
    assert [q for q, _ in fake.dense.calls] == [f"h{h} q{s}" for h in (1, 2) for s in range(3)]
    assert fake.sparql.queries == [CAPITAL_OF, CONTINENT]  # distinct queries of a hop run once each
    assert t["hops"][0]["sparqls"] == [CAPITAL_OF] and t["answers"]["kg"] == "Africa"


def test_deepcopy_and_state_never_touch_the_toolbox(fake):
    prog = one_query(hops=2, toolbox=fake)
    run(prog, [plan("a"), plan("b"), ans("x")])
    clone = prog.deepcopy()  # NoCopy in the toolbox would raise if it were reachable
    copy.deepcopy(prog)
    assert clone.toolbox is prog.toolbox and clone.hop1 is not prog.hop1  # the toolbox copies to itself
    for value in vars(prog).values():
        assert not isinstance(value, (Recorder, ScriptedSparql, ScriptedLinker, KeepOrderReranker))
    state = prog.dump_state()
    assert set(state) == {"hop1", "hop2", "answer"}


def test_parse_failure_at_a_hop_falls_back_to_the_question(fake):
    answers = [{"nonsense": "x"}, {"nonsense": "y"}, plan("second"), ans("x")]
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = one_query(hops=2, toolbox=fake)(question=Q)
    h1 = pred.trace["hops"][0]
    assert h1["errors"] and h1["search_query"] == Q
    assert pred.trace["lm_calls"] == 3  # logical calls; the adapter's JSON retry shows up in lm_requests
    assert pred.trace["lm_requests"] == 4


def test_request_counting_keeps_the_callers_callbacks(fake):
    from dspy.utils.callback import BaseCallback

    class Mine(BaseCallback):
        n = 0

        def on_lm_start(self, call_id, instance, inputs):
            Mine.n += 1

    lm = DummyLM([plan("a"), plan("b"), ans("x")])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(), callbacks=[Mine()]):
        pred = one_query(hops=2, toolbox=fake)(question=Q)
        assert len(dspy.settings.callbacks) == 1  # the counter is gone after the call
    assert Mine.n == 3 and pred.trace["lm_requests"] == 3
