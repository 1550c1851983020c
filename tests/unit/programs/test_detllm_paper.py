"""DETLLM against DIVKNOWQA (§3, Appendix A.3, Tables 3 and 6): the rendered prompts carry the paper's three
demonstrations and rationale fields, t diverse queries are sampled at 0.7, reranking and entity disambiguation use
the hop's single-hop question, and each retrieval arm of Table 3 / oracle of Table 6 reaches the sources it names.

The LM is scripted (``DummyLM``); its ``history`` holds the messages each call rendered.
"""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from conftest import KeepOrderReranker, ScriptedLinker, ScriptedSparql
from dspy.utils import DummyLM

from hqa.errors import ConfigError
from hqa.programs.detllm import DETLLM, paper_demos
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox

Q = "Which continent is the country whose capital is Libreville in?"
DEMOS = json.loads((Path(__file__).resolve().parents[3] / "hqa/data/detllm/divknowqa_demos.json").read_text())


class Recorder:
    """A retriever returning one item tagged with its name and the query; records the queries."""

    def __init__(self, source: str, name: str):
        self.source, self.name, self.calls = source, name, []

    def __call__(self, query, k=5):
        self.calls.append(query)
        meta = ({"id": f"{self.name}:{query}", "title": self.name} if self.source == "text"
                else {"s": self.name, "p": "p", "o": query})
        return [Evidence(text=f"{self.name} hit for {query}", source=self.source, score=1.0, meta=meta)][:k]


class TripleRecorder(Recorder):
    """The triple BM25 stand-in, with the triple set a dense KB index or a unified index is built from."""

    triples = [{"s": "Q1000", "p": "P36", "o": "Q3825", "s_label": "Gabon", "p_label": "capital",
                "o_label": "Libreville"},
               {"s": "Q1000", "p": "P30", "o": "Q15", "s_label": "Gabon", "p_label": "continent", "o_label": "Africa"}]


PASSAGES = [{"id": "p1", "title": "Gabon", "text": "Gabon is a country on the west coast of Central Africa."},
            {"id": "p2", "title": "Libreville", "text": "Libreville is the capital and largest city of Gabon."}]


@pytest.fixture()
def tb(tmp_path):
    from hqa.config import load_settings

    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path))
    box = Toolbox(settings, dense=Recorder("text", "dense"), text_bm25=Recorder("text", "textbm25"),
                  bm25=TripleRecorder("triples", "kbbm25"), reranker=KeepOrderReranker(), passages=PASSAGES,
                  linker=ScriptedLinker({"Q1000": "Gabon", "Q3825": "Libreville"}),
                  sparql=ScriptedSparql({"wd:Q1000 wdt:P30": [{"x": "http://www.wikidata.org/entity/Q15"}]}))
    return box


def plan(search, entity="Gabon", sparql="None"):
    return {"rationale": "step by step", "search_query": search, "query_entity": entity, "sparql": sparql}


ANSWER = {"rationale": "Gabon is in Africa.", "answer": "Africa"}


def run(program, replies, question=Q):
    lm = DummyLM(replies)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        return program(question=question), lm


def rendered(entry) -> str:
    return "\n".join(str(m.get("content", "")) for m in entry["messages"])


# -- the prompts: three demonstrations and the rationale fields (Appendix A.3) ----------------------------------------
def test_zero_compile_prompts_carry_the_papers_three_demonstrations_and_rationales(tb):
    program = DETLLM(hops=2, samples=1, toolbox=tb)
    pred, lm = run(program, [plan("capital Libreville"), plan("continent of Gabon"), ANSWER])
    hop1, hop2, final = (rendered(e) for e in lm.history)
    for prompt, name, fields in ((hop1, "hop1", ("rationale", "search_query", "query_entity", "sparql")),
                                 (hop2, "hop2", ("rationale", "search_query", "query_entity", "sparql")),
                                 (final, "answer", ("rationale", "answer"))):
        assert "[[ ## rationale ## ]]" in prompt  # the output field the paper's "Rationale:" line is
        for demo in DEMOS[name]:  # each of Prompt 3 / 4 / 5's three examples, every output as printed
            for field in fields:
                assert demo[field] in prompt, (name, field)
    assert "Martina Navratilova" not in hop1 and "Martina Navratilova" in hop2  # Prompt 3 first, Prompt 4 later
    # the final step's rationale is in the trace
    assert pred.trace["steps"][-1]["rationale"] == "Gabon is in Africa." and pred.answer == "Africa"


def test_paper_demos_match_the_data_file_and_can_be_switched_off():
    demos = paper_demos()
    assert {k: len(v) for k, v in demos.items()} == {"hop1": 3, "hop2": 3, "answer": 3}
    assert "Prompt 3" in DEMOS["source"] and "Prompt 4" in DEMOS["source"] and "Prompt 5" in DEMOS["source"]
    program = DETLLM(hops=3)
    assert [len(p.demos) for _, p in program.named_predictors()] == [3, 3, 3, 3]
    assert program.hop3.demos[0].search_query == DEMOS["hop2"][0]["search_query"]  # Prompt 4 for every later hop
    assert all(p.demos == [] for _, p in DETLLM(hops=2, demos="none").named_predictors())


# -- t diverse queries at temperature 0.7, fused --------------------------------------------------------------------
def test_default_samples_t_diverse_queries_at_temperature_0_7_and_fuses_them(tb):
    program = DETLLM(hops=1, toolbox=tb)
    assert program.samples == 3 and program.temperature == 0.7
    pred, lm = run(program, [plan("capital of Gabon"), plan("Gabon capital city"), plan("capital of Gabon"), ANSWER])
    hop_calls = lm.history[:3]
    assert [c["kwargs"].get("temperature") for c in hop_calls] == [0.7, 0.7, 0.7]
    assert [c["kwargs"].get("rollout_id") for c in hop_calls] == [0, 1, 2]
    assert pred.trace["lm_calls"] == 4 and len(lm.history) == 4
    assert tb.dense.calls == ["capital of Gabon", "Gabon capital city"]  # every distinct query searches
    assert pred.trace["hops"][0]["search_queries"] == ["capital of Gabon", "Gabon capital city"]


# -- rerank against the hop's single-hop question (§3.3) ------------------------------------------------------------
def test_rerank_query_is_the_hops_single_hop_question(tb):
    pred, _ = run(DETLLM(hops=2, toolbox=tb),
                  [plan("country with capital Libreville"), plan("capital Libreville"), plan("Libreville country"),
                   plan("continent of Gabon"), plan("Gabon continent"), plan("continent of Gabon"), ANSWER])
    assert tb.reranker.queries == ["country with capital Libreville", "continent of Gabon"]
    assert [h["rerank_query"] for h in pred.trace["hops"]] == tb.reranker.queries
    run(DETLLM(hops=1, samples=1, rerank_query="question", toolbox=tb), [plan("x"), ANSWER])
    assert tb.reranker.queries[-1] == Q


# -- Table 3's arms ---------------------------------------------------------------------------------------------------
def test_text_is_dense_only_by_default_and_bm25_passages_is_the_sparse_ablation(tb):
    run(DETLLM(hops=1, samples=1, toolbox=tb), [plan("capital of Gabon"), ANSWER])
    assert tb.dense.calls == ["capital of Gabon"] and tb.text_bm25.calls == []
    assert tb.bm25.calls == ["capital of Gabon Gabon"]  # BM25 over linearized triples: query + entity
    run(DETLLM(hops=1, samples=1, text_retriever="sparse", toolbox=tb), [plan("sparse q"),
                                                                                                  ANSWER])
    assert tb.text_bm25.calls == ["sparse q"] and "sparse q" not in tb.dense.calls
    run(DETLLM(hops=1, samples=1, text_retriever="both", toolbox=tb), [plan("both q"), ANSWER])
    assert tb.text_bm25.calls[-1] == "both q" and tb.dense.calls[-1] == "both q"


def test_sparql_off_runs_no_query(tb):
    q = "SELECT ?x WHERE { wd:Q1000 wdt:P30 ?x }"
    run(DETLLM(hops=1, samples=1, toolbox=tb), [plan("continent", sparql=q), ANSWER])
    assert tb.sparql.queries == [q]
    pred, _ = run(DETLLM(hops=1, samples=1, sparql=False, toolbox=tb), [plan("continent",
                                                                                                      sparql=q),
                                                                                    ANSWER])
    assert tb.sparql.queries == [q] and pred.trace["sparql"] == []


def test_dense_kb_and_unified_sources_search_their_own_indexes(tb):
    pred, _ = run(DETLLM(hops=1, samples=1, kb_retriever="dense", toolbox=tb),
                  [plan("continent of Gabon"), ANSWER])
    triples = pred.trace["triples"]
    assert tb.bm25.calls == []
    assert {t["text"] for t in triples} == {"Gabon continent Africa", "Gabon capital Libreville"}
    assert triples[0]["text"] == "Gabon continent Africa"  # the dense index ranks the continent triple first
    calls = len(tb.dense.calls)
    pred, _ = run(DETLLM(hops=1, samples=1, sources="unified", text_retriever="sparse",
                         toolbox=tb),
                  [plan("Libreville capital"), ANSWER])
    h = pred.trace["hops"][0]
    assert len(tb.dense.calls) == calls and tb.bm25.calls == []  # neither separate retriever ran
    # one index over passages and triples: both kinds come back from the one "text" search
    found = {(e["source"], e["text"]) for e in pred.trace["passages"]}
    assert ("triples", "Gabon capital Libreville") in found
    assert ("text", "Libreville is the capital and largest city of Gabon.") in found
    assert h["n_by_source"]["triples"] == 0


def test_bad_arm_names_are_one_clear_error():
    with pytest.raises(ConfigError, match="sources must be one of separate, unified"):
        DETLLM(sources="merged")
    with pytest.raises(ConfigError, match="oracle must be off, all or hop<N>"):
        DETLLM(oracle="text")


# -- Table 6's oracle: gold sub-answers join the hop's evidence -----------------------------------------------------
def test_oracle_puts_the_gold_sub_answer_of_the_chosen_hop_into_the_evidence(tb):
    from hqa.data.datasets import load_dataset

    rec = load_dataset("bamboogle", limit=1)[0]
    gold = rec.meta["decomposition"]
    pred, lm = run(DETLLM(hops=2, samples=1, k=2, oracle="hop2", toolbox=tb),
                   [plan("first"), plan("second"), ANSWER], question=rec.question)
    h1, h2 = pred.trace["hops"]
    assert not any(e["meta"].get("oracle") for e in h1["kept"])
    assert h2["kept"][0]["meta"]["oracle"] and gold[1]["answers"][0] in h2["kept"][0]["text"]
    assert len(h2["kept"]) == 2  # the oracle item takes one of the k slots
    assert gold[1]["answers"][0] in rendered(lm.history[-1])


def test_human_traces_stay_an_option_and_fill_the_answer_rationale():
    """A compiled program's demos (HumanIQ traces mapped onto the hops) replace the paper's; the answer demo carries
    the human's last thought as the rationale the answer prompt now asks for."""
    from hqa.data.human import load_human_library
    from hqa.programs.detllm import human_hop_demos

    demo = load_human_library(("mintaka",))[0]
    answer = human_hop_demos(demo, hops=2)["answer"]
    assert answer.rationale == [s.thought for s in demo.steps if s.thought.strip()][-1] and answer.answer
    spec = DETLLM(hops=2).human_demo_builders()
    assert set(spec) == {"hop1", "hop2", "answer"} and spec["answer"].build(demo).rationale == answer.rationale


def test_arm_indexes_belong_to_their_toolbox(tmp_path):
    from hqa.config import load_settings
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path))
    one = Toolbox(settings, passages=PASSAGES[:1])
    two = Toolbox(settings, passages=PASSAGES[1:])
    first = one.doc_index("text", "sparse", None)
    assert one.doc_index("text", "sparse", None) is first  # built once per toolbox
    assert one.view(dense=first).doc_index("text", "sparse", None) is first  # a view shares its toolbox's indexes
    assert [e.meta["id"] for e in first("Gabon", 5)] == ["p1"]
    assert [e.meta["id"] for e in two.doc_index("text", "sparse", None)("Gabon", 5)] == ["p2"]
    assert "Libreville" not in json.dumps(DETLLM(toolbox=one).dump_state())  # no index in the program's state
