"""HQA agent, static pipeline and late fusion driven by DummyLM over the real pack's SPARQL store and linker."""

import dspy
import pytest
from dspy.utils import DummyLM
from lmkit import step

from hqa.programs.humaniq import HumanIQAgent, human_react_demo
from hqa.programs.latefusion import LateFusion
from hqa.programs.static import StaticPipeline
from hqa.programs.humaniq_tools import AgentTools
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox

Q = "What is the capital of Gabon?"


def fake_dense(query, k=5):
    return [Evidence(text="Libreville is the capital and largest city of Gabon.", source="text", score=0.9,
                     meta={"id": "p-test", "title": "Libreville"})][:k]


@pytest.fixture()
def toolbox(settings_for):
    return Toolbox(settings_for(), dense=fake_dense)


def run(program, answers, question=Q):
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        return program(question=question), lm


def test_agent_uses_tools_in_order_and_merges(toolbox):
    answers = [
        step("Find the QID of Gabon", "GetWikidataID", "Gabon"),
        step("Query its capital", "RunSparql", "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }"),
        step("Label the result", "GetLabel", "[Q3825]"),
        step("Check Wikipedia", "WikiSearch", "capital of Gabon"),
        {"title": "Libreville", "summary": "Libreville is the capital of Gabon."},  # WikiSearch's relevant page
        step("Done", "Finish", "Wikipedia_Answer: Libreville, Wikidata_Answer: [Libreville]"),
        {"answer": "Paris"},  # parametric (wrong on purpose: the merge must be what decides)
        {"answer": "Libreville"},  # merge
    ]
    pred, lm = run(HumanIQAgent(toolbox=toolbox), answers)
    trace = pred.trace
    assert [c["tool"] for c in trace["tool_calls"]] == ["GetWikidataID", "RunSparql", "GetLabel", "WikiSearch"]
    obs = {c["tool"]: c["output"] for c in trace["tool_calls"]}
    assert obs["GetWikidataID"].startswith("['Q1000'")
    assert "Q3825" in obs["RunSparql"] and obs["GetLabel"] == "['Libreville']"
    assert trace["sparql"][0]["rows"] == [{"x": "http://www.wikidata.org/entity/Q3825"}]
    assert trace["answers"] == {"parametric": "Paris", "text": "Libreville", "kg": "Libreville", "final": "Libreville"}
    assert trace["finished"] and pred.answer == "Libreville"
    assert obs["WikiSearch"] == "Page: Libreville\nSummary: Libreville is the capital of Gabon."
    assert len(lm.history) == 8


def test_agent_stops_at_max_iters_and_extracts(toolbox):
    page = {"title": "Libreville", "summary": "Libreville is the capital of Gabon."}  # WikiSearch's relevant page
    searches = ("Gabon", "Libreville", "capital of Gabon")
    answers = [a for q in searches for a in (step("search", "WikiSearch", q), page)] + [
        {"wikipedia_answer": "Libreville", "wikidata_answer": "None", "assistant_response": "Found in text."},
        {"answer": "Libreville"},
        {"answer": "Libreville"},
    ]
    pred, lm = run(HumanIQAgent(max_iters=3, toolbox=toolbox), answers)
    assert len(pred.trace["tool_calls"]) == 3 and not pred.trace["finished"]
    assert pred.trace["answers"]["text"] == "Libreville" and pred.trace["answers"]["kg"] is None


def test_bad_tool_input_is_an_observation(toolbox):
    tools = AgentTools(toolbox, Q, lambda *a: "", allowed=("WikiSearch", "RunSparql", "GetLabel"))
    assert tools("RunSparql", "DROP ALL") == str({"message": "The given query failed, please reconstruct your query "
                                                              "and try again."})
    assert "refused" in tools.calls[0].error
    assert "GetWikidataID is not a valid tool" in tools("GetWikidataID", "Gabon")
    assert tools("GetLabel", "no ids here").startswith("Try again by passing values in a Python List")
    assert tools("WikiSearch", "").endswith("needs an input.")
    assert len(tools.calls) == 4


def test_static_pipeline_fixed_order(settings_for):
    """HumanIQ RQ6's static order: search (with the agent's page choice), GetWikidataID of the page chosen (not of
    mentions spotted in the question), GenerateSparql, RunSparql, GetLabel (LM calls: the page choice, the Wikipedia
    answer read from that page, the query, memory, the merge)."""
    def gabon_page(query, k=5):
        return [Evidence(text="Gabon is a country in Central Africa; its capital is Libreville.", source="text",
                         score=0.9, meta={"id": "p-gabon", "title": "Gabon"})][:k]

    static_test_tb = Toolbox(settings_for(programs_answer_mode="free"), dense=gabon_page)
    answers = [
        {"title": "Gabon", "summary": "Gabon's capital is Libreville."},  # WikiSearch's page choice, as the agent's
        {"answer": "Libreville"},  # the Wikipedia answer read from the chosen page
        {"squall": "What is the <P36:capital> of <Q1000:Gabon>?"},  # generateQuery writes SQUALL (HumanIQ §3)
        {"answer": "Libreville"},  # parametric
        {"answer": "Libreville"},  # merge
    ]
    pred, lm = run(StaticPipeline(toolbox=static_test_tb), answers)
    calls = pred.trace["tool_calls"]
    assert [c["tool"] for c in calls] == ["WikiSearch", "GetWikidataID", "GenerateSparql", "RunSparql", "GetLabel"]
    assert calls[0]["input"] == Q and calls[1]["input"] == "Gabon"  # the page found
    assert calls[2]["input"] == f"{Q} # [Q1000]"  # HumanIQ's generateQuery input: question # [QIDs]
    assert calls[2]["output"].startswith("SELECT DISTINCT ?x1 WHERE { wd:Q1000 p:P36 ?x2")  # translated SQUALL
    assert pred.trace["answers"]["kg"] == "Libreville" and pred.trace["page"] == "Gabon"
    assert pred.trace["answers"]["text"] == "Libreville" and calls[0]["relevant_page"] == "Gabon"
    assert len(lm.history) == 5


def test_late_fusion_runs_separate_pipelines_and_random_merge(toolbox):
    answers = [
        step("search", "WikiSearch", "Gabon capital"),
        {"title": "Libreville", "summary": "Libreville is the capital of Gabon."},  # WikiSearch's relevant page
        step("done", "Finish", "Wikipedia_Answer: Libreville"),
        step("query", "RunSparql", "SELECT ?x1 WHERE { wd:Q1000 wdt:P36 ?x1 }"),  # the structured half's own tool
        step("done", "Finish", "Wikidata_Answer: [Libreville]"),
    ]
    pred, lm = run(LateFusion(merge="random", toolbox=toolbox), answers)
    text_tools = [c["tool"] for c in pred.trace["pipelines"]["text"]["tool_calls"]]
    kg_tools = [c["tool"] for c in pred.trace["pipelines"]["kg"]["tool_calls"]]
    assert text_tools == ["WikiSearch"] and kg_tools == ["RunSparql"]
    assert pred.answer == "Libreville" and len(lm.history) == 5  # random merge makes no LM call


def test_late_fusion_text_agent_cannot_touch_the_kg(toolbox):
    """The text-only agent is told of the text tools only (its step signature's tool names and instructions), and a
    KG tool named anyway is refused with HumanIQ's "not a valid tool" observation, never run."""
    from hqa.programs.latefusion import UNSTRUCTURED_TOOLS
    from hqa.programs.humaniq_tools import TEXT_TOOLS

    agent = LateFusion(merge="lm", toolbox=toolbox).text_agent
    names = agent.react.signature.output_fields["next_tool_name"].annotation.__args__
    assert set(names) == set(UNSTRUCTURED_TOOLS) | {"Finish"} == {"WikiSearch", "Read", "Finish"}  # RQ4's
    assert "RunSparql" not in agent.react.signature.instructions
    tools = AgentTools(toolbox, Q, lambda *a: "", allowed=TEXT_TOOLS)
    assert tools("RunSparql", "SELECT ?x WHERE { ?x ?p ?o }").startswith("RunSparql is not a valid tool, try one of [")
    assert tools.sparql_log == []


def test_stepwise_ablation_shows_human_processes_step_by_step(toolbox):
    """``demo_form="stepwise"`` (the ablation): at agent step i each human demo is the human's first i steps → its
    step i+1; past its last step, its Finish.  The prompts of the first and second calls carry the humans' first and
    second actions as demo outputs."""
    from hqa.data.human import load_human_library
    from hqa.programs.humaniq import step_demo

    humans = [d for d in load_human_library(("mintaka",)) if len([s for s in d.steps if s.action]) >= 2][:2]
    agent = HumanIQAgent(toolbox=toolbox, max_iters=3, demo_form="stepwise")
    agent.react.demos = [human_react_demo(d) for d in humans]
    answers = [step("search", "WikiSearch", "Gabon"), {"title": "Gabon", "summary": "A country."},
               step("link", "GetWikidataID", "Gabon"),
               step("done", "Finish", "Wikipedia_Answer: Libreville, Wikidata_Answer: [None]"),
               {"answer": "Libreville"}, {"answer": "Libreville"}]
    pred, lm = run(agent, answers)
    assert [c["tool"] for c in pred.trace["tool_calls"]] == ["WikiSearch", "GetWikidataID"]

    def demo_outputs(call: int) -> list[tuple[str, str]]:
        """(next_tool_name, next_tool_args) of the demos in the prompt of LM call ``call``."""
        msgs = lm.history[call]["messages"]
        shown = [m["content"] for m in msgs[1:-1] if m["role"] == "assistant"]
        out = []
        for text in shown:
            name = text.split("[[ ## next_tool_name ## ]]")[1].split("[[ ##")[0].strip()
            args = text.split("[[ ## next_tool_args ## ]]")[1].split("[[ ##")[0].strip()
            out.append((name, args))
        return out

    step_calls = [0, 2, 3]  # call 1 is WikiSearch's relevant-page LM
    for i in range(3):
        expected = []
        for d in humans:
            acts = [s for s in d.steps if s.action]
            expected.append((acts[i].action, acts[i].action_input.strip()) if i < len(acts) else
                            ("Finish", human_react_demo(d).next_tool_args))
        assert demo_outputs(step_calls[i]) == expected, i
    first_user = [m["content"] for m in lm.history[0]["messages"] if m["role"] == "user"][:-1]
    second_user = [m["content"] for m in lm.history[2]["messages"] if m["role"] == "user"][:-1]
    assert all("Action:" not in u for u in first_user)  # step 1: the humans' trajectories are still empty
    assert all(u.count("Action:") == 1 for u in second_user)  # step 2: each shows its human's first step
    # the stored demo stays the whole process; a bootstrapped demo without steps is shown as it is
    assert agent.react.demos[0].next_tool_name == "Finish"
    plain = dspy.Example(question="q", trajectory="", next_thought="t", next_tool_name="Finish", next_tool_args="x")
    assert step_demo(plain, 0) is plain


def assert_trace_is_what_ran(pred, toolbox, k: int = 3):
    """A real-LM run's trace is what happened: the final answer is one of the source answers (grounded merge with
    the embedded LM), and every retrieval tool call's recorded output is what that tool returns for its input."""
    from hqa.programs.humaniq_tools import AgentTools
    answers = pred.trace["answers"]
    assert answers["final"] == pred.answer
    candidates = pred.trace.get("merge_candidates")
    assert candidates and pred.answer in candidates, (pred.answer, candidates)
    from_evidence = {c["text"] for cs in (pred.trace.get("source_candidates") or {}).values() for c in cs}
    assert set(candidates) <= {answers["text"], answers["kg"], answers["parametric"]} | from_evidence
    replay = AgentTools(toolbox, Q, lambda *a: "", k=k)
    replayed = [c for c in pred.trace["tool_calls"] if c["tool"] in ("WikiSearch", "GetWikidataID", "GetLabel")
                and not c.get("relevant_page")]  # a search whose LM chose a page is not replayed without that LM
    for call in replayed:
        assert replay(call["tool"], call["input"]) == call["output"], call["tool"]


@pytest.mark.real_lm
def test_agent_smoke_real_lm(toolbox):
    from hqa.config import load_settings
    from hqa.lm.models import build_lm

    lm = build_lm(load_settings(environ={}))
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = HumanIQAgent(max_iters=2, toolbox=toolbox)(question=Q)
    assert 1 <= len(pred.trace["steps"]) <= 2
    assert set(pred.trace["answers"]) == {"parametric", "text", "kg", "final"}
    assert_trace_is_what_ran(pred, toolbox)


def test_unparsable_step_is_recorded_not_raised(toolbox):
    bad = step("x", "NotATool", "y")
    answers = [bad, bad, bad, bad, {"answer": "Libreville"}, {"answer": "Libreville"}]
    pred, _ = run(HumanIQAgent(max_iters=3, toolbox=toolbox), answers)
    assert pred.trace["errors"] and pred.trace["errors"][0]["error"] == "unparsable LM reply"
    assert pred.trace["tool_calls"] == [] and pred.answer == "Libreville"


@pytest.mark.real_lm
@pytest.mark.parametrize("make", [lambda tb: StaticPipeline(toolbox=tb),
                                  lambda tb: LateFusion(max_iters=1, toolbox=tb)],
                         ids=["static", "latefusion"])
def test_baselines_smoke_real_lm(settings_for, make):
    from hqa.config import load_settings
    from hqa.lm.models import build_lm

    agent_real_tb = Toolbox(settings_for())
    lm = build_lm(load_settings(environ={}))
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = make(agent_real_tb)(question=Q)
    assert pred.trace["tool_calls"] and set(pred.trace["answers"]) == {"parametric", "text", "kg", "final"}
    assert_trace_is_what_ran(pred, agent_real_tb)
    if pred.trace["program"] == "static":  # the fixed order: search, the QID of the page found, generateQuery
        order = [s["tool"] for s in pred.trace["steps"]]
        head = ["WikiSearch"] + ["GetWikidataID"] * bool(pred.trace["page"]) + ["GenerateSparql"]
        assert order[:len(head)] == head, order


def test_repeated_identical_tool_call_is_not_run_again_and_ends_the_loop(settings_for):
    """The agent asking the same thing at every step (observed with the embedded model: WikiSearchSummary with one
    input at all 8 steps) gets "already done, see step N" and is stopped at the second repeat."""
    answers = [
        step("search", "WikiSearchSummary", "first person to walk on the moon"),
        step("search again", "WikiSearchSummary", "  First person to walk on the Moon "),  # same up to case/spaces
        step("and again", "WikiSearchSummary", "first person to walk on the moon"),
        {"wikipedia_answer": "Neil Armstrong", "wikidata_answer": "None", "assistant_response": "Found in text."},
        {"answer": "Neil Armstrong"},
        {"answer": "Neil Armstrong"},
    ]
    # free-text answers: the agent's own Finish/extract answers are what this test follows (grounded answering of
    # the sources is tested in test_grounded)
    agent_free_tb = Toolbox(settings_for(programs_answer_mode="free"), dense=fake_dense)
    pred, lm = run(HumanIQAgent(max_iters=8, toolbox=agent_free_tb), answers,
                   question="Who first walked on the moon?")
    trace = pred.trace
    assert len(trace["tool_calls"]) == 1  # run once
    assert [(r["step"], r["repeat_of"]) for r in trace["repeated_tool_calls"]] == [(2, 1), (3, 1)]
    assert trace["steps"][1]["observation"].startswith("Already done: step 1 called WikiSearchSummary")
    assert trace["stopped"] == "2 repeated tool calls" and not trace["finished"]
    assert len(lm.history) == 6  # 3 steps (not 8), extract, parametric, merge
    assert pred.answer == "Neil Armstrong"


def test_a_different_input_is_run(toolbox):
    tools = AgentTools(Toolbox.__new__(Toolbox), Q, lambda *a: "", allowed=("Read",))
    assert AgentTools.call_key("WikiSearchSummary", " 'Gabon' ") == AgentTools.call_key("WikiSearchSummary", "gabon")
    assert AgentTools.call_key("WikiSearchSummary", "Gabon") != AgentTools.call_key("WikiSearch", "Gabon")
    assert AgentTools.call_key("WikiSearch", "Gabon") != AgentTools.call_key("WikiSearch", "Gabon capital")
    assert AgentTools.call_key("Read", "Gabon") != AgentTools.call_key("WikiSearch", "Gabon")
    assert tools("Nope", "x").startswith("Nope is not a valid tool") and tools("Nope", "y").startswith("Nope is not")
    assert tools("Nope", "x").startswith("Already done: step 1")
